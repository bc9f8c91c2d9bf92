using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.Sqlite;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>
/// A node that comes up with many queues and topics (a restart, a takeover) loads them side by
/// side: a queue or topic whose load is slow holds up no other, callers of the same queue share its
/// one load, a caller that gives up does not cancel the load the others wait for, and a subscription
/// added while its topic loads is part of the loaded topic.
/// </summary>
public sealed class EntityLoadTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    /// <summary>
    /// A real SQLite provider whose reads of <paramref name="entityId"/>'s head call
    /// <paramref name="onHeld"/> and then wait for <paramref name="release"/>.
    /// </summary>
    private static InterceptedStoreProvider HoldingHeadLoadOf(long entityId, Task release, Action onHeld) =>
        new(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
        {
            if (name == nameof(IContainerDatabase.LoadEntityHeadAsync) && (long)args[0]! == entityId)
            {
                onHeld();
                return HeldAsync();
            }
            return proceed();

            async Task<EntityLoad> HeldAsync()
            {
                await release;
                return await (Task<EntityLoad>)proceed()!;
            }
        });

    [Fact]
    public async Task ASlowLoad_HoldsUpNoOtherQueue_AndCallersOfTheSameQueueShareOneLoad()
    {
        var slow = await _farm.CreateQueueAsync("slow");
        await slow.SendAsync([Text("held")]);
        var others = new List<string>();
        for (var i = 0; i < 20; i++)
        {
            var name = $"other-{i}";
            others.Add(name);
            await (await _farm.CreateQueueAsync(name)).SendAsync([Text(name)]);
        }

        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var slowLoadStarted = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var slowLoads = 0;
        _farm.Provider = HoldingHeadLoadOf(slow.Id, release.Task, () =>
        {
            Interlocked.Increment(ref slowLoads);
            slowLoadStarted.TrySetResult();
        });
        await _farm.RestartAsync(crash: false);

        var first = _farm.QueueAsync("slow");
        await slowLoadStarted.Task.WaitAsync(TimeSpan.FromSeconds(30));
        using var givesUp = new CancellationTokenSource();
        var impatient = _farm.Node.ResolveQueueAsync("slow", givesUp.Token).AsTask();
        var second = _farm.QueueAsync("slow");

        // Every other queue loads and serves while the slow one's load is held.
        foreach (var name in others)
        {
            var queue = await _farm.QueueAsync(name).WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal(1, queue.GetCounts().Active);
        }
        await givesUp.CancelAsync();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => impatient);
        Assert.False(first.IsCompleted);

        release.SetResult();
        var loaded = await first.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Same(loaded, await second.WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal(1, loaded.GetCounts().Active);
        Assert.Equal(1, Volatile.Read(ref slowLoads));
    }

    /// <summary>
    /// A queue created on the node that serves its container starts loaded and empty, with no read
    /// of its head (left to its first use, 15,000 new queues were loaded all at once when their
    /// receivers opened); it serves from sequence number 1, and after a restart it is read back as
    /// stored.
    /// </summary>
    [Fact]
    public async Task AQueueCreatedOnTheNodeServingItsContainer_StartsLoaded_WithoutReadingItsHead()
    {
        var headReads = 0;
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, _, proceed) =>
        {
            if (name == nameof(IContainerDatabase.LoadEntityHeadAsync))
            {
                Interlocked.Increment(ref headReads);
            }
            return proceed();
        });
        await _farm.RestartAsync(crash: false);
        var admin = new Farm.Broker.Administration.EntityAdministration(_farm.Node, _farm.Provider);

        await admin.CreateQueueAsync(new Farm.Contracts.V1.CreateQueueRequest { Name = "fresh" }, CancellationToken.None);
        var queue = await _farm.QueueAsync("fresh");
        await queue.SendAsync([Text("first"), Text("second")]);
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var received = await queue.ReceiveAsync(false, Farm.Contracts.V1.ReceiveMode.PeekLock, 1, TimeSpan.Zero, deadline.Token);

        Assert.Equal(1, Assert.Single(received).SequenceNumber);
        Assert.Equal(0, Volatile.Read(ref headReads));

        await _farm.RestartAsync(crash: false);
        var reloaded = await _farm.QueueAsync("fresh");

        Assert.Equal(1, Volatile.Read(ref headReads));
        Assert.Equal(2, reloaded.GetCounts().Active);
    }

    [Fact]
    public async Task ASlowTopicLoad_HoldsUpNoOtherTopic_AndSubscriptionsAddedOrDeletedMeanwhileAreSoInTheLoadedTopic()
    {
        await _farm.CreateTopicAsync("slow-topic");
        var first = await _farm.CreateSubscriptionAsync("slow-topic", "first");
        var doomed = await _farm.CreateSubscriptionAsync("slow-topic", "doomed");
        await _farm.CreateTopicAsync("fast-topic");
        await _farm.CreateSubscriptionAsync("fast-topic", "only");

        // Held after the slow topic's load read its subscriptions: it reads each one's head next.
        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var slowLoadStarted = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _farm.Provider = HoldingHeadLoadOf(first.Id, release.Task, () => slowLoadStarted.TrySetResult());
        await _farm.RestartAsync(crash: false);

        var slowTopic = _farm.TopicAsync("slow-topic");
        await slowLoadStarted.Task.WaitAsync(TimeSpan.FromSeconds(30));

        // Another topic loads and serves while the slow one's load is held.
        var fastTopic = await _farm.TopicAsync("fast-topic").WaitAsync(TimeSpan.FromSeconds(30));
        await fastTopic.SendAsync([Text("fast")]);
        Assert.Equal(1, (await _farm.SubscriptionAsync("fast-topic", "only")).GetCounts().Active);

        // A subscription created now, as the management API does (its record, then the node is
        // told), after the held load read the topic's subscriptions: the node adds it to the topic
        // once loaded, so it gets the topic's next message (told while the topic was not loaded, it
        // would only be found by a later receive, and miss the messages sent before).
        var topicRecord = await _farm.Node.Farm.GetEntityAsync("slow-topic");
        var secondRecord = await _farm.Node.Farm.CreateChildEntityAsync(topicRecord!.Id, EntityNames.SubscriptionPath("slow-topic", "second"),
            EntityKinds.Subscription, new SubscriptionSettings().ToJson(), RuleDefinitions.DefaultRule.Name, RuleDefinitions.ToJson(RuleDefinitions.DefaultRule));
        var told = _farm.Node.AddSubscriptionAsync(secondRecord, CancellationToken.None);
        // And one deleted now, which the held load read before: it leaves the loaded topic.
        var doomedRecord = await _farm.Node.Farm.GetEntityAsync(doomed.Name);
        await _farm.Node.Farm.DeleteEntityAsync(doomed.Name);
        var dropped = _farm.Node.DropSubscriptionAsync(doomedRecord!);
        release.SetResult();
        await told.WaitAsync(TimeSpan.FromSeconds(30));
        await dropped.WaitAsync(TimeSpan.FromSeconds(30));
        var topic = await slowTopic.WaitAsync(TimeSpan.FromSeconds(30));
        await topic.SendAsync([Text("after")]);

        Assert.Equal(["first", "second"], topic.Subscriptions.Select(s => s.Name).Order());
        Assert.Equal(1, (await _farm.SubscriptionAsync("slow-topic", "first")).GetCounts().Active);
        Assert.Equal(1, (await _farm.SubscriptionAsync("slow-topic", "second")).GetCounts().Active);
    }
}
