using Farm.Broker.Containers;
using Farm.Broker.Entities;
using Farm.Contracts.V1;
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
    /// <paramref name="onHeld"/> and then wait for <paramref name="release"/>: before the read, or
    /// with <paramref name="afterTheRead"/> once it is done, before handing back what it read.
    /// </summary>
    private static InterceptedStoreProvider HoldingHeadLoadOf(long entityId, Task release, Action onHeld, bool afterTheRead = false) =>
        new(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
        {
            if (name != nameof(IContainerDatabase.LoadEntityHeadAsync) || (long)args[0]! != entityId)
            {
                return proceed();
            }
            if (!afterTheRead)
            {
                onHeld();
            }
            return HeldAsync();

            async Task<EntityLoad> HeldAsync()
            {
                if (!afterTheRead)
                {
                    await release;
                    return await (Task<EntityLoad>)proceed()!;
                }
                var load = await (Task<EntityLoad>)proceed()!;
                onHeld();
                await release;
                return load;
            }
        });

    /// <summary>
    /// Once <paramref name="held"/> says a load is held, loses the node's only container (its host
    /// begins closing), lets the load go on, and returns the lost host and the error the load ended with.
    /// </summary>
    private async Task<(ContainerHost Host, BrokerException Error)> LoseTheContainerWhileHeld(Task load, Task held, TaskCompletionSource release)
    {
        await held.WaitAsync(TimeSpan.FromSeconds(30));
        var host = Assert.Single(_farm.Node.Containers);
        _farm.Node.OnContainerLostForTests(host);
        release.SetResult();
        var error = await Assert.ThrowsAsync<BrokerException>(() => load.WaitAsync(TimeSpan.FromSeconds(30)));
        return (host, error);
    }

    /// <summary>
    /// A queue whose load finishes after its container was lost (the host is closing) is not left
    /// serving in the closed host: its callers see why, and nothing of it stays there. Before, it
    /// was registered in the closing host after the host had unloaded what it held; nothing would
    /// ever unload it, and its receivers waited on it for good (seen after restarts of 3 nodes).
    /// </summary>
    [Fact]
    public async Task AQueueLoadThatFinishesAfterItsContainerWasLost_LeavesNothingServingThere()
    {
        var queue = await _farm.CreateQueueAsync("late");
        await queue.SendAsync([Text("kept")]);
        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var read = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _farm.Provider = HoldingHeadLoadOf(queue.Id, release.Task, () => read.TrySetResult(), afterTheRead: true);
        await _farm.RestartAsync(crash: false);

        var (host, error) = await LoseTheContainerWhileHeld(_farm.QueueAsync("late"), read.Task, release);

        Assert.Equal(FarmErrorCode.ServiceBusy, error.Code);
        Assert.False(host.TryGetEntity(queue.Id, out _));
    }

    /// <summary>The same for a topic: a load that finishes after the loss leaves neither it nor its subscriptions serving there.</summary>
    [Fact]
    public async Task ATopicLoadThatFinishesAfterItsContainerWasLost_LeavesNothingServingThere()
    {
        var topic = await _farm.CreateTopicAsync("late-topic");
        var subscription = await _farm.CreateSubscriptionAsync("late-topic", "only");
        await topic.SendAsync([Text("kept")]);
        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var read = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _farm.Provider = HoldingHeadLoadOf(subscription.Id, release.Task, () => read.TrySetResult(), afterTheRead: true);
        await _farm.RestartAsync(crash: false);

        var (host, error) = await LoseTheContainerWhileHeld(_farm.TopicAsync("late-topic"), read.Task, release);

        Assert.Equal(FarmErrorCode.ServiceBusy, error.Code);
        Assert.False(host.TryGetTopic(topic.Id, out _));
        Assert.False(host.TryGetEntity(subscription.Id, out _));
    }

    /// <summary>The same for a subscription added to a loaded topic while its container is lost: it is not left serving there.</summary>
    [Fact]
    public async Task ASubscriptionAddedAsItsContainerIsLost_LeavesNothingServingThere()
    {
        await _farm.CreateTopicAsync("late-add");
        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var read = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        long holdFor = -1;
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), farmHook: (name, args, proceed) =>
        {
            if (name == nameof(IFarmStore.ListRulesAsync) && (long)args[0]! == Volatile.Read(ref holdFor))
            {
                return HeldAsync();
            }
            return proceed();

            async Task<IReadOnlyList<RuleRecord>> HeldAsync()
            {
                var rules = await (Task<IReadOnlyList<RuleRecord>>)proceed()!;
                read.TrySetResult();
                await release.Task;
                return rules;
            }
        });
        await _farm.RestartAsync(crash: false);
        var topic = await _farm.TopicAsync("late-add");
        var record = await _farm.Node.Farm.CreateChildEntityAsync(topic.Id, EntityNames.SubscriptionPath("late-add", "late"),
            EntityKinds.Subscription, new SubscriptionSettings().ToJson(), RuleDefinitions.DefaultRule.Name, RuleDefinitions.ToJson(RuleDefinitions.DefaultRule));
        Volatile.Write(ref holdFor, record.Id);

        var add = Assert.Single(_farm.Node.Containers).AddSubscriptionAsync(topic.Id, record, CancellationToken.None);
        var (host, error) = await LoseTheContainerWhileHeld(add, read.Task, release);

        Assert.Equal(FarmErrorCode.ServiceBusy, error.Code);
        Assert.False(host.TryGetEntity(record.Id, out _));
    }

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

    /// <summary>
    /// A node that starts with many stored queues (a restart, a takeover) asks the container in one
    /// read which of them are quiet (nothing stored): those start without a head load, the others
    /// get theirs; each serves as stored, a drained queue going on from its next sequence number.
    /// </summary>
    [Fact]
    public async Task AfterARestart_QuietQueuesStartWithoutAHeadLoad_AndEveryQueueServesAsStored()
    {
        var drained = new List<string>();
        var holding = new List<string>();
        var untouched = new List<string>();
        for (var i = 0; i < 30; i++)
        {
            var name = $"q-{i}";
            var queue = await _farm.CreateQueueAsync(name);
            switch (i % 3)
            {
                case 0:
                    await queue.SendAsync([Text("a"), Text("b")]);
                    using (var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30)))
                    {
                        Assert.Equal(2, (await queue.ReceiveAsync(false, Farm.Contracts.V1.ReceiveMode.ReceiveAndDelete, 2, TimeSpan.Zero, deadline.Token)).Count);
                    }
                    drained.Add(name);
                    break;
                case 1:
                    await queue.SendAsync([Text(name)]);
                    holding.Add(name);
                    break;
                default:
                    untouched.Add(name);
                    break;
            }
        }

        var headLoads = new System.Collections.Concurrent.ConcurrentBag<long>();
        var askedQuiet = new System.Collections.Concurrent.ConcurrentBag<long>();
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
        {
            if (name == nameof(IContainerDatabase.LoadEntityHeadAsync))
            {
                headLoads.Add((long)args[0]!);
            }
            if (name == nameof(IContainerDatabase.LoadQuietHeadsAsync))
            {
                foreach (var id in (IReadOnlyCollection<long>)args[0]!)
                {
                    askedQuiet.Add(id);
                }
            }
            return proceed();
        });
        await _farm.RestartAsync(crash: true);

        var loaded = (await Task.WhenAll(drained.Concat(holding).Concat(untouched).Select(_farm.QueueAsync)).WaitAsync(TimeSpan.FromSeconds(30)))
            .ToDictionary(q => q.Name);

        Assert.Equal(loaded.Values.Select(q => q.Id).Order(), askedQuiet.Order());
        Assert.Equal(holding.Select(n => loaded[n].Id).Order(), headLoads.Order());
        Assert.All(holding, n => Assert.Equal(1, loaded[n].GetCounts().Active));
        Assert.All(drained.Concat(untouched), n => Assert.Equal(0, loaded[n].GetCounts().Active));
        Assert.Equal(new long[] { 3 }, await loaded[drained[0]].SendAsync([Text("c")]));
        Assert.Equal(new long[] { 1 }, await loaded[untouched[0]].SendAsync([Text("first")]));
        Assert.Equal(new long[] { 2 }, await loaded[holding[0]].SendAsync([Text("second")]));
    }

    /// <summary>
    /// A queue's first load reads its record afresh (with the others loading then, in one read): a
    /// record cached before another node changed the queue loads with the change, and one cached
    /// before the queue was deleted fails as not found.
    /// </summary>
    [Fact]
    public async Task AQueuesLoad_ReadsItsRecordAfresh_SoAStaleCachedRecordNeitherServesOldSettingsNorADeletedQueue()
    {
        await _farm.CreateQueueAsync("tuned");
        await _farm.CreateQueueAsync("gone");
        var staleTuned = await _farm.Node.FindEntityAsync("tuned", CancellationToken.None);
        var staleGone = await _farm.Node.FindEntityAsync("gone", CancellationToken.None);
        await _farm.RestartAsync(crash: true);
        await _farm.Node.Farm.UpdateEntityAsync("tuned", new QueueSettings { MaxDeliveryCount = 3 }.ToJson());
        await _farm.Node.Farm.DeleteEntityAsync("gone");

        var tuned = await _farm.Node.LoadAsync(staleTuned, CancellationToken.None);
        var error = await Assert.ThrowsAsync<BrokerException>(() => _farm.Node.LoadAsync(staleGone, CancellationToken.None));

        Assert.Equal(3, tuned.Settings.MaxDeliveryCount);
        Assert.Equal(Farm.Contracts.V1.FarmErrorCode.MessagingEntityNotFound, error.Code);
        var lookup = await Assert.ThrowsAsync<BrokerException>(() => _farm.QueueAsync("gone"));
        Assert.Equal(Farm.Contracts.V1.FarmErrorCode.MessagingEntityNotFound, lookup.Code);
    }

    /// <summary>
    /// A node that takes a container learns its entities' records in one read: the first uses of
    /// its queues (thousands at once after a restart) read no record by name, and a name the
    /// container does not have is still looked up (and found missing).
    /// </summary>
    [Fact]
    public async Task AfterATake_TheContainersEntitiesAreKnownFromOneRead_NotReadOneNameAtATime()
    {
        var names = Enumerable.Range(0, 20).Select(i => $"known-{i}").ToList();
        foreach (var name in names)
        {
            await _farm.CreateQueueAsync(name);
        }
        var byName = new System.Collections.Concurrent.ConcurrentBag<string>();
        var listings = 0;
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), farmHook: (name, args, proceed) =>
        {
            if (name == nameof(IFarmStore.GetEntityAsync))
            {
                byName.Add((string)args[0]!);
            }
            if (name == nameof(IFarmStore.ListEntitiesInContainerAsync))
            {
                Interlocked.Increment(ref listings);
            }
            return proceed();
        });
        await _farm.RestartAsync(crash: true);

        var queues = await Task.WhenAll(names.Select(_farm.QueueAsync)).WaitAsync(TimeSpan.FromSeconds(30));
        var missing = await Assert.ThrowsAsync<BrokerException>(() => _farm.QueueAsync("never-created"));

        Assert.Equal(names, queues.Select(q => q.Name));
        Assert.Equal(1, Volatile.Read(ref listings));
        Assert.Equal(["never-created"], byName);
        Assert.Equal(Farm.Contracts.V1.FarmErrorCode.MessagingEntityNotFound, missing.Code);
    }

    /// <summary>A failed lookup of the quiet queues fails the loads waiting on it; the next use of each queue loads it.</summary>
    [Fact]
    public async Task AFailedQuietLookup_FailsItsCallers_AndTheNextUseLoadsTheQueue()
    {
        await (await _farm.CreateQueueAsync("kept")).SendAsync([Text("kept")]);
        await _farm.CreateQueueAsync("empty");
        var failures = 1;
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, _, proceed) =>
            name == nameof(IContainerDatabase.LoadQuietHeadsAsync) && Interlocked.Decrement(ref failures) >= 0
                ? Task.FromException<IReadOnlyList<EntityLoad>>(new InvalidOperationException("the container database went away"))
                : proceed());
        await _farm.RestartAsync(crash: true);

        var error = await Assert.ThrowsAsync<InvalidOperationException>(() => _farm.QueueAsync("kept"));
        Assert.Contains("went away", error.Message);

        Assert.Equal(1, (await _farm.QueueAsync("kept")).GetCounts().Active);
        Assert.Equal(new long[] { 1 }, await (await _farm.QueueAsync("empty")).SendAsync([Text("first")]));
    }

    /// <summary>
    /// A topic's load reads the heads of only the subscriptions with rows of their own; the empty
    /// ones start from one lookup (a topic with 1,000 subscriptions read 1,000 heads in turn on a
    /// restart or a takeover). Each still serves as stored: the busy one its message, the drained
    /// one on from its own sequence numbers.
    /// </summary>
    [Fact]
    public async Task ATopicsLoad_ReadsTheHeadsOfOnlyItsSubscriptionsWithMessages()
    {
        var topic = await _farm.CreateTopicAsync("wide");
        var drained = await _farm.CreateSubscriptionAsync("wide", "drained");
        await topic.SendAsync([Text("first")]);
        var first = Assert.Single(await drained.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 1, TimeSpan.Zero, default));
        var busy = await _farm.CreateSubscriptionAsync("wide", "busy");
        await topic.SendAsync([Text("kept")]);
        Assert.Single(await drained.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 1, TimeSpan.Zero, default));
        for (var i = 0; i < 20; i++)
        {
            await _farm.CreateSubscriptionAsync("wide", $"empty-{i}");
        }
        var headReads = new System.Collections.Concurrent.ConcurrentBag<long>();
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
        {
            if (name == nameof(IContainerDatabase.LoadEntityHeadAsync))
            {
                headReads.Add((long)args[0]!);
            }
            return proceed();
        });
        await _farm.RestartAsync(crash: true);

        var loaded = await _farm.TopicAsync("wide");

        Assert.Equal([busy.Id], headReads);
        Assert.Equal(22, loaded.Subscriptions.Count);
        Assert.Equal(1, (await _farm.SubscriptionAsync("wide", "busy")).GetCounts().Active);
        Assert.Equal(0, (await _farm.SubscriptionAsync("wide", "empty-0")).GetCounts().Active);
        await loaded.SendAsync([Text("after")]);
        var after = Assert.Single(await (await _farm.SubscriptionAsync("wide", "drained")).ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 1, TimeSpan.Zero, default));
        Assert.True(after.SequenceNumber > first.SequenceNumber + 1, $"{after.SequenceNumber} after {first.SequenceNumber}");
        Assert.Equal(2, (await _farm.SubscriptionAsync("wide", "busy")).GetCounts().Active);
        Assert.Equal(1, (await _farm.SubscriptionAsync("wide", "empty-19")).GetCounts().Active);
    }

    [Fact]
    public async Task ASlowTopicLoad_HoldsUpNoOtherTopic_AndSubscriptionsAddedOrDeletedMeanwhileAreSoInTheLoadedTopic()
    {
        await _farm.CreateTopicAsync("slow-topic");
        var first = await _farm.CreateSubscriptionAsync("slow-topic", "first");
        var doomed = await _farm.CreateSubscriptionAsync("slow-topic", "doomed");
        await _farm.CreateTopicAsync("fast-topic");
        await _farm.CreateSubscriptionAsync("fast-topic", "only");
        // A message, so the subscriptions' heads are read (the load reads no head of an empty one).
        await (await _farm.TopicAsync("slow-topic")).SendAsync([Text("before")]);

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
        Assert.Equal(2, (await _farm.SubscriptionAsync("slow-topic", "first")).GetCounts().Active);
        Assert.Equal(1, (await _farm.SubscriptionAsync("slow-topic", "second")).GetCounts().Active);
    }
    /// <summary>
    /// A topic whose load fails part way (the database went away while its subscriptions' heads were
    /// read) leaves the node's entity count as it found it, so the message cache's floors (the
    /// node's budget shared over its loaded entities) do not shrink for subscriptions never served;
    /// the next try loads the topic whole. Before, each subscription made before the failure stayed
    /// counted for good.
    /// </summary>
    [Fact]
    public async Task ATopicLoadThatFailsPartWay_LeavesNoSubscriptionCounted_AndTheNextTryLoadsIt()
    {
        await _farm.CreateTopicAsync("t");
        await _farm.CreateSubscriptionAsync("t", "a");
        await _farm.CreateSubscriptionAsync("t", "b");
        await (await _farm.TopicAsync("t")).SendAsync([Text("kept")]);
        var headReads = 0;
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, _, proceed) =>
            name == nameof(IContainerDatabase.LoadEntityHeadAsync) && Interlocked.Increment(ref headReads) == 2
                ? Task.FromException<EntityLoad>(new Farm.ContainerStore.StoreUnavailableException("the database went away"))
                : proceed());
        await _farm.RestartAsync(crash: false);
        var floor = _farm.Node.MessageCache.FloorBytes(long.MaxValue);

        await Assert.ThrowsAnyAsync<Exception>(() => _farm.TopicAsync("t"));

        Assert.Equal(floor, _farm.Node.MessageCache.FloorBytes(long.MaxValue));
        var topic = await _farm.TopicAsync("t");
        Assert.Equal(["a", "b"], topic.Subscriptions.Select(s => s.Name).Order());
        Assert.Equal(_farm.Node.MessageCache.LimitBytes / (4 * 2), _farm.Node.MessageCache.FloorBytes(long.MaxValue));
    }
}
