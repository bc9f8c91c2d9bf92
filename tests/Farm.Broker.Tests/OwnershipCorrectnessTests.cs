using Farm.Testing;
using Microsoft.Extensions.Time.Testing;
using Farm.Contracts;
using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.ContainerStore;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Sqlite;
using Farm.Contracts.V1;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// Promise 3 (one writer per container) on paths the chaos tests do not drive: takes of one
/// container racing inside one node, a stuck take holding up heartbeats, a node that cannot renew
/// its leases, and a commit whose outcome is unknown. Real SQLite files; the test steps into the
/// farm store or a container database through <see cref="InterceptedStoreProvider"/>.
/// </summary>
public sealed class OwnershipCorrectnessTests : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(10);
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-ownership-tests", Guid.NewGuid().ToString("N"));
    private readonly List<BrokerNode> _nodes = [];

    private async Task<BrokerNode> StartNodeAsync(IStoreProvider provider, TimeProvider time, TimeProvider? leaseClock = null, long nodeId = 1, NodeOptions? options = null)
    {
        options ??= new NodeOptions();
        options.NodeId = nodeId;
        options.DataDirectory = _directory;
        var node = new BrokerNode(provider, options, new BrokerOptions(), time,
            NullLogger<BrokerNode>.Instance, leaseClock);
        _nodes.Add(node);
        await node.StartAsync("http://test-" + nodeId, CancellationToken.None);
        return node;
    }

    private static Task WaitUntilAsync(Func<bool> condition, string what) => Eventually.UntilAsync(condition, Deadline, what);

    [Fact]
    public async Task ConcurrentTakesOfOneContainer_OpenItOnce()
    {
        // The second take of a new container is held inside the farm store until the test lets it
        // go; meanwhile a move's TakeReleasedContainer asks for the same container. Before the fix
        // both opened it (same node, same epoch) and the second host replaced the first, which kept
        // its own writer and timers: two hosts handing out the same messages.
        var hold = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var armed = false;
        var acquiring = 0;
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), farmHook: (name, args, proceed) =>
        {
            if (name != nameof(IFarmStore.TryAcquireContainerAsync) || !Volatile.Read(ref armed))
            {
                return proceed();
            }
            Interlocked.Increment(ref acquiring);
            return Held(hold.Task, () => (Task<ContainerRecord?>)proceed()!);
        });
        var node = await StartNodeAsync(provider, TestClock.Create());
        var openBefore = provider.OpenContainers;

        Volatile.Write(ref armed, true);
        var create = node.CreateContainerAsync(CancellationToken.None);
        await WaitUntilAsync(() => Volatile.Read(ref acquiring) == 1, "the first take is inside TryAcquireContainer");
        var containerId = (await node.Farm.ListContainersAsync()).Max(c => c.Id);
        var moveTake = node.TakeReleasedContainerAsync(containerId, CancellationToken.None);
        // Give the second take every chance to get in beside the first; after the fix it waits its turn.
        var secondGotIn = await WaitForAsync(() => Volatile.Read(ref acquiring) == 2, TimeSpan.FromMilliseconds(500));
        hold.SetResult();
        await create;
        await moveTake;

        Assert.False(secondGotIn, "a second take of the same container ran beside the first");
        Assert.Equal(openBefore + 1, provider.OpenContainers);
        Assert.Single(node.Containers, h => h.Id == containerId);
    }

    /// <summary>
    /// A gateway holding calls for a container between owners reads its owner afresh: it sees a take
    /// that happened after its last ownership pass (here node 2's clock never runs one), and never
    /// goes back to an older epoch than it knows.
    /// </summary>
    [Fact]
    public async Task RefreshingAContainersOwner_SeesATakeBeforeTheNextOwnershipPass()
    {
        var provider = new SqliteStoreProvider();
        var first = await StartNodeAsync(provider, TimeProvider.System, nodeId: 1);
        var second = await StartNodeAsync(provider, TestClock.Create(), nodeId: 2);
        var created = await first.CreateContainerAsync(CancellationToken.None);
        // Node 1 takes it once it has been an orphan for OrphanGrace (its share is one of two).
        await WaitUntilAsync(() => first.Containers.Any(h => h.Id == created.Id), "node 1 to take the new container");
        Assert.Null(second.OwnerAddressOf(created.Id));

        await second.RefreshOwnerAsync(created.Id, CancellationToken.None);

        Assert.Equal("http://test-1", second.OwnerAddressOf(created.Id));
        Assert.Equal(first.EpochOf(created.Id), second.EpochOf(created.Id));
    }

    [Fact]
    public async Task AStaleHostsLoss_DoesNotEvictTheLiveHost()
    {
        // A host fenced by its lease deadline is gone; the node takes the container again (a new
        // host, a higher epoch). When the old host reports its loss late, only the old host goes.
        var leaseClock = TestClock.Create();
        var renewalsFail = false;
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), farmHook: (name, _, proceed) =>
            name == nameof(IFarmStore.RenewContainerLeaseAsync) && Volatile.Read(ref renewalsFail)
                ? Task.FromException<bool>(new StoreUnavailableException("farm database unreachable (test)"))
                : proceed());
        var node = await StartNodeAsync(provider, TestClock.Create(), leaseClock);
        var stale = Assert.Single(node.Containers);

        Volatile.Write(ref renewalsFail, true);
        await TestClock.AdvanceAndSettleAsync(leaseClock, new NodeOptions().LeaseDuration);
        Assert.Empty(node.Containers);
        Volatile.Write(ref renewalsFail, false);
        await node.AssignAsync(node.Farm, CancellationToken.None);
        var live = Assert.Single(node.Containers);
        Assert.NotSame(stale, live);
        Assert.True(live.Epoch > stale.Epoch);

        node.OnContainerLostForTests(stale);

        Assert.Same(live, Assert.Single(node.Containers));
    }

    [Fact]
    public async Task HeartbeatsAndRenewals_GoOn_WhileATakeIsStuck()
    {
        // A take that waits on a lock (a big failover, a stranded transaction) used to hold the
        // whole pass: no heartbeat, no renewal, and past the node timeout the others took this
        // healthy node's containers too.
        var hold = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var armed = false;
        var stuck = 0;
        var heartbeats = 0;
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), farmHook: (name, _, proceed) =>
        {
            // The renewal thread (real lease clock) heartbeats with the blocking form.
            if (name is nameof(IFarmStore.HeartbeatAsync) or nameof(IFarmStore.Heartbeat))
            {
                Interlocked.Increment(ref heartbeats);
            }
            if (name == nameof(IFarmStore.TryAcquireContainerAsync) && Volatile.Read(ref armed))
            {
                Interlocked.Increment(ref stuck);
                return Held(hold.Task, () => (Task<ContainerRecord?>)proceed()!);
            }
            return proceed();
        });
        var node = await StartNodeAsync(provider, TestClock.Create());
        var served = Assert.Single(node.Containers);

        Volatile.Write(ref armed, true);
        var create = node.CreateContainerAsync(CancellationToken.None);
        await WaitUntilAsync(() => Volatile.Read(ref stuck) == 1, "a take is stuck");
        var before = Volatile.Read(ref heartbeats);
        var leaseBefore = served.LeaseDeadline;

        await WaitUntilAsync(() => Volatile.Read(ref heartbeats) >= before + 2 && served.LeaseDeadline > leaseBefore,
            "the node heartbeats and renews while the take is stuck");
        Assert.False(served.IsLost);

        hold.SetResult();
        await create;
    }

    [Fact]
    public async Task AHostWhoseLeaseIsNotRenewed_StopsServingAtItsDeadline()
    {
        // A node that cannot reach the farm database keeps its heartbeats from landing; another
        // node may take its containers once the lease runs out. Before that moment this node must
        // stop handing out messages from memory, or two nodes serve one container.
        var leaseClock = TestClock.Create();
        var renewalsFail = false;
        var unreachable = new StoreUnavailableException("farm database unreachable (test)");
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), farmHook: (name, _, proceed) =>
            !Volatile.Read(ref renewalsFail) ? proceed() : name switch
            {
                nameof(IFarmStore.HeartbeatAsync) => Task.FromException(unreachable),
                nameof(IFarmStore.RenewContainerLeaseAsync) => Task.FromException<bool>(unreachable),
                _ => proceed(),
            });
        var node = await StartNodeAsync(provider, TestClock.Create(), leaseClock);
        var options = new NodeOptions();
        var queue = await LoadOrdersQueueAsync(node);
        await queue.SendAsync([BrokerHarness.Text("one")]);
        await queue.SendAsync([BrokerHarness.Text("two")]);

        Volatile.Write(ref renewalsFail, true);
        leaseClock.Advance(options.LeaseDuration - options.LeaseSafetyMargin - TimeSpan.FromMilliseconds(1));
        Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));

        await TestClock.AdvanceAndSettleAsync(leaseClock, TimeSpan.FromMilliseconds(1));

        Assert.Empty(node.Containers);
        var refused = await Assert.ThrowsAsync<BrokerException>(() => queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal("NOT_OWNER", FarmErrorNames.Of(refused.Code));
    }

    [Fact]
    public async Task ACommitWithAnUnknownOutcome_ReloadsTheContainerFromTheDatabase()
    {
        // The COMMIT fails after the database made the batch durable (a lost PostgreSQL COMMIT
        // reply, an fsync error reported late). Before the fix the broker treated it as not written:
        // the message was durable but not in memory, so no receiver saw it until the next load.
        var failAfterCommit = false;
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, _, proceed) =>
        {
            if (name != nameof(IContainerDatabase.CommitBeforeDurableAsync) || !Volatile.Read(ref failAfterCommit))
            {
                return proceed();
            }
            return CommitThenFail((Task<Task>)proceed()!);
        });
        var node = await StartNodeAsync(provider, TestClock.Create());
        var container = Assert.Single(node.Containers);
        var queue = await LoadOrdersQueueAsync(node);

        Volatile.Write(ref failAfterCommit, true);
        var failed = await Assert.ThrowsAsync<BrokerException>(() => queue.SendAsync([BrokerHarness.Text("maybe", "m-1")]));
        Volatile.Write(ref failAfterCommit, false);

        Assert.Equal("STORE_UNAVAILABLE", FarmErrorNames.Of(failed.Code));
        await WaitUntilAsync(() => !node.Containers.Contains(container), "the container is closed for a reload");
        await node.AssignAsync(node.Farm, CancellationToken.None);
        var reloaded = Assert.Single(node.Containers);
        Assert.True(reloaded.Epoch > container.Epoch);
        var again = await node.ResolveQueueAsync("orders", CancellationToken.None);
        var received = Assert.Single(await again.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default));
        Assert.Equal("m-1", received.Message.MessageId);
        Assert.Equal(1, received.DeliveryCount);
    }

    [Fact]
    public async Task ACommitWhoseFlushToDiskFails_IsNotAcknowledged_AndTheContainerReloadsWhatWasWritten()
    {
        // The group commit runs on without waiting for the fsync; its failure must still reach
        // the send (not acknowledged) and reload the container, as an unknown COMMIT outcome does.
        var failFlush = false;
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, _, proceed) =>
            name == nameof(IContainerDatabase.CommitBeforeDurableAsync) && Volatile.Read(ref failFlush) ? CommitThenFailToFlush((Task<Task>)proceed()!) : proceed());
        var node = await StartNodeAsync(provider, TestClock.Create());
        var container = Assert.Single(node.Containers);
        var queue = await LoadOrdersQueueAsync(node);

        Volatile.Write(ref failFlush, true);
        var failed = await Assert.ThrowsAsync<BrokerException>(() => queue.SendAsync([BrokerHarness.Text("maybe", "m-1")]));
        Volatile.Write(ref failFlush, false);

        Assert.Equal("STORE_UNAVAILABLE", FarmErrorNames.Of(failed.Code));
        Assert.Contains("may or may not have been written", failed.Message, StringComparison.Ordinal);
        await WaitUntilAsync(() => !node.Containers.Contains(container), "the container is closed for a reload");
        await node.AssignAsync(node.Farm, CancellationToken.None);
        var again = await node.ResolveQueueAsync("orders", CancellationToken.None);
        Assert.Equal("m-1", Assert.Single(await again.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default)).Message.MessageId);
    }

    [Fact]
    public async Task ASecondNodeWithTheSameId_IsRefused_WhileTheFirstHeartbeats()
    {
        // Before: both registered, and each pass found "ours in the farm database but not served
        // here", released and re-took the other's containers, forever.
        // The second start watches the first's heartbeats (real time) for two heartbeats plus the
        // safety margin; the defaults give 1.5 s, which a loaded CI machine once stalled the first
        // node's heartbeat past. A longer margin and node timeout keep what is tested and allow for that.
        NodeOptions Patient() => new() { LeaseDuration = TimeSpan.FromSeconds(12), LeaseSafetyMargin = TimeSpan.FromSeconds(6), NodeTimeout = TimeSpan.FromSeconds(12) };
        var first = await StartNodeAsync(new SqliteStoreProvider(), TestClock.Create(), options: Patient());
        var owned = Assert.Single(first.Containers);

        var refused = await Assert.ThrowsAsync<InvalidOperationException>(() => StartNodeAsync(new SqliteStoreProvider(), TestClock.Create(), options: Patient()));

        Assert.Contains("Node 1 is already running at http://test-1", refused.Message);
        Assert.Contains($"pid {Environment.ProcessId}", refused.Message);
        Assert.Same(owned, Assert.Single(first.Containers));
        Assert.False(owned.IsLost);
    }

    [Fact]
    public async Task ANodeWhoseIdAnotherProcessRegistered_StopsServing_AtItsNextHeartbeat()
    {
        // A node frozen (SIGSTOP) long enough for a second process with its id to start: when it
        // resumes, its heartbeat finds the id taken and it stops instead of fighting over containers.
        var node = await StartNodeAsync(new SqliteStoreProvider(), TestClock.Create());
        Assert.Single(node.Containers);

        await node.Farm.RegisterNodeAsync(1, "http://elsewhere:1", Environment.ProcessId + 1);

        await node.Replaced.WaitAsync(Deadline);
        Assert.Empty(node.Containers);
    }

    [Fact]
    public async Task ANodeKilledAMomentAgo_CanBeStartedAgainWithItsId()
    {
        var crashed = await StartNodeAsync(new SqliteStoreProvider(), TestClock.Create());
        var before = Assert.Single(crashed.Containers);
        await crashed.StopOwnershipForTestsAsync();

        var successor = await StartNodeAsync(new SqliteStoreProvider(), TestClock.Create());

        Assert.True(Assert.Single(successor.Containers).Epoch > before.Epoch);
    }

    [Fact]
    public async Task ANodeKilledAndStartedAgain_RecordsARestart_CountedFromTheKilledProcessesLastHeartbeat()
    {
        var crashed = await StartNodeAsync(new SqliteStoreProvider(), TestClock.Create());
        var before = Assert.Single(crashed.Containers);
        await crashed.StopOwnershipForTestsAsync();

        var successor = await StartNodeAsync(new SqliteStoreProvider(), TestClock.Create());

        var changes = await successor.Farm.ListOwnershipChangesAsync(10);
        Assert.Equal(
            [(before.Epoch + 1, 1L, 1L, OwnershipChangeKinds.Restart), (before.Epoch, 0L, 1L, OwnershipChangeKinds.First)],
            changes.Select(c => (c.Epoch, c.FromNode, c.ToNode, c.Kind)));
        // The successor watched the killed process's heartbeat stand still for 1.5 s before it
        // registered and released what that process left: the container was without an owner at
        // least that long, not only from the release to the take.
        Assert.True(changes[0].Unowned >= TimeSpan.FromSeconds(1), $"unowned {changes[0].Unowned}");
    }

    /// <summary>A queue "orders" in the node's one container, loaded.</summary>
    private static async Task<QueueEntity> LoadOrdersQueueAsync(BrokerNode node)
    {
        var record = await node.Farm.CreateEntityAsync("orders", EntityKinds.Queue, Assert.Single(node.Containers).Id, new QueueSettings().ToJson());
        return await node.LoadAsync(record, CancellationToken.None);
    }

    private static async Task<Task> CommitThenFail(Task<Task> commit)
    {
        await await commit;
        throw new CommitOutcomeUnknownException("COMMIT reply lost (test)", new IOException("connection reset (test)"));
    }

    /// <summary>The commit goes through and is durable, but making it durable reports a failure (an fsync error).</summary>
    private static async Task<Task> CommitThenFailToFlush(Task<Task> commit)
    {
        await await commit;
        return Task.FromException(new CommitOutcomeUnknownException("fsync failed (test)", new IOException("I/O error (test)")));
    }

    private static async Task<T> Held<T>(Task hold, Func<Task<T>> proceed)
    {
        await hold;
        return await proceed();
    }

    private static Task<bool> WaitForAsync(Func<bool> condition, TimeSpan within) => Eventually.HoldsWithinAsync(condition, within);

    public async ValueTask DisposeAsync()
    {
        foreach (var node in _nodes)
        {
            await node.DisposeAsync();
        }
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // A file still open on a slow dispose is not worth failing a test for.
        }
    }
}
