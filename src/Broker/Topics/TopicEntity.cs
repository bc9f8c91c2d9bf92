using Farm.Broker.Containers;
using Farm.Broker.Entities;
using Farm.Broker.Rules;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Broker.Topics;

/// <summary>
/// One topic as its owning broker serves it. A message sent to the topic is stored once, as the
/// topic's row with the payload; each subscription whose rules match gets a row of its own that
/// points at it (no payload, unless a rule action changed the message for that subscription) and a
/// <see cref="StoredMessage"/> sharing the topic's in-memory copy. Subscriptions are served by
/// <see cref="QueueEntity"/>, so every receive and settle operation of queues works on them. The
/// topic counts the rows that point at each copy and deletes the copy when the last one goes.
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

    /// <summary>The topic's stored copy of a message (its serialized bytes, shared with the subscriptions' cached messages) and how many subscription rows point at it.</summary>
    private sealed class StoredCopy(byte[] payload)
    {
        public byte[] Payload { get; } = payload;
        public int Size => Payload.Length;
        public int References { get; set; }
    }

    private readonly object _sendGate = new();
    // Taken last and never held while calling out: subscriptions release copies from inside their own lock.
    private readonly object _copiesGate = new();
    private readonly Dictionary<long, StoredCopy> _copies = [];
    private readonly List<long> _copiesToDelete = [];
    private bool _copyDeleteQueued;
    private long _copiesBytes;

    /// <summary>Bytes of sends accepted whose commit has not finished (guarded by the send lock): counted against MaxSizeInMegabytes.</summary>
    private long _sendingBytes;
    private readonly DuplicateHistory _duplicates = new();
    private readonly CommitQueue _commits;
    private readonly TimeProvider _time;
    private readonly BrokerOptions _options;
    private long _nextSequence = 1;
    private Subscription[] _subscriptions = [];
    private BrokerException? _unloaded;
    private BrokerException? _stopping;
    private readonly InFlightIds _inFlightIds = new();

    /// <summary>Completes when the topic is unloaded: a send waiting for another's outcome stops waiting.</summary>
    private readonly TaskCompletionSource _unloadedSignal = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public TopicEntity(long id, string name, TopicSettings settings, CommitQueue commits, TimeProvider time, BrokerOptions options)
    {
        Id = id;
        Name = name;
        Settings = settings;
        _commits = commits;
        _time = time;
        _options = options;
    }

    public long Id { get; }

    public string Name { get; }

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

    /// <summary>Messages stored once for all subscriptions, and their bytes.</summary>
    public (long Count, long Bytes) GetCounts()
    {
        lock (_copiesGate)
        {
            return (_copies.Count, _copiesBytes);
        }
    }

    /// <summary>
    /// Fills the topic from the container database: its stored copies, sequence counter and duplicate
    /// history, then each subscription's rows (pointer rows find their copy here). Returns the rows
    /// nothing points at any more (a crash came between a subscription's delete and the copy's), for
    /// the caller to delete.
    /// </summary>
    public List<MessageKey> Load(EntityLoad topic, IEnumerable<(Subscription Subscription, EntityLoad Load)> subscriptions)
    {
        var garbage = new List<MessageKey>();
        lock (_sendGate)
        {
            _nextSequence = Math.Max(topic.NextSequenceNumber, 1);
            foreach (var record in topic.Messages)
            {
                _nextSequence = Math.Max(_nextSequence, record.SequenceNumber + 1);
                _copies[record.SequenceNumber] = new StoredCopy(record.Payload ?? []);
            }
            _duplicates.Load(topic.DuplicateHistory);
        }
        var loaded = new List<Subscription>();
        foreach (var (subscription, load) in subscriptions)
        {
            var dangling = new List<long>();
            subscription.Queue.Load(load, sequence =>
            {
                if (_copies.TryGetValue(sequence, out var copy))
                {
                    return copy.Payload;
                }
                dangling.Add(sequence);
                return null;
            });
            foreach (var sequence in subscription.Queue.HeldSequenceNumbers())
            {
                if (_copies.TryGetValue(sequence, out var copy))
                {
                    copy.References++;
                }
            }
            garbage.AddRange(dangling.Select(s => new MessageKey(subscription.Id, s)));
            subscription.Queue.MessageRemoved = Release;
            loaded.Add(subscription);
        }
        lock (_copiesGate)
        {
            foreach (var (sequence, copy) in _copies.Where(c => c.Value.References == 0).ToList())
            {
                _copies.Remove(sequence);
                garbage.Add(new MessageKey(Id, sequence));
            }
            _copiesBytes = _copies.Values.Sum(c => (long)c.Size);
        }
        Volatile.Write(ref _subscriptions, [.. loaded]);
        return garbage;
    }

    /// <summary>Starts serving a new subscription (idempotent: an id already here is left alone).</summary>
    public void AddSubscription(Subscription subscription)
    {
        subscription.Queue.MessageRemoved = Release;
        lock (_sendGate)
        {
            var current = _subscriptions;
            if (Array.Exists(current, s => s.Id == subscription.Id))
            {
                return;
            }
            Volatile.Write(ref _subscriptions, [.. current, subscription]);
        }
    }

    /// <summary>
    /// Stops fanning out to a subscription and stops serving it (NotFound from then on). Returns it,
    /// so the caller can purge its rows and release the copies it pointed at.
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
        }
        removed.Queue.MarkDeleted();
        return removed;
    }

    /// <summary>After a deleted subscription's rows are purged: the copies it pointed at lose a reference each.</summary>
    public void ReleaseAll(IEnumerable<long> sequenceNumbers)
    {
        foreach (var sequence in sequenceNumbers)
        {
            Release(sequence);
        }
    }

    /// <summary>One subscription row pointing at a copy is gone; the copy goes with the last one.</summary>
    private void Release(long sequence)
    {
        lock (_copiesGate)
        {
            if (!_copies.TryGetValue(sequence, out var copy) || --copy.References > 0)
            {
                return;
            }
            _copies.Remove(sequence);
            _copiesBytes -= copy.Size;
            _copiesToDelete.Add(sequence);
            if (_copyDeleteQueued)
            {
                return;
            }
            _copyDeleteQueued = true;
        }
        // One queued write takes every copy released until the commit loop gets to it. A failed
        // delete leaves the row behind; the next load finds nothing points at it and deletes it.
        _ = _commits.CommitAsync(batch =>
        {
            lock (_copiesGate)
            {
                foreach (var released in _copiesToDelete)
                {
                    batch.Deletes.Add(new MessageKey(Id, released));
                }
                _copiesToDelete.Clear();
                _copyDeleteQueued = false;
            }
        }).ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.OnlyOnFaulted);
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

    /// <summary>Forgets duplicate-detection history past its window.</summary>
    public void Sweep()
    {
        var now = NowMs;
        lock (_sendGate)
        {
            _duplicates.Prune(now);
        }
    }
}
