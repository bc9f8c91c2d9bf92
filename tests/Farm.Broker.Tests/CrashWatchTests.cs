using Farm.Broker.Node;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Sqlite;
using Farm.Testing;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// A survivor takes a peer's containers when the peer's process is gone or its lease runs out, not
/// at its next ownership tick. Real SQLite farm and container files; the peer is a node row whose
/// process lock the test holds and lets go (as the kernel does when the process dies), so the
/// survivor's ticks can be put far out of the way: only the crash watch or the pass scheduled at
/// the lease's end can move the container within the deadline.
/// </summary>
public sealed class CrashWatchTests : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(10);
    private const int PeerProcessId = 4242;
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-crash-watch-tests", Guid.NewGuid().ToString("N"));
    private BrokerNode? _node;
    private NodeProcessLock? _peerLock;

    private async Task<BrokerNode> StartSurvivorAsync(TimeProvider time, NodeOptions options)
    {
        options.NodeId = 1;
        options.DataDirectory = _directory;
        options.DetectCrashedProcesses = true;
        _node = new BrokerNode(new SqliteStoreProvider(), options, new BrokerOptions(), time, NullLogger<BrokerNode>.Instance);
        await _node.StartAsync("http://test-1", CancellationToken.None);
        return _node;
    }

    /// <summary>Node 2, alive by its lock and heartbeat, owning a new container with <paramref name="lease"/>.</summary>
    private async Task<long> StartPeerOwningAContainerAsync(BrokerNode survivor, TimeSpan lease)
    {
        _peerLock = NodeProcessLock.TryAcquire(_directory, 2, PeerProcessId);
        Assert.NotNull(_peerLock);
        return await RegisterPeerOwningAContainerAsync(survivor, lease);
    }

    /// <summary>
    /// Registers node 2 (its lock already taken by the caller) owning a new container with
    /// <paramref name="lease"/>, and runs a pass that sees it live and owning it (the crash watch
    /// tries the peers the last pass saw).
    /// </summary>
    internal static async Task<long> RegisterPeerOwningAContainerAsync(BrokerNode survivor, TimeSpan lease)
    {
        await survivor.Farm.RegisterNodeAsync(2, "http://test-2", PeerProcessId);
        // Created with the peer registered: the survivor's share (1 of 2) leaves it unowned.
        var container = await survivor.CreateContainerAsync(CancellationToken.None);
        Assert.Null(container.OwnerNode);
        Assert.NotNull(await survivor.Farm.TryAcquireContainerAsync(container.Id, 2, lease));
        await survivor.AssignAsync(survivor.Farm, CancellationToken.None);
        Assert.False(survivor.ServesContainer(container.Id));
        return container.Id;
    }

    /// <summary>The survivor serves the dead peer's container, the peer is marked crashed, and the move is recorded as a failover.</summary>
    internal static async Task AssertTakenOverFromCrashedPeerAsync(BrokerNode survivor, long containerId)
    {
        await Eventually.UntilAsync(() => survivor.ServesContainer(containerId), Deadline, "the survivor serves the dead peer's container");
        var peer = (await survivor.Farm.ListNodesAsync()).Single(n => n.Id == 2);
        Assert.Equal(NodeStates.Crashed, peer.State);
        var change = (await survivor.Farm.ListOwnershipChangesAsync(1)).Single();
        Assert.Equal((containerId, 2L, 1L, OwnershipChangeKinds.Failover), (change.ContainerId, change.FromNode, change.ToNode, change.Kind));
    }

    [Fact]
    public async Task APeerWhoseProcessIsGone_IsMarkedCrashed_AndItsContainerTaken_WithoutWaitingForATick()
    {
        // The survivor's ownership ticks run on a clock nobody moves: no tick ever comes.
        var survivor = await StartSurvivorAsync(TestClock.Create(), new NodeOptions());
        var containerId = await StartPeerOwningAContainerAsync(survivor, lease: TimeSpan.FromMinutes(1));

        _peerLock!.Dispose();

        await AssertTakenOverFromCrashedPeerAsync(survivor, containerId);
    }

    [Fact]
    public async Task WithTheWatchOff_ADeadPeersContainer_IsTakenByTheNextTick()
    {
        // --crash-probe-ms 0: no watch, but the ownership pass still tries a peer's lock when it runs.
        var clock = TestClock.Create();
        var options = new NodeOptions { CrashProbeInterval = TimeSpan.Zero };
        var survivor = await StartSurvivorAsync(clock, options);
        var containerId = await StartPeerOwningAContainerAsync(survivor, lease: TimeSpan.FromMinutes(1));

        _peerLock!.Dispose();
        await TestClock.AdvanceAndSettleAsync(clock, options.HeartbeatInterval);

        await AssertTakenOverFromCrashedPeerAsync(survivor, containerId);
    }

    [Fact]
    public async Task AFrozenPeersContainer_IsTakenWhenItsLeaseRunsOut_NotAtTheNextTick()
    {
        // Ticks 30 s apart on the real clock (and a lease long enough for the survivor's own): the
        // frozen peer's heartbeat goes stale after 2 s and its lease runs out after 2.5 s, and only
        // a pass the survivor schedules for those moments takes the container within the deadline.
        var survivor = await StartSurvivorAsync(TimeProvider.System, new NodeOptions
        {
            HeartbeatInterval = TimeSpan.FromSeconds(30),
            LeaseDuration = TimeSpan.FromSeconds(60),
            NodeTimeout = TimeSpan.FromSeconds(2),
        });
        var containerId = await StartPeerOwningAContainerAsync(survivor, lease: TimeSpan.FromSeconds(2.5));

        // The peer's lock stays held: frozen, not gone. It never heartbeats again.
        await Eventually.UntilAsync(() => survivor.ServesContainer(containerId), Deadline, "the survivor serves the frozen peer's container");
        var peer = (await survivor.Farm.ListNodesAsync()).Single(n => n.Id == 2);
        Assert.Equal(NodeStates.Active, peer.State);
        Assert.True(peer.HeartbeatAge >= TimeSpan.FromSeconds(2), $"taken while the peer's heartbeat was {peer.HeartbeatAge} old");
    }

    public async ValueTask DisposeAsync()
    {
        if (_node is not null)
        {
            await _node.DisposeAsync();
        }
        _peerLock?.Dispose();
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

/// <summary>
/// On a PostgreSQL farm a survivor takes a peer's containers the moment the peer's session lock in
/// the farm database goes free (its process died and the server ended its session), not at its next
/// ownership tick. Real PostgreSQL server and farm database; the peer is a node row whose session
/// lock the test holds on a session of its own and ends (as the server does when the process dies),
/// while the survivor's ticks run on a clock nobody moves: only the crash watch can wake its pass.
/// </summary>
public sealed class PostgresCrashWatchTests : IAsyncDisposable
{
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-crash-watch-tests", Guid.NewGuid().ToString("N"));
    private PostgresFarmDatabase? _database;
    private BrokerNode? _node;
    private INodeSessionLock? _peerLock;

    private async Task<BrokerNode> StartSurvivorAsync()
    {
        _database = await PostgresFarmDatabase.CreateAsync("farm_crashwatch");
        var options = new NodeOptions { NodeId = 1, DataDirectory = _directory, Store = "postgres", FarmConnectionString = _database.ConnectionString };
        _node = new BrokerNode(new PostgresStoreProvider(), options, new BrokerOptions(), TestClock.Create(), NullLogger<BrokerNode>.Instance);
        await _node.StartAsync("http://test-1", CancellationToken.None);
        return _node;
    }

    [PostgresFact]
    public async Task APeerWhoseSessionEnded_IsMarkedCrashed_AndItsContainerTaken_WithoutWaitingForATick()
    {
        var survivor = await StartSurvivorAsync();

        _peerLock = survivor.Farm.CreateNodeSessionLock(2)!;
        Assert.NotNull(await _peerLock.EnsureHeldAsync(TimeProvider.System));
        // The pass also sees the peer holding its session lock: only such peers are watched.
        var containerId = await CrashWatchTests.RegisterPeerOwningAContainerAsync(survivor, TimeSpan.FromMinutes(1));

        // The peer's process dies: its session ends, and its lock with it.
        await _peerLock.DisposeAsync();

        await CrashWatchTests.AssertTakenOverFromCrashedPeerAsync(survivor, containerId);
    }

    [PostgresFact]
    public async Task APeerWhoseLockAnotherNodesProbeHeld_IsNotTakenForCrashed_WhenThatProbeLetsGo()
    {
        var survivor = await StartSurvivorAsync();
        // After a restart of the farm database's server every session is new: node 3 is back on
        // its own and probes node 2, which has not taken its lock again yet, so node 3 holds it.
        _peerLock = survivor.Farm.CreateNodeSessionLock(3)!;
        Assert.NotNull(await _peerLock.EnsureHeldAsync(TimeProvider.System));
        var probeOfNode2 = await _peerLock.ProbeAsync(2);
        Assert.Equal(NodeLockHolder.Nobody, probeOfNode2.Holder);
        // The survivor's pass finds node 2's lock held meanwhile, by node 3's session.
        var containerId = await CrashWatchTests.RegisterPeerOwningAContainerAsync(survivor, TimeSpan.FromMinutes(1));

        // Node 3 lets go; node 2 (alive, heartbeating) has still not taken its lock again.
        await probeOfNode2.Hold!.DisposeAsync();
        await survivor.AssignAsync(survivor.Farm, CancellationToken.None);

        var peer = (await survivor.Farm.ListNodesAsync()).Single(n => n.Id == 2);
        Assert.Equal(NodeStates.Active, peer.State);
        Assert.False(survivor.ServesContainer(containerId));
        Assert.Equal(2, (await survivor.Farm.ListContainersAsync()).Single(c => c.Id == containerId).OwnerNode);
    }

    public async ValueTask DisposeAsync()
    {
        if (_node is not null)
        {
            await _node.DisposeAsync();
        }
        if (_peerLock is not null)
        {
            await _peerLock.DisposeAsync();
        }
        if (_database is not null)
        {
            await _database.DisposeAsync();
        }
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // Best effort (also: never made).
        }
    }
}
