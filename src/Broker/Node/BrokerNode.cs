using System.Collections.Concurrent;
using Farm.Broker.Containers;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.ContainerStore;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.V1;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Node;

/// <summary>
/// A broker node: registers in the farm database, heartbeats, holds leases on the containers it
/// owns, fences them with their epochs and serves their entities. Single-node farms own every
/// container; spreading containers over several nodes comes with the farm issue.
/// </summary>
public sealed partial class BrokerNode : IAsyncDisposable, IOwnershipView
{
    private readonly ConcurrentDictionary<long, ContainerHost> _containers = new();
    /// <summary>Containers leased and still opening (<see cref="TakeContainerAsync"/>): the renewal loop renews them too.</summary>
    private readonly ConcurrentDictionary<long, TakeInProgress> _taking = new();
    private readonly ConcurrentDictionary<string, EntityRecord> _entityIndex = new(StringComparer.OrdinalIgnoreCase);
    private readonly IStoreProvider _provider;
    private readonly NodeOptions _nodeOptions;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly CancellationTokenSource _stopping = new();

    /// <summary>1 once <see cref="DisposeAsync"/> has started.</summary>
    private int _disposed;
    private IFarmStore? _farm;
    private Task? _ownershipLoop;
    private string _address = "";

    private readonly TimeProvider _leaseClock;
    private readonly TaskCompletionSource _replaced = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private Task? _renewalLoop;
    private Task? _crashWatch;

    /// <summary>Completes when another process registered this node id: this one has stopped serving and should exit.</summary>
    public Task Replaced => _replaced.Task;

    /// <param name="time">Message semantics (locks, TTL, schedules) and the ownership passes.</param>
    /// <param name="leaseClock">
    /// Heartbeats, lease renewals and lease deadlines: the farm database judges leases by its real
    /// clock, so these run on real time (the default) even where a test drives <paramref name="time"/> by hand.
    /// </param>
    /// <param name="lag">How far behind its work the node is (load shedding); the process's thread-pool lag when null.</param>
    public BrokerNode(
        IStoreProvider provider, NodeOptions nodeOptions, BrokerOptions brokerOptions, TimeProvider time, ILogger<BrokerNode> logger,
        TimeProvider? leaseClock = null, Func<TimeSpan>? lag = null)
    {
        ArgumentOutOfRangeException.ThrowIfGreaterThanOrEqual(nodeOptions.LeaseSafetyMargin, nodeOptions.LeaseDuration);
        _provider = provider;
        _nodeOptions = nodeOptions;
        Options = brokerOptions;
        MessageCache = new MessageCacheBudget(brokerOptions.MessageCacheSizePerNode);
        _time = time;
        RecentSends = new Messaging.RecentSends(time);
        _leaseClock = leaseClock ?? TimeProvider.System;
        _logger = logger;
        SendShedding = new Overload.SendShedding(brokerOptions.ShedSendsAfter, logger, lag);
        _metrics = new Telemetry.NodeMetrics(this);
    }

    private readonly Telemetry.NodeMetrics _metrics;
    private long _lastHeartbeatTicks;

    /// <summary>When this node's last heartbeat was written (null before the first), on the lease clock.</summary>
    internal DateTimeOffset? LastHeartbeatAt => Interlocked.Read(ref _lastHeartbeatTicks) is var ticks and > 0 ? new DateTimeOffset(ticks, TimeSpan.Zero) : null;

    /// <summary>The containers this node serves now.</summary>
    internal IEnumerable<ContainerHost> ServedContainers => _containers.Values;

    /// <summary>How many containers this node serves now.</summary>
    public int ServedContainerCount => _containers.Count;

    internal TimeProvider LeaseClock => _leaseClock;

    internal TimeProvider Time => _time;

    /// <summary>Refuses new sends while the node is too far behind its work.</summary>
    public Overload.SendShedding SendShedding { get; }

    /// <summary>The sends stored here a moment ago, so a client's repeat of one is not stored twice.</summary>
    internal Messaging.RecentSends RecentSends { get; }

    /// <summary>The forwarded messages being stored here now, so two sends of one are not stored side by side.</summary>
    internal Messaging.ForwardsInFlight ForwardsInFlight { get; } = new();

    public long NodeId => _nodeOptions.NodeId;

    public string Address => _address;

    /// <summary>Where this node listens for AMQP (<see cref="NodeOptions.AmqpAddress"/>), or null.</summary>
    public string? AmqpAddress => _nodeOptions.AmqpAddress;

    public BrokerOptions Options { get; }

    /// <summary>The bytes of messages this node's entities keep in memory, against MessageCacheSizePerNode.</summary>
    internal MessageCacheBudget MessageCache { get; }

    public bool IsStarted => _farm is not null;

    /// <summary>The farm database. Throws Unavailable while the node is starting.</summary>
    public IFarmStore Farm => _farm ?? throw FarmErrors.Busy("The node is still starting.");

    public string FarmConnectionString => string.IsNullOrEmpty(_nodeOptions.FarmConnectionString)
        ? $"Data Source={Path.Combine(Path.GetFullPath(_nodeOptions.DataDirectory), "farm.db")}"
        : _nodeOptions.FarmConnectionString;

    public async Task StartAsync(string address, CancellationToken cancellationToken, string? metricsAddress = null)
    {
        _address = address;
        Directory.CreateDirectory(_nodeOptions.DataDirectory);
        // Before anything is registered or taken: while this process holds it, no other node takes
        // this one for crashed (a frozen earlier life of this id may hold it still; then later).
        AcquireProcessLock();
        var farm = await _provider.OpenFarmStoreAsync(FarmConnectionString, cancellationToken).ConfigureAwait(false);
        NodeRecord? earlierLife;
        try
        {
            earlierLife = await RefuseIfRunningElsewhereAsync(farm, cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            await farm.DisposeAsync().ConfigureAwait(false);
            throw;
        }
        // Before registering, as the process lock: from here on a session of this process holds the
        // node's lock in the farm database (where it can), which ends with the process.
        _sessionLock = _nodeOptions.DetectEndedSessions ? farm.CreateNodeSessionLock(NodeId) : null;
        await EnsureSessionLockAsync(cancellationToken).ConfigureAwait(false);
        await farm.RegisterNodeAsync(NodeId, address, Environment.ProcessId, metricsAddress, _nodeOptions.AmqpAddress, cancellationToken).ConfigureAwait(false);

        var containers = await farm.ListContainersAsync(cancellationToken).ConfigureAwait(false);
        if (containers.Count == 0)
        {
            // A new farm gets one container so it is usable at once.
            await CreateContainerAsync(farm, cancellationToken).ConfigureAwait(false);
            containers = await farm.ListContainersAsync(cancellationToken).ConfigureAwait(false);
        }
        foreach (var container in containers.Where(c => c.OwnerNode == NodeId))
        {
            // Left by an earlier life of this node (a crash): let go, so whoever takes it next
            // raises the epoch and fences out anything that earlier process might still write. It
            // has had no serving owner since that life's last heartbeat, read before registering
            // overwrote it: the take records that, not the moment of this release.
            await farm.ReleaseAbandonedContainerAsync(container.Id, NodeId, earlierLife?.HeartbeatAt, cancellationToken).ConfigureAwait(false);
        }
        // Heartbeats and renewals from here on, before the first pass: a take that opens its
        // database slowly (a busy server, a new connection pool) keeps its lease, and peers
        // waiting for this node see it live. Not through the pool: on the system clock the
        // renewals get a thread of their own (RenewalLoopAsync).
        _renewalLoop = RenewalLoopAsync(farm, _stopping.Token);
        try
        {
            await WaitForExpectedNodesAsync(farm, cancellationToken).ConfigureAwait(false);
            // One pass now, so a node that is the farm's only one serves as soon as it says it is up.
            await AssignAsync(farm, cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            await _stopping.CancelAsync().ConfigureAwait(false);
            await _renewalLoop.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
            throw;
        }
        _farm = farm;
        // The first tick counts from now, not from whenever the pool starts the loop.
        var firstTick = _time.GetUtcNow() + _nodeOptions.HeartbeatInterval;
        _ownershipLoop = Task.Run(() => OwnershipLoopAsync(firstTick, _stopping.Token), CancellationToken.None);
        if ((_nodeOptions.DetectCrashedProcesses || _sessionLock is not null) && _nodeOptions.CrashProbeInterval > TimeSpan.Zero)
        {
            _crashWatch = Task.Run(() => CrashWatchLoopAsync(_stopping.Token), CancellationToken.None);
        }
        LogStarted(_logger, NodeId, address, _containers.Count);
    }

    /// <summary>
    /// Nodes started together (<see cref="NodeOptions.ExpectedNodes"/>) wait for each other before
    /// their first ownership pass: a pass counts only the live nodes, so the first one up would
    /// take every container and the rebalancing would hand them back one at a time (about 5 s each).
    /// Registered (heartbeating) already, so the others count this one; bounded by
    /// <see cref="NodeOptions.ExpectedNodesWait"/>, after which it takes what it can. A node that
    /// finds a live peer serving containers does not wait: the farm is running (this node was
    /// restarted, or joins late), the missing nodes may stay down, and the rebalancing hands it its
    /// share whoever else comes.
    /// </summary>
    private async Task WaitForExpectedNodesAsync(IFarmStore farm, CancellationToken cancellationToken)
    {
        if (_nodeOptions.ExpectedNodes <= 1)
        {
            return;
        }
        var until = _leaseClock.GetUtcNow() + _nodeOptions.ExpectedNodesWait;
        while (true)
        {
            var nodes = await farm.ListNodesAsync(cancellationToken).ConfigureAwait(false);
            var live = nodes.Where(n => OwnershipPlanner.IsLive(n, NodeId, _nodeOptions)).ToList();
            if (live.Count >= _nodeOptions.ExpectedNodes || _leaseClock.GetUtcNow() >= until)
            {
                LogExpectedNodes(_logger, live.Count, _nodeOptions.ExpectedNodes);
                return;
            }
            var peers = live.Where(n => n.Id != NodeId).Select(n => n.Id).ToHashSet();
            if (peers.Count > 0
                && (await farm.ListContainersAsync(cancellationToken).ConfigureAwait(false)).FirstOrDefault(c => c.OwnerNode is { } owner && peers.Contains(owner)) is { } served)
            {
                LogJoiningRunningFarm(_logger, live.Count, _nodeOptions.ExpectedNodes, served.OwnerNode!.Value);
                return;
            }
            await Task.Delay(_nodeOptions.HeartbeatInterval / 5, _leaseClock, cancellationToken).ConfigureAwait(false);
        }
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Starting with {Live} of the {Expected} nodes started together live")]
    private static partial void LogExpectedNodes(ILogger logger, int live, int expected);

    [LoggerMessage(Level = LogLevel.Information, Message = "Starting with {Live} of the {Expected} nodes started together live: node {Peer} already serves containers, so the farm is running and this node joins it without waiting for the others")]
    private static partial void LogJoiningRunningFarm(ILogger logger, int live, int expected, long peer);

    /// <summary>
    /// Two processes with one node id would take containers from each other forever (each sees
    /// "ours but not served here"). When the farm has this id with a fresh heartbeat, watch it for a
    /// little over two heartbeats: a node killed a moment ago stops heartbeating and may be
    /// replaced; one still heartbeating is another live process, and this one refuses to start.
    /// Returns the node's row as the earlier process left it (null when there is none).
    /// </summary>
    private async Task<NodeRecord?> RefuseIfRunningElsewhereAsync(IFarmStore farm, CancellationToken cancellationToken)
    {
        var first = await ReadSelfAsync(farm, cancellationToken).ConfigureAwait(false);
        // Stopped, or proved gone by a survivor (crashed): no earlier life of this id is running.
        if (first is null || first.State is NodeStates.Stopped or NodeStates.Crashed || first.HeartbeatAge >= _nodeOptions.NodeTimeout)
        {
            return first;
        }
        var watchUntil = _leaseClock.GetUtcNow() + 2 * _nodeOptions.HeartbeatInterval + _nodeOptions.LeaseSafetyMargin;
        while (_leaseClock.GetUtcNow() < watchUntil)
        {
            await Task.Delay(_nodeOptions.HeartbeatInterval / 5, _leaseClock, cancellationToken).ConfigureAwait(false);
            var now = await ReadSelfAsync(farm, cancellationToken).ConfigureAwait(false);
            if (now is null || now.State == NodeStates.Stopped)
            {
                return now;
            }
            if (now.HeartbeatAt > first.HeartbeatAt)
            {
                throw new InvalidOperationException(
                    $"Node {NodeId} is already running at {now.Address} (pid {now.ProcessId}): a farm's node ids must be unique. "
                    + "Stop that node first, or start this one with another --node-id.");
            }
        }
        return first;
    }

    private async Task<NodeRecord?> ReadSelfAsync(IFarmStore farm, CancellationToken cancellationToken) =>
        (await farm.ListNodesAsync(cancellationToken).ConfigureAwait(false)).FirstOrDefault(n => n.Id == NodeId);

    /// <summary>Creates a container record and its database, and takes it.</summary>
    public async Task<ContainerRecord> CreateContainerAsync(CancellationToken cancellationToken) =>
        await CreateContainerAsync(server: null, cancellationToken).ConfigureAwait(false);

    /// <summary>A new container, its database on the named database <paramref name="server"/> (null: beside the farm database).</summary>
    public async Task<ContainerRecord> CreateContainerAsync(string? server, CancellationToken cancellationToken)
    {
        // Created unowned: the ownership passes give it to the node whose share has room.
        var record = await CreateContainerAsync(Farm, cancellationToken, server).ConfigureAwait(false);
        await AssignAsync(Farm, cancellationToken).ConfigureAwait(false);
        return (await Farm.GetContainerAsync(record.Id, cancellationToken).ConfigureAwait(false))!;
    }

    /// <summary>Registers a database server containers may be placed on, once it answers with the login given.</summary>
    public async Task<ServerRecord> AddServerAsync(string name, string connectionString, CancellationToken cancellationToken)
    {
        if (string.IsNullOrWhiteSpace(name) || name.Length > 64 || !name.All(c => char.IsAsciiLetterOrDigit(c) || c is '-' or '_' or '.'))
        {
            throw FarmErrors.Invalid($"'{name}' is not a server name: use 1 to 64 letters, digits, '-', '_' or '.'.");
        }
        await CheckServerAsync(connectionString, cancellationToken).ConfigureAwait(false);
        return await Farm.AddServerAsync(name, connectionString, cancellationToken).ConfigureAwait(false)
            ?? throw FarmErrors.Create(Contracts.V1.FarmErrorCode.MessagingEntityAlreadyExists, $"This farm already has a database server named '{name}'.");
    }

    /// <summary>Forgets a server no container is on.</summary>
    public async Task RemoveServerAsync(string name, CancellationToken cancellationToken)
    {
        var server = (await Farm.ListServersAsync(cancellationToken).ConfigureAwait(false)).FirstOrDefault(s => s.Name == name)
            ?? throw FarmErrors.Invalid($"This farm has no database server '{name}'.");
        if (server.ContainerCount > 0 || !await Farm.RemoveServerAsync(name, cancellationToken).ConfigureAwait(false))
        {
            throw FarmErrors.Invalid($"Database server '{name}' still holds {server.ContainerCount} container(s); a container never leaves its database.");
        }
    }

    private async Task CheckServerAsync(string connectionString, CancellationToken cancellationToken)
    {
        try
        {
            await _provider.CheckServerAsync(connectionString, cancellationToken).ConfigureAwait(false);
        }
        catch (StoreUnavailableException e)
        {
            throw FarmErrors.Invalid(e.Message);
        }
    }

    private async Task<ContainerRecord> CreateContainerAsync(IFarmStore farm, CancellationToken cancellationToken, string? server = null)
    {
        var farmConnection = FarmConnectionString;
        Func<long, string> connectionString = id => _provider.NewContainerConnectionString(farmConnection, id);
        if (server is not null)
        {
            var named = (await farm.ListServersAsync(cancellationToken).ConfigureAwait(false)).FirstOrDefault(s => s.Name == server)
                ?? throw FarmErrors.Invalid($"This farm has no database server '{server}'; add it first with: farm server add {server} --connection 'Host=...;Username=...;Password=...'.");
            // Before the container's row exists: a server that cannot be reached leaves nothing behind.
            await CheckServerAsync(named.ConnectionString, cancellationToken).ConfigureAwait(false);
            connectionString = id => _provider.NewContainerConnectionString(farmConnection, id, named.ConnectionString);
        }
        var record = await farm.CreateContainerAsync(connectionString, server, cancellationToken).ConfigureAwait(false);
        // Create and migrate the database now, so a bad location fails here and not on first send.
        var database = await _provider.OpenContainerAsync(record.ConnectionString, cancellationToken).ConfigureAwait(false);
        await database.DisposeAsync().ConfigureAwait(false);
        LogContainerCreated(_logger, record.Id);
        return record;
    }

    /// <summary>
    /// Leases a container and fences it with the new epoch; false when another node holds it. Runs
    /// only under <see cref="_ownershipGate"/>, so one node never opens a container twice.
    /// </summary>
    private async Task<bool> TakeContainerAsync(IFarmStore farm, long containerId, CancellationToken cancellationToken)
    {
        if (_containers.ContainsKey(containerId))
        {
            return true;
        }
        var started = System.Diagnostics.Stopwatch.GetTimestamp();
        var leaseStartedAt = _leaseClock.GetUtcNow();
        var lease = await farm.TryAcquireContainerAsync(containerId, NodeId, _nodeOptions.LeaseDuration, cancellationToken).ConfigureAwait(false);
        if (lease is null)
        {
            LogContainerHeld(_logger, containerId);
            return false;
        }
        var leased = System.Diagnostics.Stopwatch.GetTimestamp();
        // Renewed from here on like a served container, however long the open and the fence take.
        var take = new TakeInProgress(containerId, lease.Epoch, leaseStartedAt, OnContainerLost);
        _taking[containerId] = take;
        ContainerHost host;
        long opened;
        try
        {
            var database = await _provider.OpenContainerAsync(lease.ConnectionString, cancellationToken).ConfigureAwait(false);
            opened = System.Diagnostics.Stopwatch.GetTimestamp();
            try
            {
                host = await ContainerHost.OpenAsync(
                    lease, () => database, _time, Options, MessageCache, ForwardAsync, farm, OnContainerLost,
                    () => take.RenewedAt, _nodeOptions.LeaseDuration - _nodeOptions.LeaseSafetyMargin, _leaseClock, _logger, cancellationToken).ConfigureAwait(false);
            }
            catch
            {
                // Not fenced (e.g. a former owner's stranded commit still holds the epoch row): close it, a later pass tries again.
                await database.DisposeAsync().ConfigureAwait(false);
                throw;
            }
            take.Attach(host);
            if (!_containers.TryAdd(containerId, host))
            {
                // Cannot happen under the gate; if it ever does, the host already serving stays the only one.
                await host.DisposeAsync().ConfigureAwait(false);
                return true;
            }
        }
        finally
        {
            // Only now: the host is renewed as a served container already, so no renewal pass misses it.
            _taking.TryRemove(KeyValuePair.Create(containerId, take));
        }
        var fenced = System.Diagnostics.Stopwatch.GetTimestamp();
        LogContainerTaken(_logger, containerId, lease.Epoch, Milliseconds(started, fenced),
            Milliseconds(started, leased), Milliseconds(leased, opened), Milliseconds(opened, fenced));
        LearnEntities(farm, host);
        Telemetry.BrokerMetrics.RecordTake(containerId, NodeId);
        if (host.IsLost || take.Refused)
        {
            // Its lease deadline passed, a renewal found it taken, or a commit failed before it was registered here.
            OnContainerLost(host);
        }
        return true;
    }

    /// <summary>The index's reads of taken containers' entities under way (never faulted): a name not cached waits for them first.</summary>
    private Task _learning = Task.CompletedTask;
    private readonly Lock _learningGate = new();

    /// <summary>
    /// After a take, in the background: the container's entities by name, in one read, so the first
    /// use of each (thousands at once after a restart or a takeover) finds its record cached instead
    /// of reading it. Never replaces what is cached; a queue's load reads its record afresh anyway.
    /// </summary>
    private void LearnEntities(IFarmStore farm, ContainerHost host)
    {
        var learning = LearnEntitiesAsync(farm, host);
        lock (_learningGate)
        {
            _learning = _learning.IsCompleted ? learning : Task.WhenAll(_learning, learning);
        }
    }

    private async Task LearnEntitiesAsync(IFarmStore farm, ContainerHost host)
    {
        try
        {
            foreach (var record in await farm.ListEntitiesInContainerAsync(host.Id).ConfigureAwait(false))
            {
                _entityIndex.TryAdd(record.Name, record);
            }
        }
        catch (Exception e)
        {
            // Only a lost shortcut: each entity's first use reads its record.
            LogLearnEntitiesFailed(_logger, host.Id, e);
        }
    }

    /// <summary>
    /// Stops serving one host: another broker owns its container, its lease deadline passed, or a
    /// commit's outcome is unknown (the next ownership pass takes the container again and reads it
    /// afresh). Removes exactly this host, never a newer one serving the same container.
    /// </summary>
    private void OnContainerLost(ContainerHost host)
    {
        if (_containers.TryRemove(KeyValuePair.Create(host.Id, host)))
        {
            LogContainerLost(_logger, host.Id);
            _ = DisposeLostAsync(host);
        }
    }

    /// <summary>For tests: a host reports its loss (late, after the container was taken again).</summary>
    internal void OnContainerLostForTests(ContainerHost host) => OnContainerLost(host);

    private async Task DisposeLostAsync(ContainerHost host)
    {
        try
        {
            await host.DisposeAsync().ConfigureAwait(false);
        }
        catch (Exception e)
        {
            LogDisposeFailed(_logger, host.Id, e);
        }
    }

    internal bool TryGetContainer(long containerId, out ContainerHost host) => _containers.TryGetValue(containerId, out host!);

    /// <summary>True while this node owns and serves the container.</summary>
    public bool ServesContainer(long containerId) => _containers.ContainsKey(containerId);

    /// <summary>The containers this node serves now.</summary>
    internal IReadOnlyCollection<ContainerHost> Containers => _containers.Values.ToList();

    /// <summary>
    /// Finds what receivers use, a queue or a subscription ("topic/Subscriptions/sub"), by name and
    /// loads it if needed. Throws NotFound for an unknown one, InvalidArgument for a topic (it is
    /// received from through its subscriptions), and NOT_OWNER (naming the owner when it is known and
    /// alive) when its container is served elsewhere.
    /// </summary>
    internal async ValueTask<QueueEntity> ResolveQueueAsync(string name, CancellationToken cancellationToken)
    {
        var (record, fresh) = await LookUpEntityAsync(name, cancellationToken).ConfigureAwait(false);
        if (record.Kind == EntityKinds.Topic)
        {
            throw FarmErrors.Invalid($"'{record.Name}' is a topic: receive from one of its subscriptions, '{record.Name}/Subscriptions/NAME'.");
        }
        if (_containers.TryGetValue(record.ContainerId, out var host) && host.TryGetEntity(record.Id, out var cached))
        {
            return cached;
        }
        if (host is not null && !fresh && record.Kind == EntityKinds.Subscription)
        {
            // About to load it: read the record afresh, another node may have changed it since it was
            // cached. (A queue's load reads its record afresh itself, together with others'.)
            record = await FreshRecordAsync(name, cancellationToken).ConfigureAwait(false);
        }
        return await LoadAsync(record, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Whether <paramref name="name"/> is a queue (without ForwardTo) or topic this node serves and
    /// has loaded, from memory alone: a send to it waits for nothing but its commit, so it needs no
    /// deadline of its own. False when unsure (not cached, not loaded, a subscription, a forwarding
    /// queue whose next hop may need loading, served elsewhere): the caller takes the general path.
    /// </summary>
    public bool IsLoadedSendTarget(string name)
    {
        if (!_entityIndex.TryGetValue(name, out var record) || !_containers.TryGetValue(record.ContainerId, out var host))
        {
            return false;
        }
        return record.Kind switch
        {
            EntityKinds.Topic => host.TryGetTopic(record.Id, out _),
            EntityKinds.Subscription => false,
            _ => host.TryGetEntity(record.Id, out var queue) && queue.Settings.ForwardTo is null,
        };
    }

    /// <summary>Finds what senders use, a queue or a topic, by name; a subscription is InvalidArgument.</summary>
    internal async ValueTask<ISendTarget> ResolveSendTargetAsync(string name, CancellationToken cancellationToken)
    {
        var record = await FindEntityAsync(name, cancellationToken).ConfigureAwait(false);
        switch (record.Kind)
        {
            case EntityKinds.Topic:
                return await LoadTopicAsync(record, cancellationToken).ConfigureAwait(false);
            case EntityKinds.Subscription:
                throw FarmErrors.Invalid($"'{record.Name}' is a subscription: messages reach it through its topic; send to the topic instead.");
            default:
                return await ResolveQueueAsync(name, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>
    /// Sends <paramref name="request"/> to the node that serves its entity, as a client's Send would
    /// be routed (held while the entity is between owners). Set by the gateway that hosts this node;
    /// without it, forwarding to an entity another node serves fails with NOT_OWNER and is tried again.
    /// </summary>
    public Func<SendRequest, CancellationToken, Task<SendResponse>>? SendToOwner { get; set; }

    /// <summary>
    /// What a queue's forwarder sends (<see cref="ForwardSend"/>): straight into the target when this
    /// node serves it; otherwise to its owner through <see cref="SendToOwner"/>. Either way each
    /// message is recorded under its <paramref name="origin"/>, and only the messages the target
    /// has no record of are stored: a repeat (after a lost answer, or by the next owner of the
    /// source after a failover, however it cuts its batches) stores nothing twice.
    /// </summary>
    internal async Task ForwardAsync(
        string targetName, IReadOnlyList<Message> messages, string? deadLetterSource, SendName name, ForwardOrigin origin, bool repeat, CancellationToken cancellationToken)
    {
        var record = await FindEntityAsync(targetName, cancellationToken).ConfigureAwait(false);
        if (IsLocal(record) || SendToOwner is not { } sendToOwner)
        {
            var target = await ResolveSendTargetAsync(targetName, cancellationToken).ConfigureAwait(false);
            await ForwardsInFlight.StoreClaimedAsync(origin, async () =>
            {
                var (rest, restOrigin) = (messages, origin);
                // Not only repeats: a send of a run that went on after its entity moved away (a
                // planned move while this node keeps the target) can follow the next owner's. The
                // target's ForwardSenders tells such a send by its load and reads for it.
                if (await origin.FindRecordedAsync([target], Time, cancellationToken).ConfigureAwait(false) is { } answered)
                {
                    (rest, restOrigin) = origin.Unanswered(messages, answered);
                    if (rest.Count == 0)
                    {
                        return true;
                    }
                }
                await target.SendAsync(rest, deadLetterSource, origin: restOrigin).ConfigureAwait(false);
                return true;
            }).ConfigureAwait(false);
            return;
        }
        var request = new SendRequest
        {
            Entity = targetName,
            ProducerId = name.ProducerId,
            SendId = name.SendId,
            Repeat = repeat,
            Forwarded = true,
            DeadLetterSource = deadLetterSource ?? "",
            ForwardSource = origin.Source,
            ForwardSequences = { origin.Sequences },
            ForwardIncarnation = origin.Incarnation,
        };
        request.Messages.AddRange(messages);
        await sendToOwner(request, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>A topic by name, loaded with its subscriptions; NotFound when there is no such topic.</summary>
    internal async Task<TopicEntity> ResolveTopicAsync(string name, CancellationToken cancellationToken)
    {
        var record = await FindEntityAsync(name, cancellationToken).ConfigureAwait(false);
        if (record.Kind != EntityKinds.Topic)
        {
            throw FarmErrors.EntityNotFound(name);
        }
        return await LoadTopicAsync(record, cancellationToken).ConfigureAwait(false);
    }

    internal async Task<TopicEntity> LoadTopicAsync(EntityRecord record, CancellationToken cancellationToken)
    {
        if (!_containers.TryGetValue(record.ContainerId, out var host))
        {
            throw FarmErrors.NotOwner(record.Name, OwnerAddressOf(record.ContainerId));
        }
        if (host.TryGetTopic(record.Id, out var topic))
        {
            return topic;
        }
        record = await FreshRecordAsync(record.Name, cancellationToken).ConfigureAwait(false);
        topic = await host.LoadTopicAsync(record, cancellationToken).ConfigureAwait(false);
        _entityIndex[record.Name] = record;
        return topic;
    }

    private async Task<EntityRecord> FreshRecordAsync(string name, CancellationToken cancellationToken) =>
        await Farm.GetEntityAsync(name, cancellationToken).ConfigureAwait(false) ?? throw FarmErrors.EntityNotFound(name);

    /// <summary>The entity's record (queue, topic or subscription), cached by name: routing must not cost a database query per call.</summary>
    public async ValueTask<EntityRecord> FindEntityAsync(string name, CancellationToken cancellationToken) =>
        (await LookUpEntityAsync(name, cancellationToken).ConfigureAwait(false)).Record;

    /// <summary>As <see cref="FindEntityAsync"/>, and whether the record was just read from the farm database (not cached).</summary>
    private async ValueTask<(EntityRecord Record, bool Fresh)> LookUpEntityAsync(string name, CancellationToken cancellationToken)
    {
        if (_entityIndex.TryGetValue(name, out var known))
        {
            return (known, false);
        }
        // A container just taken may be listing its entities: wait for that rather than read each name.
        Task learning;
        lock (_learningGate)
        {
            learning = _learning;
        }
        if (!learning.IsCompleted)
        {
            await learning.WaitAsync(cancellationToken).ConfigureAwait(false);
            if (_entityIndex.TryGetValue(name, out known))
            {
                return (known, false);
            }
        }
        // Just read: a subscription's load (ResolveQueueAsync) need not read it a second time.
        var record = await Farm.GetEntityAsync(name, cancellationToken).ConfigureAwait(false) ?? throw FarmErrors.EntityNotFound(name);
        _entityIndex[name] = record;
        return (record, true);
    }

    /// <summary>Forgets what this node cached about an entity (it was deleted or changed elsewhere), and with <paramref name="withSubscriptions"/> about a topic's subscriptions.</summary>
    public void ForgetEntity(string name, bool withSubscriptions = false)
    {
        _entityIndex.TryRemove(name, out _);
        if (!withSubscriptions)
        {
            return;
        }
        foreach (var key in _entityIndex.Keys.Where(k => k.StartsWith(name + EntityNames.SubscriptionsSegment, StringComparison.OrdinalIgnoreCase)))
        {
            _entityIndex.TryRemove(key, out _);
        }
    }

    /// <summary>True when this node serves the container the entity lives in.</summary>
    internal bool IsLocal(EntityRecord record) => _containers.ContainsKey(record.ContainerId);

    /// <summary>
    /// A queue was created: on the node that serves its container it starts loaded and empty (see
    /// <see cref="ContainerHost.LoadNewQueueAsync"/>); elsewhere its owner loads it on first use.
    /// </summary>
    internal async Task StartNewQueueAsync(EntityRecord record)
    {
        if (!_containers.TryGetValue(record.ContainerId, out var host))
        {
            return;
        }
        await host.LoadNewQueueAsync(record).ConfigureAwait(false);
        _entityIndex[record.Name] = record;
    }

    /// <summary>Loads a queue or a subscription (with its topic).</summary>
    internal async Task<QueueEntity> LoadAsync(EntityRecord record, CancellationToken cancellationToken)
    {
        if (!_containers.TryGetValue(record.ContainerId, out var host))
        {
            throw FarmErrors.NotOwner(record.Name, OwnerAddressOf(record.ContainerId));
        }
        QueueEntity entity;
        try
        {
            entity = await host.LoadEntityAsync(record, cancellationToken).ConfigureAwait(false);
        }
        catch (BrokerException e) when (e.Code == Contracts.V1.FarmErrorCode.MessagingEntityNotFound)
        {
            // Deleted since it was cached: the next use looks the name up again.
            _entityIndex.TryRemove(KeyValuePair.Create(record.Name, record));
            throw;
        }
        _entityIndex[record.Name] = record;
        return entity;
    }

    /// <summary>
    /// Forgets a deleted queue or topic and deletes its messages; for a topic also its
    /// subscriptions' (<paramref name="childIds"/>, read before the records were deleted).
    /// </summary>
    internal async Task DropEntityAsync(EntityRecord record, IReadOnlyCollection<long>? childIds = null)
    {
        _entityIndex.TryRemove(record.Name, out _);
        foreach (var key in _entityIndex.Keys.Where(k => k.StartsWith(record.Name + EntityNames.SubscriptionsSegment, StringComparison.OrdinalIgnoreCase)))
        {
            _entityIndex.TryRemove(key, out _);
        }
        if (_containers.TryGetValue(record.ContainerId, out var host))
        {
            await host.PurgeEntityAsync(record.Id, childIds).ConfigureAwait(false);
        }
    }

    /// <summary>A subscription was created: its topic, if loaded here, starts fanning out to it.</summary>
    internal async Task AddSubscriptionAsync(EntityRecord subscription, CancellationToken cancellationToken)
    {
        _entityIndex[subscription.Name] = subscription;
        if (_containers.TryGetValue(subscription.ContainerId, out var host))
        {
            await host.AddSubscriptionAsync(subscription.ParentId!.Value, subscription, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>A subscription was deleted: stop serving it and delete its messages.</summary>
    internal async Task DropSubscriptionAsync(EntityRecord subscription)
    {
        _entityIndex.TryRemove(subscription.Name, out _);
        if (_containers.TryGetValue(subscription.ContainerId, out var host))
        {
            await host.RemoveSubscriptionAsync(subscription.ParentId!.Value, subscription.Id).ConfigureAwait(false);
        }
    }

    /// <summary>A rule of a subscription was added or removed: a loaded subscription re-reads its rules.</summary>
    internal async Task RefreshRulesAsync(EntityRecord subscription, CancellationToken cancellationToken)
    {
        if (_containers.TryGetValue(subscription.ContainerId, out var host))
        {
            await host.RefreshRulesAsync(subscription.ParentId!.Value, subscription.Id, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>Applies new settings to a loaded queue, topic or subscription (the farm database already has them).</summary>
    internal void RefreshSettings(EntityRecord record)
    {
        _entityIndex[record.Name] = record;
        if (!_containers.TryGetValue(record.ContainerId, out var host))
        {
            return;
        }
        switch (record.Kind)
        {
            case EntityKinds.Topic when host.TryGetTopic(record.Id, out var topic):
                topic.Settings = TopicSettings.FromJson(record.PropertiesJson);
                break;
            case EntityKinds.Subscription when host.TryGetTopic(record.ParentId!.Value, out var topic)
                && topic.TryGetSubscription(record.Id, out var subscription):
                subscription.Settings = SubscriptionSettings.FromJson(record.PropertiesJson);
                subscription.Queue.Settings = subscription.Settings.ToQueueSettings();
                break;
            case EntityKinds.Queue when host.TryGetEntity(record.Id, out var entity):
                entity.Settings = QueueSettings.FromJson(record.PropertiesJson);
                break;
        }
    }

    /// <summary>
    /// Stops the node and hands its leases back. Idempotent: a second call (or one racing the first)
    /// returns at once instead of disposing the containers, the farm store and the stop signal again.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 1)
        {
            return;
        }
        _metrics.Dispose();
        if (!_stopping.IsCancellationRequested)
        {
            await _stopping.CancelAsync().ConfigureAwait(false);
        }
        foreach (var loop in new[] { _ownershipLoop, _renewalLoop, _crashWatch })
        {
            if (loop is not null)
            {
                // The loops end by cancellation; that is the expected way out.
                await loop.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
            }
        }
        foreach (var (id, host) in _containers)
        {
            await host.DisposeAsync().ConfigureAwait(false);
            if (_farm is not null && !_replaced.Task.IsCompleted)
            {
                // Hand the lease back so a successor does not wait for it to run out.
                await _farm.ReleaseContainerAsync(id, NodeId).ConfigureAwait(false);
            }
        }
        _containers.Clear();
        if (_farm is not null)
        {
            if (!_replaced.Task.IsCompleted)
            {
                // Replaced, the row is the other process's now: leave its state alone.
                await _farm.SetNodeStateAsync(NodeId, NodeStates.Stopped).ConfigureAwait(false);
            }
            await _farm.DisposeAsync().ConfigureAwait(false);
        }
        _processLock?.Dispose();
        if (_sessionLock is not null)
        {
            await _sessionLock.DisposeAsync().ConfigureAwait(false);
        }
        _stopping.Dispose();
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Node {NodeId} serving at {Address} with {Count} containers")]
    private static partial void LogStarted(ILogger logger, long nodeId, string address, int count);

    [LoggerMessage(Level = LogLevel.Information, Message = "Created container {ContainerId}")]
    private static partial void LogContainerCreated(ILogger logger, long containerId);

    private static double Milliseconds(long from, long to) => System.Diagnostics.Stopwatch.GetElapsedTime(from, to).TotalMilliseconds;

    // Queues load on first use, after this: a take is the lease, opening the database (and checking
    // its schema) and fencing it with the new epoch.
    [LoggerMessage(Level = LogLevel.Information, Message = "Took container {ContainerId} at epoch {Epoch} in {Milliseconds:0} ms (lease {LeaseMs:0}, open {OpenMs:0}, fence {FenceMs:0})")]
    private static partial void LogContainerTaken(ILogger logger, long containerId, long epoch, double milliseconds, double leaseMs, double openMs, double fenceMs);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Could not take container {ContainerId} now; trying again on the next pass")]
    private static partial void LogTakeFailed(ILogger logger, long containerId, Exception exception);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Container {ContainerId} is leased by another live node; not taking it")]
    private static partial void LogContainerHeld(ILogger logger, long containerId);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Lost container {ContainerId}; no longer serving it")]
    private static partial void LogContainerLost(ILogger logger, long containerId);

    [LoggerMessage(Level = LogLevel.Error, Message = "Closing container {ContainerId} after it was lost failed")]
    private static partial void LogDisposeFailed(ILogger logger, long containerId, Exception exception);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Could not list the entities of container {ContainerId} after taking it; each is looked up on its first use")]
    private static partial void LogLearnEntitiesFailed(ILogger logger, long containerId, Exception exception);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Heartbeat failed")]
    private static partial void LogHeartbeatFailed(ILogger logger, Exception exception);
}
