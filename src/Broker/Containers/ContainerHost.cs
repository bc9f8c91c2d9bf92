using System.Collections.Concurrent;
using Farm.Broker.Entities;
using Farm.Broker.Rules;
using Farm.Broker.Topics;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Containers;

/// <summary>
/// A container this broker owns: its database (raised to our epoch before we serve), its commit
/// queue, the entities loaded from it, and the timer that sweeps their locks, schedules and TTLs.
/// </summary>
internal sealed partial class ContainerHost : IAsyncDisposable
{
    // Queues and subscriptions (each subscription is served by a QueueEntity of its own), by entity id.
    private readonly ConcurrentDictionary<long, QueueEntity> _entities = new();

    /// <summary>When each served entity is next due for the sweep; the sweep visits only those.</summary>
    private readonly SweepSchedule _sweeps = new();

    /// <summary>Entries the sweep schedule holds (for tests).</summary>
    internal int SweepEntries => _sweeps.Count;

    /// <summary>The entities one sweep found due (reused: only one sweep runs at a time).</summary>
    private readonly List<QueueEntity> _dueEntities = [];
    private readonly ConcurrentDictionary<long, TopicEntity> _topics = new();
    // Serialises subscription adds and rule refreshes (each also waits for its topic's load, if one is going).
    private readonly SemaphoreSlim _loading = new(1, 1);
    private readonly TimeProvider _time;
    private readonly BrokerOptions _options;
    private readonly ILogger _logger;
    private readonly ITimer _sweepTimer;
    private int _lost;
    private int _sweeping;
    // Set first thing in DisposeAsync: a load that finishes after it must not leave its entity
    // serving in a host nobody will unload again (its receivers would wait on it forever).
    private int _closing;
    private ForwardSend _forward = null!;
    private IFarmStore _farm = null!;
    private MessageCacheBudget _messageCache = null!;

    private readonly ITimer _leaseTimer;
    private readonly TimeSpan _leaseFence;
    private readonly TimeProvider _leaseClock;
    private Action<ContainerHost> _onLost = null!;

    private ContainerHost(
        ContainerRecord record, IContainerDatabase database, CommitQueue commits, TimeProvider time, BrokerOptions options, ILogger logger,
        TimeSpan leaseFence, DateTimeOffset leaseStartedAt, TimeProvider leaseClock)
    {
        Id = record.Id;
        Epoch = record.Epoch;
        Database = database;
        Commits = commits;
        _time = time;
        _options = options;
        _logger = logger;
        TakenAt = time.GetUtcNow();
        _sweepTimer = time.CreateTimer(_ => Sweep(), null, options.SweepInterval, options.SweepInterval);
        _leaseFence = leaseFence;
        _leaseClock = leaseClock;
        _leaseTimer = leaseClock.CreateTimer(_ => OnLeaseDeadline(), null, Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
        LeaseDeadline = leaseStartedAt + leaseFence;
    }

    public long Id { get; }

    public long Epoch { get; }

    /// <summary>When this broker took the container (its clock); rebalancing leaves young ones alone.</summary>
    public DateTimeOffset TakenAt { get; }

    public IContainerDatabase Database { get; }

    public CommitQueue Commits { get; }

    /// <summary>True once a write found a higher epoch: another broker owns the container now.</summary>
    public bool IsLost => Volatile.Read(ref _lost) == 1;

    public IEnumerable<QueueEntity> Entities => _entities.Values;

    public IEnumerable<TopicEntity> Topics => _topics.Values;

    /// <summary>
    /// When this broker stops serving the container unless its lease was renewed first (its own
    /// clock). The farm may give the container to another node once the lease runs out in the
    /// database; the deadline falls short of that, so by then this node has stopped handing out
    /// messages from memory and cannot act as a second owner, even while the farm database is
    /// unreachable.
    /// </summary>
    public DateTimeOffset LeaseDeadline { get; private set; }

    /// <summary>A renewal that started at <paramref name="renewalStartedAt"/> succeeded: the deadline moves on.</summary>
    public void LeaseRenewed(DateTimeOffset renewalStartedAt)
    {
        var deadline = renewalStartedAt + _leaseFence;
        if (deadline <= LeaseDeadline)
        {
            return;
        }
        LeaseDeadline = deadline;
        ArmLeaseTimer();
    }

    private void ArmLeaseTimer()
    {
        var due = LeaseDeadline - _leaseClock.GetUtcNow();
        if (due <= TimeSpan.Zero)
        {
            OnLeaseDeadline();
            return;
        }
        _leaseTimer.Change(due, Timeout.InfiniteTimeSpan);
    }

    private void OnLeaseDeadline()
    {
        if (_leaseClock.GetUtcNow() < LeaseDeadline)
        {
            // Renewed while this callback was on its way.
            ArmLeaseTimer();
            return;
        }
        if (Interlocked.Exchange(ref _lost, 1) == 1)
        {
            return;
        }
        LogLeaseDeadlinePassed(_logger, Id, LeaseDeadline);
        _onLost(this);
    }

    /// <summary>
    /// Opens the container database and fences it with the lease's epoch before anything is served
    /// (promise 3): from then on, a former owner's writes fail on the epoch check.
    /// </summary>
    /// <param name="leaseStartedAt">When the latest lease that landed was asked for (<paramref name="leaseClock"/>): the take's,
    /// or a renewal's while the database opened. Read once the database is fenced; the deadline runs from there.</param>
    /// <param name="leaseFence">How long after a lease was asked for this node stops serving unless renewed.</param>
    /// <param name="onLost">Called once when the host must stop: another broker owns the container, the
    /// lease deadline passed, or a commit's outcome is unknown and the container must be read again.</param>
    public static async Task<ContainerHost> OpenAsync(
        ContainerRecord record, Func<IContainerDatabase> openDatabase, TimeProvider time, BrokerOptions options, MessageCacheBudget messageCache,
        ForwardSend forward, IFarmStore farm, Action<ContainerHost> onLost,
        Func<DateTimeOffset> leaseStartedAt, TimeSpan leaseFence, TimeProvider leaseClock, ILogger logger, CancellationToken cancellationToken)
    {
        var database = openDatabase();
        if (!await database.RaiseEpochAsync(record.Epoch, cancellationToken).ConfigureAwait(false))
        {
            var stored = await database.ReadEpochAsync(cancellationToken).ConfigureAwait(false);
            await database.DisposeAsync().ConfigureAwait(false);
            throw new InvalidOperationException(
                $"Container {record.Id} carries epoch {stored}, newer than this lease's {record.Epoch}: another broker took it.");
        }
        ContainerHost? host = null;
        var commits = new CommitQueue(database, record.Id, record.Epoch, options, time,
            onEpochLost: _ =>
            {
                host?.MarkLost();
                onLost(host!);
            },
            onOutcomeUnknown: _ => onLost(host!),
            logger);
        host = new ContainerHost(record, database, commits, time, options, logger, leaseFence, leaseStartedAt(), leaseClock)
        {
            _forward = forward,
            _messageCache = messageCache,
            _farm = farm,
            _onLost = onLost,
        };
        host.ArmLeaseTimer();
        return host;
    }

    public bool TryGetEntity(long entityId, out QueueEntity entity) => _entities.TryGetValue(entityId, out entity!);

    public bool TryGetTopic(long topicId, out TopicEntity topic) => _topics.TryGetValue(topicId, out topic!);

    private long TakeoverLoadBytes => Math.Min(_options.MessageCacheSizePerEntity, _options.TakeoverLoadBytes);

    /// <summary>
    /// Queues and topics of this container loading at once (each its own reads): a farm with
    /// thousands of them comes up in parallel, not one after another.
    /// </summary>
    internal const int LoadsAtOnce = 8;

    private readonly SemaphoreSlim _loadSlots = new(LoadsAtOnce, LoadsAtOnce);
    private readonly ConcurrentDictionary<long, Lazy<Task<QueueEntity>>> _queueLoads = new();
    private readonly ConcurrentDictionary<long, Lazy<Task<TopicEntity>>> _topicLoads = new();

    /// <summary>
    /// Loads a queue's messages from the database once; later calls return the loaded one. Callers
    /// asking for the same queue share one load; different queues load side by side, up to
    /// <see cref="LoadsAtOnce"/>. A caller that gives up does not cancel the load others wait for.
    /// </summary>
    public async Task<QueueEntity> LoadEntityAsync(EntityRecord record, CancellationToken cancellationToken)
    {
        if (_entities.TryGetValue(record.Id, out var loaded))
        {
            return loaded;
        }
        if (record.Kind == EntityKinds.Subscription)
        {
            return await LoadSubscriptionAsync(record, cancellationToken).ConfigureAwait(false);
        }
        return await SharedQueueLoad(record, isNew: false).WaitAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// A queue this node just created in this container: nothing is stored for it, so it starts
    /// loaded and empty, without a read. Left to its first use, 15,000 new queues were loaded all at
    /// once when their receivers opened, with the node silent to its clients meanwhile.
    /// </summary>
    public Task<QueueEntity> LoadNewQueueAsync(EntityRecord record)
    {
        if (_entities.TryGetValue(record.Id, out var loaded))
        {
            return Task.FromResult(loaded);
        }
        // Through the same shared load as a first use: a send racing the create shares it.
        return SharedQueueLoad(record, isNew: true);
    }

    /// <summary>The one load of a queue under way, started by whichever caller came first.</summary>
    private Task<QueueEntity> SharedQueueLoad(EntityRecord record, bool isNew) =>
        _queueLoads.GetOrAdd(record.Id, _ => new Lazy<Task<QueueEntity>>(() => isNew ? StartNewQueue(record) : AwaitFirstUse(record))).Value;

    /// <summary>Queues wanted for the first time, waiting for <see cref="FindQuietQueuesAsync"/>.</summary>
    private readonly ConcurrentQueue<(EntityRecord Record, TaskCompletionSource<QueueEntity> Loaded)> _firstUses = new();
    private int _findingQuiet;

    /// <summary>Most queues one <see cref="IContainerDatabase.LoadQuietHeadsAsync"/> asks about.</summary>
    internal const int QuietLookupBatch = 512;

    private Task<QueueEntity> StartNewQueue(EntityRecord record)
    {
        try
        {
            return Task.FromResult(Register(record, EntityLoad.EmptyHead(record.Id), System.Diagnostics.Stopwatch.GetTimestamp()));
        }
        catch (Exception e)
        {
            return Task.FromException<QueueEntity>(e);
        }
        finally
        {
            _queueLoads.TryRemove(record.Id, out _);
        }
    }

    /// <summary>
    /// A first use's load: the queue joins those waiting for one lookup of which are quiet (nothing
    /// stored). A node that starts with 15,000 stored queues, most of them empty, is asked for all of
    /// them within seconds; eight statements each kept it too busy to answer its clients.
    /// </summary>
    private Task<QueueEntity> AwaitFirstUse(EntityRecord record)
    {
        var loaded = new TaskCompletionSource<QueueEntity>(TaskCreationOptions.RunContinuationsAsynchronously);
        _firstUses.Enqueue((record, loaded));
        if (Interlocked.CompareExchange(ref _findingQuiet, 1, 0) == 0)
        {
            _ = Task.Run(FindQuietQueuesAsync);
        }
        return loaded.Task;
    }

    /// <summary>
    /// One at a time per container: takes the queues waiting (up to <see cref="QuietLookupBatch"/>),
    /// starts the quiet ones at once from one read, and hands each of the others to its own head load
    /// (<see cref="LoadHeadAsync"/>, up to <see cref="LoadsAtOnce"/> side by side, so a slow one holds
    /// up no other); again until none is waiting.
    /// </summary>
    private async Task FindQuietQueuesAsync()
    {
        while (true)
        {
            var batch = new List<(EntityRecord Record, TaskCompletionSource<QueueEntity> Loaded)>();
            while (batch.Count < QuietLookupBatch && _firstUses.TryDequeue(out var waiting))
            {
                batch.Add(waiting);
            }
            if (batch.Count == 0)
            {
                Volatile.Write(ref _findingQuiet, 0);
                // A queue that arrived after the last dequeue, while this still ran, found it running: take it.
                if (_firstUses.IsEmpty || Interlocked.CompareExchange(ref _findingQuiet, 1, 0) != 0)
                {
                    return;
                }
                continue;
            }

            var started = System.Diagnostics.Stopwatch.GetTimestamp();
            Dictionary<long, EntityRecord> records;
            Dictionary<long, EntityLoad> quiet;
            try
            {
                // Each record afresh (a node that served the container before may have changed it since it was cached), all in one read.
                records = (await _farm.GetEntitiesByIdAsync([.. batch.Select(w => w.Record.Id)]).ConfigureAwait(false)).ToDictionary(r => r.Id);
                quiet = await QuietHeadsAsync([.. records.Keys], _time.GetUtcNow().ToUnixTimeMilliseconds()).ConfigureAwait(false);
            }
            catch (Exception e)
            {
                // Each caller sees the failure; the next use of each queue tries again.
                foreach (var (record, loaded) in batch)
                {
                    Fail(record, loaded, e);
                }
                continue;
            }
            foreach (var (cached, loaded) in batch)
            {
                if (!records.TryGetValue(cached.Id, out var record))
                {
                    Fail(cached, loaded, FarmErrors.EntityNotFound(cached.Name));
                }
                else if (quiet.TryGetValue(record.Id, out var load))
                {
                    Finish(record, loaded, () => Register(record, load, started));
                }
                else
                {
                    _ = LoadHeadAsync(record, loaded);
                }
            }
        }
    }

    /// <summary>A queue with something stored: its head load, in one of the <see cref="LoadsAtOnce"/> slots.</summary>
    private async Task LoadHeadAsync(EntityRecord record, TaskCompletionSource<QueueEntity> loaded)
    {
        await _loadSlots.WaitAsync().ConfigureAwait(false);
        try
        {
            var started = System.Diagnostics.Stopwatch.GetTimestamp();
            // The head only: a deep queue's takeover reads what the cache holds, not the backlog.
            // A first part of the head: the rest of the cache fills by read-back while it serves.
            var load = await Database.LoadEntityHeadAsync(record.Id, _time.GetUtcNow().ToUnixTimeMilliseconds(), TakeoverLoadBytes, maxDuplicates: _options.DuplicateIdsInMemoryPerEntity).ConfigureAwait(false);
            Finish(record, loaded, () => Register(record, load, started));
        }
        catch (Exception e)
        {
            Fail(record, loaded, e);
        }
        finally
        {
            _loadSlots.Release();
        }
    }

    /// <summary>Serves the queue and hands it to its callers; later callers find it loaded.</summary>
    private void Finish(EntityRecord record, TaskCompletionSource<QueueEntity> loaded, Func<QueueEntity> register)
    {
        QueueEntity entity;
        try
        {
            entity = register();
        }
        catch (Exception e)
        {
            Fail(record, loaded, e);
            return;
        }
        loaded.TrySetResult(entity);
        _queueLoads.TryRemove(record.Id, out _);
    }

    /// <summary>The load failed: its callers see why, and the next use of the queue tries again.</summary>
    private void Fail(EntityRecord record, TaskCompletionSource<QueueEntity> loaded, Exception error)
    {
        _queueLoads.TryRemove(record.Id, out _);
        loaded.TrySetException(error);
    }

    /// <summary>Serves the entity under <paramref name="id"/> from now on, swept from the next tick.</summary>
    private void Serve(long id, QueueEntity entity)
    {
        _entities[id] = entity;
        entity.JoinSweeps(_sweeps);
    }

    /// <summary>Builds the queue from what was read and serves it from now on (the one loaded already, if any).</summary>
    private QueueEntity Register(EntityRecord record, EntityLoad load, long started)
    {
        if (_entities.TryGetValue(record.Id, out var loaded))
        {
            return loaded;
        }
        var settings = QueueSettings.FromJson(record.PropertiesJson);
        var entity = new QueueEntity(record.Id, record.Name, settings, Commits, _time, _options, _options.MessageCacheSizePerEntity, _messageCache) { Forward = _forward, ForwardLog = _logger };
        try
        {
            entity.Load(load);
        }
        catch
        {
            // Never served: it leaves the node's entity count (the message cache's floors) as it came.
            entity.Unload(UnloadReason(entity.Name));
            throw;
        }
        Serve(record.Id, entity);
        ThrowIfClosing(entity.Name, () =>
        {
            entity.Unload(UnloadReason(entity.Name));
            _entities.TryRemove(KeyValuePair.Create(record.Id, entity));
        });
        LogEntityLoaded(_logger, record.Name, Id, load.Messages.Count, System.Diagnostics.Stopwatch.GetElapsedTime(started).TotalMilliseconds);
        return entity;
    }

    /// <summary>
    /// Stops serving the entity and deletes its messages durably; for a topic, its subscriptions'
    /// too (<paramref name="childIds"/>: the subscriptions the farm database had, loaded here or not).
    /// </summary>
    public async Task PurgeEntityAsync(long entityId, IReadOnlyCollection<long>? childIds = null)
    {
        var purged = new HashSet<long> { entityId };
        purged.UnionWith(childIds ?? []);
        if (_entities.TryRemove(entityId, out var entity))
        {
            entity.MarkDeleted();
        }
        if (_topics.TryRemove(entityId, out var topic))
        {
            topic.MarkDeleted();
            foreach (var subscription in topic.Subscriptions)
            {
                purged.Add(subscription.Id);
            }
        }
        foreach (var id in purged)
        {
            _entities.TryRemove(id, out _);
        }
        await Commits.CommitAsync(batch => batch.PurgedEntities.AddRange(purged)).ConfigureAwait(false);
    }

    /// <summary>
    /// The first half of a planned hand-over: stop taking new work, then wait (up to
    /// <paramref name="maxWait"/>) until receivers have settled the locks they hold, so a planned
    /// move costs them nothing. Locks still held when the wait ends are dropped; those messages come
    /// back from the next owner, as after a crash.
    /// </summary>
    public async Task StopTakingWorkAsync(TimeSpan maxWait)
    {
        foreach (var topic in _topics.Values)
        {
            topic.StopTakingWork(FarmErrors.Busy(
                $"'{topic.Name}' is moving to another broker; try again."));
        }
        foreach (var entity in _entities.Values)
        {
            entity.StopTakingWork(FarmErrors.Busy(
                $"'{entity.Name}' is moving to another broker; try again."));
        }
        var deadline = _time.GetUtcNow() + maxWait;
        while (_entities.Values.Any(e => e.HeldLocks > 0) && _time.GetUtcNow() < deadline)
        {
            await Task.Delay(TimeSpan.FromMilliseconds(20), _time).ConfigureAwait(false);
        }
    }

    private void MarkLost() => Interlocked.Exchange(ref _lost, 1);

    /// <summary>
    /// Loads a topic (once) with all its subscriptions and their rules. As for queues: callers of
    /// one topic share its load, topics load side by side (up to <see cref="LoadsAtOnce"/>, shared
    /// with queues), and a caller that gives up cancels nothing.
    /// </summary>
    public async Task<TopicEntity> LoadTopicAsync(EntityRecord record, CancellationToken cancellationToken)
    {
        if (_topics.TryGetValue(record.Id, out var loaded))
        {
            return loaded;
        }
        var load = _topicLoads.GetOrAdd(record.Id, _ => new Lazy<Task<TopicEntity>>(() => ReadTopicAsync(record)));
        return await load.Value.WaitAsync(cancellationToken).ConfigureAwait(false);
    }

    private async Task<TopicEntity> ReadTopicAsync(EntityRecord record)
    {
        await _loadSlots.WaitAsync().ConfigureAwait(false);
        try
        {
            if (_topics.TryGetValue(record.Id, out var loaded))
            {
                return loaded;
            }
            var nowMs = _time.GetUtcNow().ToUnixTimeMilliseconds();
            var topic = new TopicEntity(record.Id, record.Name, TopicSettings.FromJson(record.PropertiesJson), Commits, _time, _options);
            // The topic's copies stay in the database; each subscription reads its head with the copies it points at.
            var topicLoad = await Database.LoadEntityStateAsync(record.Id, nowMs, _options.DuplicateIdsInMemoryPerEntity).ConfigureAwait(false);
            var children = await _farm.ListChildEntitiesAsync(record.Id).ConfigureAwait(false);
            var rules = (await _farm.ListRulesOfTopicAsync(record.Id).ConfigureAwait(false)).ToLookup(r => r.SubscriptionId);
            var quiet = await QuietHeadsAsync([.. children.Select(c => c.Id)], nowMs, copiesOf: record.Id).ConfigureAwait(false);
            var subscriptions = new List<(TopicEntity.Subscription, EntityLoad)>();
            var made = new List<TopicEntity.Subscription>();
            try
            {
                foreach (var child in children)
                {
                    var subscription = NewSubscription(child, record.Id, rules[child.Id]);
                    made.Add(subscription);
                    // Only a subscription with rows of its own needs its head read (one read each).
                    var load = quiet.TryGetValue(child.Id, out var quietLoad)
                        ? quietLoad
                        : await Database.LoadEntityHeadAsync(child.Id, nowMs, TakeoverLoadBytes, copiesOf: record.Id).ConfigureAwait(false);
                    subscriptions.Add((subscription, load));
                }
                topic.Load(topicLoad, subscriptions);
            }
            catch
            {
                // A read failed (the database went away): none of them is served, and none stays in
                // the node's entity count (the message cache's floors).
                topic.Unload(UnloadReason(topic.Name));
                made.ForEach(s => s.Queue.Unload(UnloadReason(topic.Name)));
                throw;
            }
            foreach (var (subscription, _) in subscriptions)
            {
                Serve(subscription.Id, subscription.Queue);
            }
            _topics[record.Id] = topic;
            ThrowIfClosing(topic.Name, () =>
            {
                topic.Unload(UnloadReason(topic.Name));
                _topics.TryRemove(KeyValuePair.Create(record.Id, topic));
                foreach (var (subscription, _) in subscriptions)
                {
                    _entities.TryRemove(KeyValuePair.Create(subscription.Id, subscription.Queue));
                }
            });
            LogTopicLoaded(_logger, record.Name, Id, subscriptions.Count);
            return topic;
        }
        finally
        {
            _loadSlots.Release();
            // Removed only after the topic is in _topics: a subscription added or changed meanwhile
            // (below) sees the load going or the loaded topic, never neither.
            _topicLoads.TryRemove(record.Id, out _);
        }
    }

    /// <summary>
    /// Which of <paramref name="entityIds"/> have nothing stored (see <see cref="IContainerDatabase.LoadQuietHeadsAsync"/>),
    /// <see cref="QuietLookupBatch"/> to a read. A topic with 1,000 subscriptions read each one's head
    /// in turn when it loaded (a restart, a takeover), most of them empty.
    /// </summary>
    private async Task<Dictionary<long, EntityLoad>> QuietHeadsAsync(IReadOnlyList<long> entityIds, long nowMs, long copiesOf = 0)
    {
        var quiet = new Dictionary<long, EntityLoad>();
        foreach (var chunk in entityIds.Chunk(QuietLookupBatch))
        {
            foreach (var load in await Database.LoadQuietHeadsAsync(chunk, nowMs, copiesOf).ConfigureAwait(false))
            {
                quiet[load.EntityId] = load;
            }
        }
        return quiet;
    }

    /// <summary>
    /// Waits for the topic's load if one is going: it may have read the subscriptions and rules
    /// before a change (a subscription added or deleted, a rule changed) that a caller now applies
    /// to the loaded topic. A failed load leaves the topic
    /// unloaded here, which the caller finds.
    /// </summary>
    private async Task AfterTopicLoadAsync(long topicId, CancellationToken cancellationToken)
    {
        if (!_topicLoads.TryGetValue(topicId, out var going))
        {
            return;
        }
        try
        {
            await going.Value.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (Exception) when (!cancellationToken.IsCancellationRequested)
        {
            // The load failed: nothing of the topic is loaded here.
        }
    }

    private async Task<QueueEntity> LoadSubscriptionAsync(EntityRecord record, CancellationToken cancellationToken)
    {
        EntityNames.TrySplitSubscriptionPath(record.Name, out var topicName, out _);
        var topicRecord = await _farm.GetEntityAsync(topicName, cancellationToken).ConfigureAwait(false);
        if (topicRecord is null || topicRecord.Id != record.ParentId)
        {
            throw FarmErrors.EntityNotFound(record.Name);
        }
        var topic = await LoadTopicAsync(topicRecord, cancellationToken).ConfigureAwait(false);
        if (_entities.TryGetValue(record.Id, out var queue))
        {
            return queue;
        }
        // Created after the topic was loaded here and not announced yet: add it now.
        return (await AddSubscriptionAsync(topic.Id, record, cancellationToken).ConfigureAwait(false))
            ?? throw FarmErrors.EntityNotFound(record.Name);
    }

    private TopicEntity.Subscription NewSubscription(EntityRecord record, long topicId, IEnumerable<RuleRecord> rules)
    {
        var settings = SubscriptionSettings.FromJson(record.PropertiesJson);
        var queue = new QueueEntity(record.Id, record.Name, settings.ToQueueSettings(), Commits, _time, _options, _options.MessageCacheSizePerEntity, _messageCache)
        {
            Forward = _forward,
            ForwardLog = _logger,
            CopiesOf = topicId,
        };
        EntityNames.TrySplitSubscriptionPath(record.Name, out _, out var shortName);
        return new TopicEntity.Subscription(record.Id, shortName, queue, ToRuleSet(rules), settings);
    }

    private static RuleSet ToRuleSet(IEnumerable<RuleRecord> rules) =>
        new(rules.Select(r => RuleDefinitions.Parse(RuleDefinitions.FromJson(r.DefinitionJson))));

    /// <summary>
    /// A subscription was created: when its topic is loaded here, it starts receiving the topic's
    /// next messages. Reads its rules from the farm database. Null when the topic is not loaded here.
    /// </summary>
    public async Task<QueueEntity?> AddSubscriptionAsync(long topicId, EntityRecord record, CancellationToken cancellationToken)
    {
        await AfterTopicLoadAsync(topicId, cancellationToken).ConfigureAwait(false);
        await _loading.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (!_topics.TryGetValue(topicId, out var topic))
            {
                return null;
            }
            if (topic.TryGetSubscription(record.Id, out var existing))
            {
                return existing.Queue;
            }
            var rules = await _farm.ListRulesAsync(record.Id, cancellationToken).ConfigureAwait(false);
            var subscription = NewSubscription(record, topicId, rules);
            Serve(record.Id, subscription.Queue);
            // Its first message finds it following the topic (no rows of its own, where the store allows).
            await topic.AddSubscription(subscription).ConfigureAwait(false);
            ThrowIfClosing(record.Name, () =>
            {
                subscription.Queue.Unload(UnloadReason(record.Name));
                _entities.TryRemove(KeyValuePair.Create(record.Id, subscription.Queue));
            });
            return subscription.Queue;
        }
        finally
        {
            _loading.Release();
        }
    }

    /// <summary>A subscription was deleted: stop serving it, purge its rows; the topic then looks for copies nothing points at any more.</summary>
    public async Task RemoveSubscriptionAsync(long topicId, long subscriptionId)
    {
        // A load going may have read the subscription before it was deleted: remove it from the loaded topic.
        await AfterTopicLoadAsync(topicId, CancellationToken.None).ConfigureAwait(false);
        _entities.TryRemove(subscriptionId, out _);
        var topic = _topics.GetValueOrDefault(topicId);
        topic?.RemoveSubscription(subscriptionId);
        await Commits.CommitAsync(batch => batch.PurgedEntities.Add(subscriptionId)).ConfigureAwait(false);
        topic?.RescanCopies();
    }

    /// <summary>Re-reads a loaded subscription's rules after one was added or removed (serialised, so the last read wins).</summary>
    public async Task RefreshRulesAsync(long topicId, long subscriptionId, CancellationToken cancellationToken)
    {
        await AfterTopicLoadAsync(topicId, cancellationToken).ConfigureAwait(false);
        await _loading.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_topics.TryGetValue(topicId, out var topic) && topic.TryGetSubscription(subscriptionId, out var subscription))
            {
                subscription.Rules = ToRuleSet(await _farm.ListRulesAsync(subscriptionId, cancellationToken).ConfigureAwait(false));
            }
        }
        finally
        {
            _loading.Release();
        }
    }

    private long _lastPruneMs;

    /// <summary>Queues a delete of expired duplicate history and send records, at most once per <see cref="BrokerOptions.DuplicatePruneInterval"/>.</summary>
    private void PruneDuplicateHistory()
    {
        var now = _time.GetUtcNow().ToUnixTimeMilliseconds();
        if (now - _lastPruneMs < (long)_options.DuplicatePruneInterval.TotalMilliseconds)
        {
            return;
        }
        _lastPruneMs = now;
        // A failed prune is harmless: expired history is never read back, and the next one takes it.
        var sendsBefore = Messaging.RecentSends.RememberedSinceMs(_time);
        _ = Commits.CommitAsync(batch =>
            {
                batch.PruneDuplicatesBeforeMs = now;
                batch.PruneSendsBeforeMs = sendsBefore;
            })
            .ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.OnlyOnFaulted);
    }

    /// <summary>
    /// The sweep timer's callback. An exception here would crash the process (timer callbacks run on
    /// the thread pool with nobody to catch), so each topic and entity is swept under its own catch;
    /// and a tick that comes while the previous sweep still runs is skipped, not run beside it.
    /// Topics (few) are each swept every tick; queues and subscriptions when their
    /// <see cref="SweepSchedule"/> says they are due: at their due time, and at least every
    /// <see cref="QueueEntity.MaxSweepsSkipped"/> + 1 ticks.
    /// </summary>
    internal void Sweep()
    {
        if (Interlocked.Exchange(ref _sweeping, 1) == 1)
        {
            return;
        }
        try
        {
            foreach (var (_, topic) in _topics)
            {
                try
                {
                    topic.Sweep();
                }
                catch (Exception e)
                {
                    LogSweepFailed(_logger, topic.Name, e);
                }
            }
            // Only the entities due (see SweepSchedule); one no longer served here is passed by.
            _sweeps.TakeDue(_time.GetUtcNow().ToUnixTimeMilliseconds(), _dueEntities);
            foreach (var entity in _dueEntities)
            {
                try
                {
                    if (_entities.TryGetValue(entity.Id, out var served) && ReferenceEquals(served, entity))
                    {
                        entity.SweepDue();
                    }
                }
                catch (Exception e)
                {
                    LogSweepFailed(_logger, entity.Name, e);
                }
            }
            _dueEntities.Clear();
            try
            {
                PruneDuplicateHistory();
            }
            catch (Exception e)
            {
                LogSweepFailed(_logger, $"container {Id}'s duplicate history", e);
            }
        }
        finally
        {
            Volatile.Write(ref _sweeping, 0);
        }
    }

    /// <summary>Why an entity of this host stops serving when the host closes.</summary>
    private BrokerException UnloadReason(string name) => IsLost
        ? FarmErrors.NotOwner(name, null)
        : FarmErrors.Busy($"The broker serving '{name}' is stopping; try again.");

    /// <summary>
    /// Called by a load right after it registered what it loaded. When the host has begun closing,
    /// its dispose may already have unloaded what it found, without this: <paramref name="undo"/>
    /// unloads it and takes it out, and the caller sees why. The full fence orders the register
    /// before the read of <see cref="_closing"/>, as <see cref="DisposeAsync"/> orders its write
    /// before its walk of the maps: one of the two always sees the other.
    /// </summary>
    private void ThrowIfClosing(string name, Action undo)
    {
        if (Interlocked.CompareExchange(ref _closing, 0, 0) == 0)
        {
            return;
        }
        undo();
        throw UnloadReason(name);
    }

    public async ValueTask DisposeAsync()
    {
        // First: a load finishing from now on unloads its own entity (ThrowIfClosing).
        Interlocked.Exchange(ref _closing, 1);
        // Entities stop taking work before the commit queue drains. A topic send still in the queue
        // commits afterwards; its subscriptions, only unloaded, leave its rows for the next owner
        // (only a deleted subscription drops rows), so nothing acknowledged is deleted here.
        foreach (var topic in _topics.Values)
        {
            topic.Unload(UnloadReason(topic.Name));
        }
        foreach (var entity in _entities.Values)
        {
            entity.Unload(UnloadReason(entity.Name));
        }
        // Timers go after the entities stopped serving: a lost container must stop handing out
        // messages at once, not after a timer's disposal yields.
        await _sweepTimer.DisposeAsync().ConfigureAwait(false);
        await _leaseTimer.DisposeAsync().ConfigureAwait(false);
        await Commits.DisposeAsync().ConfigureAwait(false);
        await Database.DisposeAsync().ConfigureAwait(false);
    }

    // Debug: a container of 15,000 queues logged 15,000 lines on each take, and the console
    // logger's queue, once full, blocks the threads that log. "Took container ..." sums a take up.
    [LoggerMessage(Level = LogLevel.Debug, Message = "Loaded {Entity} from container {ContainerId}: {Count} messages in memory in {Milliseconds:0} ms; the rest is counted while it serves")]
    private static partial void LogEntityLoaded(ILogger logger, string entity, long containerId, int count, double milliseconds);

    [LoggerMessage(Level = LogLevel.Information, Message = "Loaded topic {Entity} from container {ContainerId}: {Subscriptions} subscriptions")]
    private static partial void LogTopicLoaded(ILogger logger, string entity, long containerId, int subscriptions);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Container {ContainerId}: its lease was not renewed by {Deadline:O}; this broker stops serving it")]
    private static partial void LogLeaseDeadlinePassed(ILogger logger, long containerId, DateTimeOffset deadline);

    [LoggerMessage(Level = LogLevel.Error, Message = "Sweeping {Entity} failed")]
    private static partial void LogSweepFailed(ILogger logger, string entity, Exception exception);
}
