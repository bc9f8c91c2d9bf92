using System.Diagnostics;
using Farm.Broker.Containers;
using Farm.ContainerStore.FarmDatabase;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Node;

// Membership and container ownership. Every node runs two loops against the farm database. The
// renewal loop heartbeats and renews the leases of what it serves, and nothing else, so a slow take
// can never make a healthy node look dead; a container whose lease this node fails to renew stops
// being served at its own deadline (ContainerHost.LeaseDeadline). The ownership loop compares what
// it owns with its fair share of the containers
// over the live nodes (ranked by id, so every node computes the same shares). It takes orphaned
// containers (no owner, or an owner whose heartbeat lapsed) up to its share, any orphan after
// OrphanGrace, and gives one container back gracefully when it holds more than its share while
// another live node holds less. Liveness and leases use the database's clock.
public sealed partial class BrokerNode
{
    /// <summary>
    /// Serialises everything that takes containers (ownership passes, CreateContainer, the second
    /// half of a move): two takes of one container at once would open it twice with one epoch.
    /// </summary>
    private readonly SemaphoreSlim _ownershipGate = new(1, 1);

    /// <summary>Orphans and when this node first saw them; only touched under <see cref="_ownershipGate"/>.</summary>
    private Dictionary<long, DateTimeOffset> _orphanSeen = [];

    /// <summary>Containers this node let go of on purpose, when and at which epoch: it does not take them straight back while nobody took them.</summary>
    private readonly System.Collections.Concurrent.ConcurrentDictionary<long, HandOver> _releasedAt = new();
    private DateTimeOffset _lastRelease = DateTimeOffset.MinValue;

    /// <summary>Container id -> owner address, as of the last ownership pass; for routing.</summary>
    private volatile IReadOnlyDictionary<long, ContainerRoute> _owners = new Dictionary<long, ContainerRoute>();

    /// <summary>The address of the live node that owns a container, or null when unknown or dead.</summary>
    public string? OwnerAddressOf(long containerId) =>
        _owners.TryGetValue(containerId, out var owner) ? owner.Address : null;

    /// <summary>The container's epoch as this node last saw it (its own when it serves it).</summary>
    public long EpochOf(long containerId) =>
        _containers.TryGetValue(containerId, out var host) ? host.Epoch
        : _owners.TryGetValue(containerId, out var owner) ? owner.Epoch : 0;

    /// <inheritdoc/>
    public async Task RefreshOwnerAsync(long containerId, CancellationToken cancellationToken)
    {
        var container = await Farm.GetContainerAsync(containerId, cancellationToken).ConfigureAwait(false);
        if (container?.OwnerNode is not { } ownerId)
        {
            return;
        }
        var owner = (await Farm.ListNodesAsync(cancellationToken).ConfigureAwait(false)).FirstOrDefault(n => n.Id == ownerId);
        if (owner is null || !OwnershipPlanner.IsServing(owner, NodeId, _nodeOptions))
        {
            return;
        }
        // Only news replaces what the last pass saw: a newer epoch, or an owner where it saw none.
        var routes = _owners;
        if (routes.TryGetValue(containerId, out var known) && known.Address is not null && known.Epoch >= container.Epoch)
        {
            return;
        }
        _owners = new Dictionary<long, ContainerRoute>(routes) { [containerId] = new ContainerRoute(ownerId, container.Epoch, owner.Address) };
    }

    /// <summary>Heartbeats, then renews the lease of every container served or being opened here (the renewal loop).</summary>
    private async Task RenewAsync(IFarmStore farm, CancellationToken cancellationToken)
    {
        if (!await farm.HeartbeatAsync(NodeId, Environment.ProcessId, _address, cancellationToken).ConfigureAwait(false))
        {
            await OnReplacedAsync().ConfigureAwait(false);
            return;
        }
        Interlocked.Exchange(ref _lastHeartbeatTicks, _leaseClock.GetUtcNow().UtcTicks);
        foreach (var host in _containers.Values)
        {
            var startedAt = _leaseClock.GetUtcNow();
            OnLeaseRenewal(host, startedAt, await farm.RenewContainerLeaseAsync(host.Id, NodeId, host.Epoch, _nodeOptions.LeaseDuration, cancellationToken).ConfigureAwait(false));
        }
        foreach (var take in _taking.Values)
        {
            var startedAt = _leaseClock.GetUtcNow();
            take.OnRenewal(startedAt, await farm.RenewContainerLeaseAsync(take.ContainerId, NodeId, take.Epoch, _nodeOptions.LeaseDuration, cancellationToken).ConfigureAwait(false));
        }
    }

    /// <summary>
    /// <see cref="RenewAsync"/> on the renewal thread, with the farm store's blocking calls: with
    /// PostgreSQL, whose async I/O completes on the thread pool, a renewal waited behind the pool's
    /// queue as if it ran there (LeaseRenewalTests: its lease lapsed within a second of the pool
    /// blocking).
    /// </summary>
    private void Renew(IFarmStore farm)
    {
        if (!farm.Heartbeat(NodeId, Environment.ProcessId, _address, _nodeOptions.LeaseDuration))
        {
            _ = OnReplacedAsync();
            return;
        }
        Interlocked.Exchange(ref _lastHeartbeatTicks, _leaseClock.GetUtcNow().UtcTicks);
        foreach (var host in _containers.Values)
        {
            var startedAt = _leaseClock.GetUtcNow();
            OnLeaseRenewal(host, startedAt, farm.RenewContainerLease(host.Id, NodeId, host.Epoch, _nodeOptions.LeaseDuration));
        }
        foreach (var take in _taking.Values)
        {
            var startedAt = _leaseClock.GetUtcNow();
            take.OnRenewal(startedAt, farm.RenewContainerLease(take.ContainerId, NodeId, take.Epoch, _nodeOptions.LeaseDuration));
        }
    }

    /// <summary>
    /// Another process registered this node id (started with the same --node-id while this one was
    /// frozen or cut off): that process is the node now. Stop serving, and stop.
    /// </summary>
    private Task OnReplacedAsync()
    {
        LogReplaced(_logger, NodeId);
        foreach (var host in _containers.Values)
        {
            OnContainerLost(host);
        }
        _replaced.TrySetResult();
        return _stopping.CancelAsync();
    }

    private void OnLeaseRenewal(ContainerHost host, DateTimeOffset startedAt, bool renewed)
    {
        if (renewed)
        {
            host.LeaseRenewed(startedAt);
        }
        else
        {
            // Taken over, or released by a hand-over running beside this loop.
            OnContainerLost(host);
        }
    }

    /// <summary>Set once the node's process has begun to stop (<see cref="StopTakingContainers"/>).</summary>
    private volatile bool _stoppingTakes;

    /// <summary>
    /// The node's process is stopping: from now on its passes take no container and hand none back;
    /// heartbeats and lease renewals go on, so what it serves stays its own until it releases it
    /// on the way out. Without this, a node stopping beside others (`farm down` stops them all at
    /// once) took the containers of a peer that finished stopping first, as orphans of a node no
    /// longer live, only to release them a moment later: one take more for each (an epoch raised
    /// twice across a restart), and a take's work for nothing while the farm goes down.
    /// </summary>
    public void StopTakingContainers() => _stoppingTakes = true;

    /// <summary>One ownership pass: takes orphans up to this node's share and hands surplus back.</summary>
    internal async Task AssignAsync(IFarmStore farm, CancellationToken cancellationToken)
    {
        await _ownershipGate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            await AssignLockedAsync(farm, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _ownershipGate.Release();
        }
    }

    private async Task AssignLockedAsync(IFarmStore farm, CancellationToken cancellationToken)
    {
        if (_processLock is null)
        {
            AcquireProcessLock();
        }
        await EnsureSessionLockAsync(cancellationToken).ConfigureAwait(false);
        var nodes = await farm.ListNodesAsync(cancellationToken).ConfigureAwait(false);
        var containers = await farm.ListContainersAsync(cancellationToken).ConfigureAwait(false);
        var crashed = await ReleaseCrashedNodesAsync(farm, nodes, containers, cancellationToken).ConfigureAwait(false);
        if (crashed.Count > 0)
        {
            containers = await farm.ListContainersAsync(cancellationToken).ConfigureAwait(false);
        }
        var view = new OwnershipView(
            NodeId, nodes, containers,
            Served: _containers.ToDictionary(c => c.Key, c => c.Value.TakenAt),
            OrphanSeen: _orphanSeen,
            ReleasedAt: _releasedAt,
            Releasing: [.. _releasing.Keys],
            LastRelease: _lastRelease,
            Now: _time.GetUtcNow())
        {
            Crashed = crashed,
        };
        var plan = OwnershipPlanner.Plan(view, _nodeOptions);
        _owners = plan.Routes;
        var previousChangeAt = _nextChangeAt;
        _nextChangeAt = OwnershipPlanner.NextChangeIn(view, plan, _nodeOptions) is { } change ? _time.GetUtcNow() + change + NextChangeMargin : null;
        if (_nextChangeAt < (previousChangeAt ?? DateTimeOffset.MaxValue))
        {
            // The loop may be sleeping toward a later moment (this pass ran outside it).
            _wakeUp.Reschedule();
        }
        WatchPeers(nodes, crashed);
        if (_draining)
        {
            await DrainStepAsync(farm).ConfigureAwait(false);
            return;
        }
        _orphanSeen = new Dictionary<long, DateTimeOffset>(plan.OrphanSeen);
        if (_stoppingTakes)
        {
            return;
        }

        var mine = _containers.Count;
        foreach (var candidate in plan.Takes)
        {
            if (mine >= plan.Share && !candidate.GraceExpired)
            {
                continue;
            }
            if (candidate.ReleaseFirst)
            {
                // Let go first, so taking it again raises the epoch past anything we wrote before.
                await farm.ReleaseContainerAsync(candidate.ContainerId, NodeId, cancellationToken).ConfigureAwait(false);
            }
            bool taken;
            try
            {
                // Each take has a time limit: one container stuck behind a lock must not hold up the rest.
                using var timeout = new CancellationTokenSource(_nodeOptions.TakeTimeout, _leaseClock);
                using var linked = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, timeout.Token);
                taken = await TakeContainerAsync(farm, candidate.ContainerId, linked.Token).ConfigureAwait(false);
            }
            catch (Exception e) when (!cancellationToken.IsCancellationRequested)
            {
                // One container that cannot be fenced yet must not stop the pass: heartbeats,
                // lease renewals and the other takes go on, and this one is tried again next pass.
                LogTakeFailed(_logger, candidate.ContainerId, e);
                continue;
            }
            if (taken)
            {
                mine++;
                _orphanSeen.Remove(candidate.ContainerId);
            }
        }

        // Whichever container this node may have to take next (its owner dies) should not wait on
        // the store's open then: on PostgreSQL a new server process and its login were most of a take.
        foreach (var container in containers)
        {
            if (!_containers.ContainsKey(container.Id))
            {
                _provider.PrepareContainer(container.ConnectionString);
            }
        }

        if (OwnershipPlanner.Rebalance(view with { Served = _containers.ToDictionary(c => c.Key, c => c.Value.TakenAt) }, _nodeOptions, mine) is { } release)
        {
            _lastRelease = view.Now;
            LogRebalancing(_logger, release, mine, plan.Share);
            StartRelease(farm, release);
        }
    }

    private readonly System.Collections.Concurrent.ConcurrentDictionary<long, Task> _releasing = new();

    /// <summary>This process's lock on its node id (<see cref="NodeProcessLock"/>), once it has it.</summary>
    private NodeProcessLock? _processLock;

    private void AcquireProcessLock()
    {
        if (_nodeOptions.DetectCrashedProcesses)
        {
            _processLock ??= NodeProcessLock.TryAcquire(Path.GetFullPath(_nodeOptions.DataDirectory), NodeId, Environment.ProcessId);
        }
    }

    /// <summary>This process's lock on its node id in the farm database (<see cref="INodeSessionLock"/>), where the database has them.</summary>
    private INodeSessionLock? _sessionLock;

    /// <summary>When the session that holds <see cref="_sessionLock"/> began (null: not held now).</summary>
    private DateTimeOffset? _sessionLockSince;

    /// <summary>
    /// Nodes (and the process registered for each) whose session lock a probe of this node found
    /// held, through the session it holds its own lock on now: only those are taken for crashed when
    /// it is free. A node whose lock was never seen
    /// held (a version without session locks, a process that has not taken it yet) is left to its
    /// heartbeats, so it is never released pass after pass.
    /// </summary>
    private readonly HashSet<(long NodeId, int ProcessId)> _seenHoldingSessionLock = [];

    private async Task EnsureSessionLockAsync(CancellationToken cancellationToken)
    {
        if (_sessionLock is not null)
        {
            var since = await _sessionLock.EnsureHeldAsync(_leaseClock, cancellationToken).ConfigureAwait(false);
            if (since != _sessionLockSince)
            {
                // A new session (the server restarted, the connection broke): every node's session
                // may be new too, and not taken yet. What earlier probes saw says nothing now.
                _seenHoldingSessionLock.Clear();
            }
            _sessionLockSince = since;
        }
    }

    /// <summary>
    /// Nodes that still look alive by their heartbeat but whose process is gone (SIGKILLed,
    /// crashed): their containers are released as a crashed process's leftovers (a take is then a
    /// failover, counted unowned since its last heartbeat), while this node holds the dead one's
    /// lock, so a new process of that node cannot start in between. They are not live for this pass.
    /// A SQLite farm tells them by their process lock file, a PostgreSQL farm by their session lock.
    /// </summary>
    private async Task<IReadOnlySet<long>> ReleaseCrashedNodesAsync(
        IFarmStore farm, IReadOnlyList<NodeRecord> nodes, IReadOnlyList<ContainerRecord> containers, CancellationToken cancellationToken)
    {
        var crashed = new HashSet<long>();
        if (!_nodeOptions.DetectCrashedProcesses && !MayJudgeBySessionLocks())
        {
            return crashed;
        }
        var dataDirectory = Path.GetFullPath(_nodeOptions.DataDirectory);
        // A process seen holding its lock counts only while it is the one registered for its node.
        _seenHoldingSessionLock.RemoveWhere(seen => !nodes.Any(n => n.Id == seen.NodeId && n.ProcessId == seen.ProcessId));
        foreach (var node in nodes.Where(IsLivePeer))
        {
            await using var gone = _nodeOptions.DetectCrashedProcesses
                ? AsAsync(NodeProcessLock.TryHoldIfGone(dataDirectory, node.Id, node.ProcessId))
                : await TryHoldIfSessionEndedAsync(node, cancellationToken).ConfigureAwait(false);
            if (gone is null)
            {
                continue;
            }
            crashed.Add(node.Id);
            // Marked before its containers are released: a survivor that sees them orphaned then
            // sees the node not live too, and counts its share without it (it cannot probe the
            // lock this node holds now). Only an active node: a draining one keeps its state.
            await farm.MarkNodeCrashedAsync(node.Id, node.ProcessId, cancellationToken).ConfigureAwait(false);
            var left = containers.Where(c => c.OwnerNode == node.Id).Select(c => c.Id).ToList();
            foreach (var containerId in left)
            {
                await farm.ReleaseAbandonedContainerAsync(containerId, node.Id, node.HeartbeatAt, cancellationToken).ConfigureAwait(false);
            }
            if (left.Count > 0)
            {
                if (_nodeOptions.DetectCrashedProcesses)
                {
                    LogCrashedNodeReleased(_logger, node.Id, node.ProcessId, string.Join(", ", left));
                }
                else
                {
                    LogEndedSessionNodeReleased(_logger, node.Id, node.ProcessId, string.Join(", ", left));
                }
            }
        }
        return crashed;
    }

    /// <summary>
    /// Others are judged by their session locks only through a session that holds this node's own,
    /// and only those seen holding theirs since that session began (<see cref="_seenHoldingSessionLock"/>).
    /// </summary>
    private bool MayJudgeBySessionLocks() => _sessionLock is not null && _sessionLockSince is not null;

    /// <summary>
    /// The hold on <paramref name="node"/>'s session lock when it is free after a probe of this node
    /// saw that node's own session hold it; otherwise null. A lock held by another session (a
    /// survivor probing the node while it had not taken its lock again after a server restart) is
    /// not the node's: taking it for one would judge a live node crashed once that probe lets go.
    /// </summary>
    private async Task<IAsyncDisposable?> TryHoldIfSessionEndedAsync(NodeRecord node, CancellationToken cancellationToken)
    {
        var probe = await _sessionLock!.ProbeAsync(node.Id, cancellationToken).ConfigureAwait(false);
        switch (probe.Holder)
        {
            case NodeLockHolder.ItsNode:
                _seenHoldingSessionLock.Add((node.Id, node.ProcessId));
                return null;
            case NodeLockHolder.Nobody when _seenHoldingSessionLock.Remove((node.Id, node.ProcessId)):
                return probe.Hold;
            case NodeLockHolder.Nobody:
                await probe.Hold!.DisposeAsync().ConfigureAwait(false);
                return null;
            default:
                return null;
        }
    }

    private static IAsyncDisposable? AsAsync(IDisposable? disposable) => disposable is null ? null : new AsyncDisposer(disposable);

    private sealed class AsyncDisposer(IDisposable inner) : IAsyncDisposable
    {
        public ValueTask DisposeAsync()
        {
            inner.Dispose();
            return ValueTask.CompletedTask;
        }
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "Node {NodeId}'s session with the farm database ended (process {ProcessId}; its session lock is free): released its containers {Containers} for the live nodes to take")]
    private static partial void LogEndedSessionNodeReleased(ILogger logger, long nodeId, int processId, string containers);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Node {NodeId}'s process {ProcessId} is gone (its lock is free): released its containers {Containers} for the live nodes to take")]
    private static partial void LogCrashedNodeReleased(ILogger logger, long nodeId, int processId, string containers);

    /// <summary>
    /// Hands a container back on purpose: stop taking new work and let receivers settle what they
    /// hold, stop serving its entities, let the commit queue drain, then release the lease so another
    /// node takes it (raising the epoch) at once. Runs once per container at a time.
    /// </summary>
    internal Task ReleaseContainerAsync(IFarmStore farm, long containerId)
    {
        var release = _releasing.GetOrAdd(containerId, id => ReleaseNowAsync(farm, id));
        return release;
    }

    /// <summary>Starts a hand-over without waiting for it: the ownership pass must keep heartbeating meanwhile.</summary>
    private void StartRelease(IFarmStore farm, long containerId) =>
        _ = ReleaseContainerAsync(farm, containerId).ContinueWith(t => LogOwnershipPassFailed(_logger, t.Exception!), TaskContinuationOptions.OnlyOnFaulted);

    private async Task ReleaseNowAsync(IFarmStore farm, long containerId)
    {
        // Never finish synchronously: the finally below must run after GetOrAdd stored this task.
        await Task.Yield();
        try
        {
            if (!_containers.TryGetValue(containerId, out var host))
            {
                return;
            }
            await host.StopTakingWorkAsync(_nodeOptions.HandOverLockWait).ConfigureAwait(false);
            _releasedAt[containerId] = new HandOver(_time.GetUtcNow(), host.Epoch);
            if (!_containers.TryRemove(containerId, out _))
            {
                return;
            }
            await host.DisposeAsync().ConfigureAwait(false);
            await farm.ReleaseContainerAsync(containerId, NodeId).ConfigureAwait(false);
            LogContainerReleased(_logger, containerId);
        }
        finally
        {
            _releasing.TryRemove(containerId, out _);
        }
    }

    /// <summary>Runs <paramref name="pass"/> every heartbeat interval on <paramref name="clock"/> until stopped; a failed pass is logged and the next one runs.</summary>
    private async Task RunEveryIntervalAsync(TimeProvider clock, Func<CancellationToken, Task> pass, Action<Exception> logFailure, CancellationToken cancellationToken)
    {
        using var timer = new PeriodicTimer(_nodeOptions.HeartbeatInterval, clock);
        try
        {
            while (await timer.WaitForNextTickAsync(cancellationToken).ConfigureAwait(false))
            {
                try
                {
                    await pass(cancellationToken).ConfigureAwait(false);
                }
                catch (Exception e) when (e is not OperationCanceledException)
                {
                    logFailure(e);
                }
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            // Stopping.
        }
    }

    /// <summary>
    /// Heartbeats and lease renewals, on the lease clock and nothing else in the way. On the system
    /// clock they run on a thread of their own, not the thread pool: an overloaded node's pool can
    /// hold thousands of work items (seen: 9,500, seconds of queueing, with three nodes offered
    /// eight times what two cores do), and a renewal queued behind them let leases lapse, so
    /// containers moved between busy nodes over and over and nothing was served. A node slow to
    /// serve is still a node; only one that cannot renew (frozen, cut off, dead) loses its
    /// containers. A test's manual lease clock keeps the timer loop it drives.
    /// </summary>
    private Task RenewalLoopAsync(IFarmStore farm, CancellationToken cancellationToken)
    {
        if (!ReferenceEquals(_leaseClock, TimeProvider.System))
        {
            return RunEveryIntervalAsync(_leaseClock, ct => RenewAsync(farm, ct), e => LogHeartbeatFailed(_logger, e), cancellationToken);
        }
        var stopped = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var thread = new Thread(() =>
        {
            try
            {
                RenewOnThisThread(farm, cancellationToken);
                stopped.SetResult();
            }
            catch (Exception e)
            {
                stopped.SetException(e);
            }
        })
        {
            IsBackground = true,
            Name = $"Farm node {NodeId} lease renewal",
        };
        thread.Start();
        return stopped.Task;
    }

    /// <summary>
    /// The renewal loop of <see cref="RenewalLoopAsync"/> on its own thread: every heartbeat interval
    /// at a fixed rate (a late renewal does not push the next ones back; a missed tick is skipped, as
    /// PeriodicTimer does), with the farm store's blocking calls, which with SQLite and PostgreSQL
    /// alike run on this thread and need nothing from the pool.
    /// </summary>
    private void RenewOnThisThread(IFarmStore farm, CancellationToken cancellationToken)
    {
        var interval = (long)(_nodeOptions.HeartbeatInterval.TotalSeconds * Stopwatch.Frequency);
        var next = Stopwatch.GetTimestamp();
        while (true)
        {
            var now = Stopwatch.GetTimestamp();
            next += interval;
            if (next < now)
            {
                // Behind by more than a tick: the next renewal is one interval from now.
                next = now + interval;
            }
            if (cancellationToken.WaitHandle.WaitOne(Stopwatch.GetElapsedTime(now, next)))
            {
                return;
            }
            try
            {
                Renew(farm);
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                return;
            }
            catch (Exception e)
            {
                LogHeartbeatFailed(_logger, e);
            }
        }
    }

    /// <summary>Wakes the ownership loop before its next tick (the crash watch, a change due sooner).</summary>
    private readonly OwnershipWakeUp _wakeUp = new();

    /// <summary>When the last pass expects its next change (on <see cref="_time"/>), when sooner than a tick; null otherwise.</summary>
    private DateTimeOffset? _nextChangeAt;

    /// <summary>Added to a due change, so the pass it wakes finds it passed by the database's clock.</summary>
    private static readonly TimeSpan NextChangeMargin = TimeSpan.FromMilliseconds(10);

    /// <summary>
    /// An ownership pass every heartbeat interval (on the ticks of a fixed rate), and in between
    /// when woken: by the crash watch, or at the change the last pass saw coming.
    /// </summary>
    private async Task OwnershipLoopAsync(DateTimeOffset firstTick, CancellationToken cancellationToken)
    {
        var interval = _nodeOptions.HeartbeatInterval;
        var nextTick = firstTick;
        try
        {
            while (true)
            {
                var wakeAt = _nextChangeAt is { } change && change < nextTick ? change : nextTick;
                if (!await _wakeUp.SleepUntilAsync(wakeAt, _time, cancellationToken).ConfigureAwait(false))
                {
                    continue;
                }
                var now = _time.GetUtcNow();
                if (now >= nextTick)
                {
                    // Ticks missed behind a long pass are skipped, as a PeriodicTimer does.
                    nextTick = nextTick + interval > now ? nextTick + interval : now + interval;
                }
                _nextChangeAt = null;
                try
                {
                    await AssignAsync(Farm, cancellationToken).ConfigureAwait(false);
                }
                catch (Exception e) when (e is not OperationCanceledException)
                {
                    LogOwnershipPassFailed(_logger, e);
                }
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            // Stopping.
        }
    }

    /// <summary>
    /// The peers the crash watch tries: live by their heartbeat, not this node, not known crashed;
    /// on a farm judged by session locks, only those the pass saw holding theirs (the only ones it
    /// would take for crashed, so a peer that never took its lock does not wake it every probe).
    /// </summary>
    private volatile IReadOnlyList<(long NodeId, int ProcessId)> _watchedPeers = [];

    private void WatchPeers(IReadOnlyList<NodeRecord> nodes, IReadOnlySet<long> crashed) =>
        _watchedPeers = nodes
            .Where(n => IsLivePeer(n) && !crashed.Contains(n.Id))
            .Select(n => (n.Id, n.ProcessId))
            .Where(peer => _nodeOptions.DetectCrashedProcesses || _seenHoldingSessionLock.Contains(peer))
            .ToList();

    /// <summary>Another node that serves by its state and heartbeat: one whose process may be found gone.</summary>
    private bool IsLivePeer(NodeRecord node) =>
        node.Id != NodeId && node.State is NodeStates.Active or NodeStates.Draining && node.HeartbeatAge < _nodeOptions.NodeTimeout;

    /// <summary>
    /// Tries the locks of the live peers every <see cref="NodeOptions.CrashProbeInterval"/> and wakes
    /// the ownership pass the moment one is free, which then judges the peer, releases and takes the
    /// dead node's containers. A SQLite farm (one machine, one data directory) tries their process
    /// lock files; a PostgreSQL farm reads which session locks are held (one query a probe, taking
    /// nothing), so a killed node is noticed within a probe instead of at the pass's next 0.5 s tick.
    /// A process is reported once per pass; the pass that follows marks it crashed and stops
    /// watching it.
    /// </summary>
    private async Task CrashWatchLoopAsync(CancellationToken cancellationToken)
    {
        var dataDirectory = Path.GetFullPath(_nodeOptions.DataDirectory);
        var byProcessLocks = _nodeOptions.DetectCrashedProcesses;
        var reported = new HashSet<(long NodeId, int ProcessId)>();
        IReadOnlyList<(long NodeId, int ProcessId)>? seenPeers = null;
        using var timer = new PeriodicTimer(_nodeOptions.CrashProbeInterval, _leaseClock);
        try
        {
            while (await timer.WaitForNextTickAsync(cancellationToken).ConfigureAwait(false))
            {
                var peers = _watchedPeers;
                if (!ReferenceEquals(peers, seenPeers))
                {
                    // A pass ran since: one that still lists a reported peer could not tell it gone
                    // (another survivor held its lock while releasing it). Try it again.
                    reported.Clear();
                    seenPeers = peers;
                }
                if (peers.Count == 0)
                {
                    continue;
                }
                var heldSessionLocks = byProcessLocks ? null : await _sessionLock!.ListHeldAsync(cancellationToken).ConfigureAwait(false);
                if (!byProcessLocks && heldSessionLocks is null)
                {
                    continue; // the farm database cannot be asked now: the pass's own probes and heartbeats decide
                }
                foreach (var peer in peers)
                {
                    var gone = byProcessLocks
                        ? NodeProcessLock.IsGone(dataDirectory, peer.NodeId, peer.ProcessId)
                        : !heldSessionLocks!.Contains(peer.NodeId);
                    if (!reported.Contains(peer) && gone)
                    {
                        reported.Add(peer);
                        _wakeUp.Now();
                    }
                }
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            // Stopping.
        }
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Handing container {ContainerId} to a node with fewer: this node holds {Mine}, its share is {Share}")]
    private static partial void LogRebalancing(ILogger logger, long containerId, int mine, int share);

    [LoggerMessage(Level = LogLevel.Error, Message = "Node {NodeId} was registered by another process (the same --node-id started elsewhere); this process stops serving")]
    private static partial void LogReplaced(ILogger logger, long nodeId);

    [LoggerMessage(Level = LogLevel.Information, Message = "Released container {ContainerId}")]
    private static partial void LogContainerReleased(ILogger logger, long containerId);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Ownership pass failed")]
    private static partial void LogOwnershipPassFailed(ILogger logger, Exception exception);
}
