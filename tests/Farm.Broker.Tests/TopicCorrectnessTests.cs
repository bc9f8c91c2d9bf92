using Microsoft.Extensions.Time.Testing;
using Farm.Broker.Containers;
using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.Broker.Topics;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Sqlite;
using Farm.Contracts.V1;
using Microsoft.Data.Sqlite;
using Microsoft.Extensions.Logging.Abstractions;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>
/// Races around a topic's shared copies and its subscriptions' rows, driven deterministically: the
/// test holds the container file's write lock (a second connection in BEGIN IMMEDIATE), so the
/// commit loop waits while the test deletes or unloads, then lets the commits go.
/// </summary>
public sealed class TopicCorrectnessTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static string Body(ReceivedMessage m) => m.Message.Body.ToStringUtf8();

    /// <summary>Waits until every write queued so far has gone through the commit loop (it runs them in order).</summary>
    private static Task CommitQueueDrainedAsync(BrokerNode node, long containerId)
    {
        Assert.True(node.TryGetContainer(containerId, out var host));
        return host.Commits.CommitAsync(_ => { });
    }

    [Fact]
    public async Task DeletingASubscription_WithItsCompleteStillQueued_ReleasesTheSharedCopyOnce_SoAnotherSubscriptionKeepsIt()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        await topic.SendAsync([Text("shared")]);
        var locked = Assert.Single(await a.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        var recordA = (await _farm.Node.Farm.GetEntityAsync("t/Subscriptions/a"))!;

        var writeLock = await ContainerWriteLock.HoldAsync(_farm.Node, 1);
        // Queued behind the held lock: A's complete (its onCommitted releases the copy it points at) ...
        var complete = a.SettleAsync(false, [new Settlement { LockToken = locked.LockToken, Disposition = Disposition.Complete }]);
        // ... then A is deleted while the complete is still in the queue.
        await _farm.Node.Farm.DeleteEntityAsync(recordA.Name);
        var drop = _farm.Node.DropSubscriptionAsync(recordA);
        Assert.False(complete.IsCompleted);
        Assert.False(drop.IsCompleted);
        await ContainerWriteLock.ReleaseAsync(writeLock);
        await complete;
        await drop;
        await CommitQueueDrainedAsync(_farm.Node, 1);

        // B still points at the copy: it stays, in memory and in the database.
        Assert.Equal(1, topic.GetCounts().Count);
        Assert.Single((await _farm.ReadContainerDirectlyAsync(1, topic.Id)).Messages);
        Assert.Equal(1, b.GetCounts().Active);

        await _farm.RestartAsync();
        var reloadedB = await _farm.SubscriptionAsync("t", "b");
        var received = await reloadedB.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, default);
        Assert.Equal(["shared"], received.Select(Body));
    }

    [Fact]
    public async Task ATopicSendCommittingAfterItsSubscriptionsWereUnloaded_KeepsItsRows_ForTheNextOwner()
    {
        var topic = await _farm.CreateTopicAsync("t");
        await _farm.CreateSubscriptionAsync("t", "a");
        await _farm.CreateSubscriptionAsync("t", "b");

        var writeLock = await ContainerWriteLock.HoldAsync(_farm.Node, 1);
        var send = topic.SendAsync([Text("acknowledged")]);
        Assert.False(send.IsCompleted);
        // What closing the container does first (planned move, graceful node stop): the topic and
        // its subscriptions stop being served while the send is still in the commit queue.
        Assert.True(_farm.Node.TryGetContainer(1, out _));
        topic.Unload(FarmErrors.Busy("stopping"));
        await ContainerWriteLock.ReleaseAsync(writeLock);
        var sequence = Assert.Single(await send);
        Assert.True(sequence > 0, "the send was acknowledged");

        // A graceful stop drains whatever the commit loop still has, then a new node loads the files.
        await _farm.RestartAsync(crash: false);
        foreach (var name in new[] { "a", "b" })
        {
            var subscription = await _farm.SubscriptionAsync("t", name);
            var received = await subscription.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, default);
            Assert.Equal(["acknowledged"], received.Select(Body));
        }
    }

    [Fact]
    public async Task ATopicSendCommittingAfterItsTopicWasDeleted_DropsTheRowsItWrote()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");

        var writeLock = await ContainerWriteLock.HoldAsync(_farm.Node, 1);
        var send = topic.SendAsync([Text("late")]);
        // Deleted (not only unloaded) while the send waits: its rows must not outlive the topic.
        topic.MarkDeleted();
        await ContainerWriteLock.ReleaseAsync(writeLock);
        await send;
        await CommitQueueDrainedAsync(_farm.Node, 1);

        Assert.Empty((await _farm.ReadContainerDirectlyAsync(1, a.Id)).Messages);
        Assert.Empty((await _farm.ReadContainerDirectlyAsync(1, topic.Id)).Messages);
    }
}

/// <summary>
/// The container's sweep timer callback: an exception in one topic or entity must not escape (a timer
/// callback that throws takes the process down), and ticks never run side by side.
/// </summary>
public sealed class SweepCorrectnessTests : IAsyncLifetime
{
    /// <summary>
    /// A manual clock whose readings the test can make throw or wait, only on the thread that asks
    /// for it (the sweep under test runs there), so nothing else on the node is disturbed.
    /// </summary>
    private sealed class ProbeTime(FakeTimeProvider inner) : TimeProvider
    {
        [ThreadStatic]
        private static Func<DateTimeOffset, DateTimeOffset>? _nextReading;

        /// <summary>The next reading on the calling thread goes through <paramref name="probe"/> (once).</summary>
        public static void OnNextReadingHere(Func<DateTimeOffset, DateTimeOffset> probe) => _nextReading = probe;

        public override DateTimeOffset GetUtcNow()
        {
            var now = inner.GetUtcNow();
            if (_nextReading is { } probe)
            {
                _nextReading = null;
                return probe(now);
            }
            return now;
        }

        public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period) =>
            inner.CreateTimer(callback, state, dueTime, period);
    }

    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-broker-tests", Guid.NewGuid().ToString("N"));
    private readonly FakeTimeProvider _clock = new();
    private BrokerNode _node = null!;

    public async Task InitializeAsync()
    {
        _node = new BrokerNode(new SqliteStoreProvider(), new NodeOptions { NodeId = 1, DataDirectory = _directory }, new BrokerOptions(),
            new ProbeTime(_clock), NullLogger<BrokerNode>.Instance);
        await _node.StartAsync("http://test", CancellationToken.None);
    }

    public async Task DisposeAsync()
    {
        await _node.DisposeAsync();
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // A file still open on a slow dispose is not worth failing a test for.
        }
    }

    /// <summary>
    /// A topic with one subscription holding a peek-lock that has expired, and no sweep tick since:
    /// the lock lasts 60.1 s, ticks come every 250 ms, and the clock stops at 60.1 s, between two.
    /// </summary>
    private async Task<(ContainerHost Host, QueueEntity Subscription)> TopicWithAnExpiredLockAsync()
    {
        var topicRecord = await _node.Farm.CreateEntityAsync("t", EntityKinds.Topic, 1, new TopicSettings().ToJson());
        var topic = await _node.LoadTopicAsync(topicRecord, CancellationToken.None);
        var rule = RuleDefinitions.DefaultRule;
        var settings = new SubscriptionSettings { LockDuration = TimeSpan.FromMilliseconds(60_100) };
        var record = await _node.Farm.CreateChildEntityAsync(topicRecord.Id, EntityNames.SubscriptionPath("t", "s"), EntityKinds.Subscription,
            settings.ToJson(), rule.Name, RuleDefinitions.ToJson(rule));
        await _node.AddSubscriptionAsync(record, CancellationToken.None);
        var subscription = await _node.ResolveQueueAsync(record.Name, CancellationToken.None);
        await topic.SendAsync([Text("m")]);
        Assert.Single(await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.True(_node.TryGetContainer(1, out var host));
        // To the lock's expiry, the sweep timer ticking on the way: no tick yet sees it expired
        // (the last one ran at 60.0 s), so the sweep under test is the first to.
        await TestClock.AdvanceTickingAsync(_clock, TimeSpan.FromMilliseconds(60_100), new BrokerOptions().SweepInterval);
        Assert.Equal(1, subscription.GetCounts().Locked);
        return (host, subscription);
    }

    [Fact]
    public async Task ASweepWhoseTopicThrows_DoesNotEscapeTheTimerCallback_AndStillSweepsTheEntities()
    {
        var (host, subscription) = await TopicWithAnExpiredLockAsync();

        // The sweep timer's callback, on this thread; the topic (swept first) fails.
        ProbeTime.OnNextReadingHere(_ => throw new InvalidOperationException("topic sweep failed"));
        host.Sweep();

        Assert.Equal(0, subscription.GetCounts().Locked);
        Assert.Equal(1, subscription.GetCounts().Active);
    }

    [Fact]
    public async Task ASweepTickWhileTheLastStillRuns_IsSkipped_NotRunBesideIt()
    {
        var (host, subscription) = await TopicWithAnExpiredLockAsync();
        var inFirstSweep = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var letFirstGo = new ManualResetEventSlim();
        // A tick that stops inside the topic's sweep (its first clock reading) until the test lets it go.
        var first = Task.Run(() =>
        {
            ProbeTime.OnNextReadingHere(now =>
            {
                inFirstSweep.SetResult();
                letFirstGo.Wait(TimeSpan.FromSeconds(30));
                return now;
            });
            host.Sweep();
        });
        await inFirstSweep.Task.WaitAsync(TimeSpan.FromSeconds(10));

        // The next tick comes while it runs: skipped, so the expired lock is still there.
        host.Sweep();
        Assert.Equal(1, subscription.GetCounts().Locked);

        letFirstGo.Set();
        await first.WaitAsync(TimeSpan.FromSeconds(10));
        // The running sweep went on to the entities and released the expired lock itself.
        Assert.Equal(0, subscription.GetCounts().Locked);
    }
}
