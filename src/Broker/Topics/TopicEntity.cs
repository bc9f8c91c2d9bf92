using Farm.Broker.Telemetry;
using Farm.Broker.Containers;
using Farm.Broker.Entities;
using Farm.Broker.Rules;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Broker.Topics;

/// <summary>
/// One topic as its owning broker serves it. A message sent to the topic is stored once, as the
/// topic's row with the payload (its copy); each subscription whose rules match gets a row of its
/// own that points at it (no payload, unless a rule action changed the message for that
/// subscription) and, when its message cache has room, a <see cref="StoredMessage"/> sharing the
/// sent bytes. Subscriptions are served by <see cref="QueueEntity"/>, paged like queues, so every
/// receive and settle operation of queues works on them; what they read back from the database
/// comes with the copy its rows point at. The topic keeps no copies in memory: it deletes the ones
/// nothing points at any more by an indexed query between two commits (TopicEntity.Copies.cs).
/// <para>
/// SupportOrdering on: sequence numbers, rule evaluation and queuing the commit happen under one
/// lock, so commits, and with them every subscription's messages, follow the order the topic
/// accepted them. Off: only the sequence numbers are taken under the lock; concurrent sends
/// evaluate rules in parallel and may commit out of order. The mode is read once per send, so
/// changing it on a live topic affects the next sends and nothing in flight.
/// </para>
/// </summary>
internal sealed partial class TopicEntity : ISendTarget
{
    /// <summary>From this many subscriptions on, an unordered send evaluates their rules on several threads.</summary>
    private const int ParallelFanOutThreshold = 64;

    public const string FilterEvaluationFailed = "FilterEvaluationException";

    private readonly object _sendGate = new();

    /// <summary>Bytes of sends accepted whose commit has not finished (guarded by the send lock): counted against MaxSizeInMegabytes.</summary>
    private long _sendingBytes;
    private readonly DuplicateHistory _duplicates;
    private readonly CommitQueue _commits;

    public CommitQueue Commits => _commits;
    private readonly TimeProvider _time;
    private readonly BrokerOptions _options;
    private long _nextSequence = 1;
    private Subscription[] _subscriptions = [];
    private BrokerException? _unloaded;
    private BrokerException? _stopping;
    private bool _deleted;
    private readonly InFlightIds _inFlightIds = new();

    /// <summary><see cref="InFlightIds.Contains"/> as a delegate made once: the sweep passes it every 250 ms.</summary>
    private readonly Func<string, bool> _isInFlight;

    /// <summary>Completes when the topic is unloaded: a send waiting for another's outcome stops waiting.</summary>
    private readonly TaskCompletionSource _unloadedSignal = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public TopicEntity(long id, string name, TopicSettings settings, CommitQueue commits, TimeProvider time, BrokerOptions options)
    {
        Id = id;
        Name = name;
        Counters = new EntityCounters(name);
        Settings = settings;
        _commits = commits;
        _time = time;
        _options = options;
        _duplicates = new DuplicateHistory(options.DuplicateIdsInMemoryPerEntity, (ids, now) => commits.Database.FindDuplicatesAsync(id, ids, now));
        _isInFlight = _inFlightIds.Contains;
    }

    /// <summary>Duplicate-detection ids kept exactly in memory, for tests of the bound.</summary>
    internal int DuplicateIdsInMemory
    {
        get
        {
            lock (_sendGate)
            {
                return _duplicates.InMemoryCount;
            }
        }
    }

    public long Id { get; }

    public string Name { get; }

    /// <summary>What this node did with the topic's messages (metrics; its subscriptions count their own).</summary>
    public EntityCounters Counters { get; }

    /// <summary>Replaced as a whole on update; each send reads it once.</summary>
    public TopicSettings Settings { get; set; }

    /// <summary>The subscriptions as of now; replaced as a whole when one is added or removed.</summary>
    public IReadOnlyList<Subscription> Subscriptions => Volatile.Read(ref _subscriptions);

    private long NowMs => _time.GetUtcNow().ToUnixTimeMilliseconds();

    /// <summary>A subscription: its id, short name, the queue machinery serving it, its rules and settings.</summary>
    internal sealed class Subscription(long id, string name, QueueEntity queue, RuleSet rules, SubscriptionSettings settings)
    {
        public long Id { get; } = id;
        public string Name { get; } = name;
        public QueueEntity Queue { get; } = queue;

        /// <summary>Swapped as a whole when a rule is added or removed; a fan-out uses the set it read.</summary>
        public RuleSet Rules { get; set; } = rules;

        public SubscriptionSettings Settings { get; set; } = settings;
    }

    public bool TryGetSubscription(long id, out Subscription subscription)
    {
        subscription = Array.Find(Volatile.Read(ref _subscriptions), s => s.Id == id)!;
        return subscription is not null;
    }

    /// <summary>
    /// Fills the topic from the container database: its sequence counter and duplicate history (its
    /// stored copies stay in the database, counted while it serves), then each subscription's head,
    /// read with the copies its rows point at.
    /// </summary>
    public void Load(EntityLoad topic, IEnumerable<(Subscription Subscription, EntityLoad Load)> subscriptions)
    {
        lock (_sendGate)
        {
            _nextSequence = Math.Max(topic.NextSequenceNumber, 1);
            _duplicates.Load(topic.DuplicateHistory, topic.DuplicateHistoryComplete);
        }
        if (!topic.DuplicateHistoryComplete)
        {
            _ = Task.Run(() => _duplicates.FillFiltersAsync(_commits.Database, Id, _sendGate, _time, _options.SweepInterval, () => _unloaded is not null));
        }
        var loaded = new List<Subscription>();
        foreach (var (subscription, load) in subscriptions)
        {
            subscription.Queue.Load(load);
            subscription.Queue.MessageRemoved = OnCopyReleased;
            subscription.Queue.BoundDeliveryMarkBy(LowestUnhandedEnd);
            loaded.Add(subscription);
        }
        Volatile.Write(ref _subscriptions, [.. loaded]);
        lock (_unhandedGate)
        {
            _unhandedFloor = Math.Max(_unhandedFloor, topic.NextSequenceNumber);
        }
        _ = StartFollowing(subscriptions.Select(s => (s.Subscription, s.Load.Follower)).ToList());
        StartCountingCopies(topic.NextSequenceNumber - 1);
    }

    /// <summary>
    /// Starts serving a new subscription (idempotent: an id already here is left alone). The task
    /// completes once it follows the topic (see TopicEntity.Followers.cs), or keeps rows for good.
    /// </summary>
    public Task AddSubscription(Subscription subscription)
    {
        subscription.Queue.MessageRemoved = OnCopyReleased;
        subscription.Queue.BoundDeliveryMarkBy(LowestUnhandedEnd);
        lock (_sendGate)
        {
            var current = _subscriptions;
            if (Array.Exists(current, s => s.Id == subscription.Id))
            {
                return Task.CompletedTask;
            }
            Volatile.Write(ref _subscriptions, [.. current, subscription]);
        }
        return StartFollowing([(subscription, null)]);
    }

    /// <summary>
    /// Stops fanning out to a subscription and stops serving it (NotFound from then on). Returns it,
    /// so the caller can purge its rows (and then <see cref="RescanCopies"/>).
    /// </summary>
    public Subscription? RemoveSubscription(long id)
    {
        Subscription? removed;
        lock (_sendGate)
        {
            removed = Array.Find(_subscriptions, s => s.Id == id);
            if (removed is null)
            {
                return null;
            }
            Volatile.Write(ref _subscriptions, _subscriptions.Where(s => s.Id != id).ToArray());
            FreeSlotLocked(removed);
        }
        removed.Queue.MarkDeleted();
        return removed;
    }

    /// <summary>First step of a planned move: no more sends; the subscriptions stop on their own.</summary>
    public void StopTakingWork(BrokerException reason)
    {
        lock (_sendGate)
        {
            _stopping ??= reason;
        }
    }

    /// <summary>This broker stops serving the topic (deleted, container lost, node stopping).</summary>
    public void Unload(BrokerException reason)
    {
        lock (_sendGate)
        {
            _unloaded ??= reason;
        }
        _unloadedSignal.TrySetResult();
        foreach (var subscription in Volatile.Read(ref _subscriptions))
        {
            subscription.Queue.Unload(reason);
        }
    }

    /// <summary>
    /// The topic was deleted, and with it every subscription: a send that commits later drops the
    /// rows it wrote for them (an <see cref="Unload"/> alone never drops rows).
    /// </summary>
    public void MarkDeleted()
    {
        Volatile.Write(ref _deleted, true);
        Unload(FarmErrors.EntityNotFound(Name));
        foreach (var subscription in Volatile.Read(ref _subscriptions))
        {
            subscription.Queue.MarkDeleted();
        }
    }

    private void ThrowIfNotServing()
    {
        if (_unloaded is { } unloaded)
        {
            throw unloaded;
        }
        if (_stopping is { } stopping)
        {
            throw stopping;
        }
    }

    /// <summary>Forgets duplicate-detection history past its window; deletes the copies nothing points at any more.</summary>
    public void Sweep()
    {
        var now = NowMs;
        lock (_sendGate)
        {
            _duplicates.Prune(now, _isInFlight);
        }
        MaybeCollectCopies();
    }
}
