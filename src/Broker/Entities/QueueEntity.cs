using Farm.Broker.Telemetry;
using Farm.Broker.Containers;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Entities;

/// <summary>
/// One queue as its owning broker serves it: every committed message in memory (the entity's
/// message cache), peek-locks, scheduled messages, TTLs and duplicate-detection history. All
/// state changes happen under <see cref="_gate"/>; every change that must survive a crash goes
/// through the container's <see cref="CommitQueue"/> and is acknowledged only after it committed.
/// Lock expiry, scheduling and TTL run on the broker's <see cref="TimeProvider"/>.
/// </summary>
internal sealed partial class QueueEntity : ISendTarget
{
    public const string MaxDeliveryCountExceeded = "MaxDeliveryCountExceeded";
    public const string TtlExpired = "TTLExpiredException";

    private readonly object _gate = new();
    private readonly CommitQueue _commits;

    public CommitQueue Commits => _commits;
    private readonly TimeProvider _time;
    private readonly BrokerOptions _options;
    private readonly SubQueueState _main;
    private readonly SubQueueState _deadLetter;
    private readonly MessageCacheBudget _nodeCache;
    private readonly Dictionary<Guid, StoredMessage> _locks = [];
    private PriorityQueue<StoredMessage, long> _lockExpiry = new();
    private PriorityQueue<StoredMessage, long> _scheduled = new();
    private PriorityQueue<StoredMessage, long> _timeToLive = new();
    private readonly DuplicateHistory _duplicates;
    private readonly InFlightIds _inFlightIds = new();

    /// <summary><see cref="InFlightIds.Contains"/> as a delegate made once: the sweep passes it every 250 ms.</summary>
    private readonly Func<string, bool> _isInFlight;

    /// <summary>
    /// What a sweep releases or expires is written through this list (guarded by the entity lock)
    /// and copied out only when it holds something: most sweeps of a quiet entity write nothing, and
    /// a node sweeps every entity four times a second.
    /// </summary>
    private readonly List<PendingChange> _sweepWrites = [];
    private long _nextSequence;

    /// <summary>Bytes of sends accepted whose commit has not finished: counted against MaxSizeInMegabytes.</summary>
    private long _sendingBytes;

    private readonly SettledLocks _settledLocks = new();

    /// <summary>Messages of sends not committed yet that were stored counted as delivered (see <see cref="PreCountBudgetLocked"/>).</summary>
    private int _preCountedSending;

    /// <summary>Set when this broker stops serving the entity: what every later call fails with.</summary>
    private BrokerException? _unloaded;

    private readonly TaskCompletionSource<BrokerException> _unloadedSignal = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>
    /// Completes (with the reason) when this broker stops handing out the entity's messages, so a receive stream
    /// waiting for credit ends at once instead of holding its client on an entity that moved.
    /// </summary>
    public Task<BrokerException> Unloaded => _unloadedSignal.Task;

    /// <param name="cacheBytes">The message cache's budget per sub-queue: past it, arriving active messages stay in the database until read back (long.MaxValue: all in memory).</param>
    /// <param name="nodeCache">The node's budget, shared by its entities (null: none).</param>
    public QueueEntity(long id, string name, QueueSettings settings, CommitQueue commits, TimeProvider time, BrokerOptions options, long cacheBytes = long.MaxValue, MessageCacheBudget? nodeCache = null)
    {
        _nodeCache = nodeCache ?? MessageCacheBudget.Unlimited;
        _main = new SubQueueState(SubQueue.Main, _nodeCache);
        _deadLetter = new SubQueueState(SubQueue.DeadLetter, _nodeCache);
        _floorBytes = Math.Min(MessageCacheBudget.MaxFloorBytes, cacheBytes / 8);
        _nodeCache.EntityLoaded();
        Id = id;
        Name = name;
        Counters = new EntityCounters(name);
        DeadLetterCounters = new EntityCounters(name + EntityNames.DeadLetterQueueSuffix);
        Settings = settings;
        _commits = commits;
        _time = time;
        _options = options;
        _cacheBytes = cacheBytes;
        _duplicates = new DuplicateHistory(options.DuplicateIdsInMemoryPerEntity, (ids, now) => commits.Database.FindDuplicatesAsync(id, ids, now));
        _isInFlight = _inFlightIds.Contains;
        _nextSequence = 1;
    }

    private readonly long _cacheBytes;

    /// <summary>What each kind of cached message (active, scheduled, deferred) may hold when the node's budget is spent, at most (see <see cref="FloorBytes"/>).</summary>
    private readonly long _floorBytes;

    /// <summary>The floor now: smaller while the node serves so many entities that their floors would pass its budget.</summary>
    private long FloorBytes => _nodeCache.FloorBytes(_floorBytes);

    /// <summary>Whether <paramref name="held"/> bytes of one kind are past what this entity may keep: its own budget, or its floor while the node's is spent.</summary>
    private bool OverBudget(long held, long adding = 0) =>
        held + adding > _cacheBytes || (held + adding > FloorBytes && !_nodeCache.HasRoomFor(adding));

    /// <summary>Room for one kind's read-back: up to its own budget, and to its floor (at least) while the node's is spent.</summary>
    private long RoomFor(long held) => Math.Max(Math.Min(_cacheBytes - held, Math.Max(_nodeCache.RoomBytes, FloorBytes - held)), 1);

    /// <summary>Completes once every stored tail is counted: at once, unless a paged load left one to count.</summary>
    private TaskCompletionSource _tailsCounted = Completed();

    private static TaskCompletionSource Completed()
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        done.SetResult();
        return done;
    }

    /// <summary>For a subscription, its topic: the rows it stores without a payload point at the topic's copy (0 for a queue).</summary>
    public long CopiesOf { get; init; }

    /// <summary>Bytes of every message the queue holds, in memory or only in the database.</summary>
    private long TotalBytes => _main.SizeInBytes + _main.StoredBytes + HeldStoredBytes + _deadLetter.SizeInBytes + _deadLetter.StoredBytes;

    /// <summary>Entries of the due-time heaps, for tests that they do not keep settled messages.</summary>
    internal int DueTimeEntries
    {
        get
        {
            lock (_gate)
            {
                return _lockExpiry.Count + _timeToLive.Count + _scheduled.Count;
            }
        }
    }

    /// <summary>Duplicate-detection ids kept exactly in memory, for tests of the bound.</summary>
    internal int DuplicateIdsInMemory
    {
        get
        {
            lock (_gate)
            {
                return _duplicates.InMemoryCount;
            }
        }
    }

    /// <summary>Messages in memory, for tests of the cache bound.</summary>
    internal int CachedMessageCount
    {
        get
        {
            lock (_gate)
            {
                return _main.Messages.Count + _deadLetter.Messages.Count;
            }
        }
    }

    public long Id { get; }

    public string Name { get; }

    /// <summary>What this node did with the main queue's messages, and with the dead-letter queue's (metrics).</summary>
    public EntityCounters Counters { get; }

    public EntityCounters DeadLetterCounters { get; }

    private QueueSettings _settings = null!;

    /// <summary>
    /// Replaced as a whole on update; readers take one snapshot per operation. A new
    /// ForwardDeadLetteredMessagesTo gives the dead letters forwarding left behind (past the hop
    /// limit, or refused for their size) another go: received, or forwarded to the new target.
    /// </summary>
    public QueueSettings Settings
    {
        get => Volatile.Read(ref _settings);
        set
        {
            var previous = Interlocked.Exchange(ref _settings, value);
            if (previous is not null && !string.Equals(previous.ForwardDeadLetteredMessagesTo, value.ForwardDeadLetteredMessagesTo, StringComparison.Ordinal))
            {
                ReturnDeadLettersLeftBehind();
            }
        }
    }

    private long NowMs => _time.GetUtcNow().ToUnixTimeMilliseconds();

    private string PathOf(bool deadLetter) => CountersOf(deadLetter).Path;

    public EntityCounters CountersOf(bool deadLetter) => deadLetter ? DeadLetterCounters : Counters;

    private SubQueueState SubQueueOf(bool deadLetter) => deadLetter ? _deadLetter : _main;

    /// <summary>
    /// Fills the cache from the container database (the broker just took the container). A
    /// subscription's rows come with the topic's copy they point at; a row whose copy is gone
    /// (left by a crash of an older version) is deleted.
    /// </summary>
    public void Load(EntityLoad load)
    {
        var now = NowMs;
        var dangling = new List<MessageKey>();
        lock (_gate)
        {
            foreach (var tail in load.Tails ?? [])
            {
                // A paged load: the active messages after the head stay in the database until read back.
                var sub = SubQueueOf(tail.SubQueue == SubQueue.DeadLetter);
                sub.Frontier = tail.AfterSequence;
                if (tail.Count is { } count)
                {
                    sub.StoredCount = count;
                    sub.StoredBytes = tail.Bytes ?? 0;
                }
                else
                {
                    sub.TailPending = true;
                    sub.CountedThrough = tail.AfterSequence;
                    sub.PendingThrough = tail.ThroughSequence;
                    if (_tailsCounted.Task.IsCompleted)
                    {
                        _tailsCounted = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                    }
                    // Between commits, in chunks (see CountTailAsync); never on the load's thread.
                    _ = Task.Run(() => CountTailAsync(sub));
                }
            }
            _nextSequence = Math.Max(load.NextSequenceNumber, 1);
            _main.DeliveredThrough = load.DeliveredThrough;
            Interlocked.Exchange(ref _storedAloneCount, load.StoredAlone.Count);
            Interlocked.Exchange(ref _storedAloneBytes, load.StoredAlone.Bytes);
            LoadHeldLocked(load.Held);
            foreach (var record in load.Messages)
            {
                if (record.Payload is null)
                {
                    dangling.Add(new MessageKey(Id, record.SequenceNumber));
                    continue;
                }
                var message = StoredMessage.FromRecord(record, _main.DeliveredThrough);
                _nextSequence = Math.Max(_nextSequence, message.SequenceNumber + 1);
                if (message.SubQueue == SubQueue.DeadLetter)
                {
                    _deadLetter.Add(message);
                    _deadLetter.Available.Add(message.SequenceNumber);
                    continue;
                }
                if (message.State == StoredMessageState.Scheduled && message.ScheduledAtMs > now)
                {
                    KeepScheduledLocked(message);
                    continue;
                }
                _main.Add(message);
                if (message.State == StoredMessageState.Deferred)
                {
                    NoteDeferredLocked(message);
                }
                else
                {
                    message.State = StoredMessageState.Active;
                    _main.Available.Add(message.SequenceNumber);
                }
                if (message.ExpiresAtMs is { } expires)
                {
                    _timeToLive.Enqueue(message, expires);
                    SweepBy(expires);
                }
            }
            _duplicates.Load(load.DuplicateHistory, load.DuplicateHistoryComplete);
        }
        DeleteDangling(dangling);
        if (!load.DuplicateHistoryComplete)
        {
            _ = Task.Run(() => _duplicates.FillFiltersAsync(_commits.Database, Id, _gate, _time, _options.SweepInterval, () => _unloaded is not null));
        }
    }

    /// <summary>Set when the entity stops taking new work before a planned move; settlements still run.</summary>
    private BrokerException? _stopping;

    /// <summary>
    /// First step of a planned move: no more deliveries, sends or peeks (they fail with
    /// <paramref name="reason"/>, which gateways hold and retry), while the locks already handed
    /// out can still be settled or renewed, so their holders lose nothing.
    /// </summary>
    public void StopTakingWork(BrokerException reason)
    {
        lock (_gate)
        {
            _stopping ??= reason;
        }
        _unloadedSignal.TrySetResult(reason);
        _main.SignalArrived();
        _deadLetter.SignalArrived();
    }

    /// <summary>Peek-locks still held by receivers.</summary>
    public int HeldLocks
    {
        get
        {
            lock (_gate)
            {
                return _locks.Count;
            }
        }
    }

    /// <summary>The entity was deleted: every later call and waiting receiver gets NotFound.</summary>
    public void MarkDeleted()
    {
        lock (_gate)
        {
            _deleted = true;
        }
        Unload(FarmErrors.EntityNotFound(Name));
    }

    /// <summary>
    /// This broker stops serving the entity (deleted, container lost, node stopping): later calls
    /// and waiting receivers fail with <paramref name="reason"/>.
    /// </summary>
    public void Unload(BrokerException reason)
    {
        lock (_gate)
        {
            if (_unloaded is null)
            {
                _nodeCache.EntityUnloaded();
            }
            _unloaded ??= reason;
            _main.Detach();
            _deadLetter.Detach();
        }
        _unloadedSignal.TrySetResult(reason);
        _main.SignalArrived();
        _deadLetter.SignalArrived();
    }

    /// <summary>For settlements and lock renewals: they run until the entity is unloaded.</summary>
    private void ThrowIfDeleted()
    {
        if (_unloaded is { } reason)
        {
            throw reason;
        }
    }

    /// <summary>For new work (sends, deliveries, peeks): refused from the start of a planned move.</summary>
    private void ThrowIfNotServing()
    {
        ThrowIfDeleted();
        if (_stopping is { } reason)
        {
            throw reason;
        }
    }

    /// <summary>When the oldest message in the main queue was enqueued (Unix ms), or null when it is empty.</summary>
    internal long? OldestEnqueuedAtMs()
    {
        lock (_gate)
        {
            long? oldest = null;
            foreach (var message in _main.Messages.Values)
            {
                if (oldest is null || message.EnqueuedAtMs < oldest)
                {
                    oldest = message.EnqueuedAtMs;
                }
            }
            return oldest;
        }
    }

    /// <summary>Messages the peek-lock receivers waiting on the queue now would take at once.</summary>
    public int WaitingPeekLockCredit
    {
        get
        {
            lock (_gate)
            {
                return _main.WaitingPeekLockCredit;
            }
        }
    }

    /// <summary>Receive streams registered to be woken by the queue's next arrival (its dead-letter queue's apart).</summary>
    public int ReceiveWaiters => _main.WaiterCount;

    public MessageCounts GetCounts()
    {
        lock (_gate)
        {
            long scheduled = 0, deferred = 0;
            foreach (var message in _main.Messages.Values)
            {
                if (message.State == StoredMessageState.Scheduled)
                {
                    scheduled++;
                }
                else if (message.State == StoredMessageState.Deferred)
                {
                    deferred++;
                }
            }
            return new MessageCounts
            {
                Active = _main.Messages.Count + _main.StoredCount - scheduled - deferred,
                Scheduled = scheduled + _scheduledStoredCount,
                Deferred = deferred + _deferredStoredCount,
                DeadLetter = _deadLetter.Messages.Count + _deadLetter.StoredCount,
                Locked = _locks.Count,
                Total = _main.Messages.Count + _main.StoredCount + HeldStoredCount + _deadLetter.Messages.Count + _deadLetter.StoredCount,
                SizeInBytes = TotalBytes,
            };
        }
    }

    /// <summary>
    /// When the next sweep has something to do (Unix ms): the earliest lock expiry, due scheduled
    /// message or time to live, or at once while background work waits (see
    /// <see cref="NextSweepDueLocked"/>). Lowered by every change that adds a due time (which also
    /// schedules it, <see cref="ScheduleSweep"/>); read without the lock by <see cref="Sweep"/>.
    /// </summary>
    private long _sweepDueMs;

    /// <summary>Sweeps <see cref="Sweep"/> passed by in a row.</summary>
    private int _sweepsSkipped;

    /// <summary>Sweeps that ran (<see cref="SweepDue"/>, from the schedule or from <see cref="Sweep"/>), for tests.</summary>
    internal long TimerSweepsRun { get; private set; }

    /// <summary>
    /// At most this many sweep ticks in a row go by without sweeping an entity with nothing due:
    /// whatever a change leaves for the sweep without a due time (pruning, compaction) is done within
    /// two seconds all the same (<see cref="HousekeepingMs"/>).
    /// </summary>
    internal const int MaxSweepsSkipped = 7;

    /// <summary>A change made something come due at <paramref name="dueMs"/>: the sweep must not pass the entity by then.</summary>
    private void SweepBy(long dueMs)
    {
        if (dueMs < Volatile.Read(ref _sweepDueMs))
        {
            Volatile.Write(ref _sweepDueMs, dueMs);
        }
        ScheduleSweep(dueMs);
    }

    /// <summary>The container's schedule of sweeps, once it serves this entity (null: swept by <see cref="Sweep"/> calls only).</summary>
    private SweepSchedule? _sweeps;

    /// <summary>The time <see cref="_sweeps"/> holds this entity for (Unix ms); MaxValue when it holds none.</summary>
    private long _sweepScheduledMs = long.MaxValue;

    /// <summary>The longest an entity goes unswept: what a change leaves for the sweep without a due time is done by then.</summary>
    private long HousekeepingMs => (MaxSweepsSkipped + 1) * (long)_options.SweepInterval.TotalMilliseconds;

    /// <summary>The container serves this entity from now on: its sweeps come from <paramref name="sweeps"/>, the first at the next tick.</summary>
    internal void JoinSweeps(SweepSchedule sweeps)
    {
        _sweeps = sweeps;
        Volatile.Write(ref _sweepScheduledMs, long.MaxValue);
        ScheduleSweep(NowMs);
    }

    /// <summary>Has the container's sweep visit this entity by <paramref name="dueMs"/>: a new entry only when sooner than the one it holds.</summary>
    internal void ScheduleSweep(long dueMs)
    {
        if (_sweeps is not { } sweeps)
        {
            return;
        }
        long held;
        do
        {
            held = Volatile.Read(ref _sweepScheduledMs);
            if (dueMs >= held)
            {
                return;
            }
        }
        while (Interlocked.CompareExchange(ref _sweepScheduledMs, dueMs, held) != held);
        sweeps.Add(this, dueMs);
    }

    /// <summary>The schedule's entry for <paramref name="dueMs"/> came due: true (and no longer held) if it is the one this entity is held for.</summary>
    internal bool TryClaimSweep(long dueMs) => Interlocked.CompareExchange(ref _sweepScheduledMs, long.MaxValue, dueMs) == dueMs;

    /// <summary>
    /// Releases expired locks, makes due scheduled messages visible and expires messages past
    /// their TTL, passing an entity with nothing due by, but never more than
    /// <see cref="MaxSweepsSkipped"/> times in a row. The container does not call it: its
    /// <see cref="SweepSchedule"/> calls <see cref="SweepDue"/> when the entity is due, on the same
    /// cadence. Tests that drive an entity tick by tick without a container's timer call this.
    /// </summary>
    public void Sweep()
    {
        if (NowMs < Volatile.Read(ref _sweepDueMs) && _sweepsSkipped < MaxSweepsSkipped)
        {
            _sweepsSkipped++;
            return;
        }
        SweepDue();
    }

    /// <summary>
    /// The sweep, now: what <see cref="Sweep"/> does when it does not pass the entity by. The
    /// container's sweep calls it when its <see cref="SweepSchedule"/> says the entity is due; the
    /// sweep schedules the next one (its due time, or <see cref="HousekeepingMs"/> from now).
    /// </summary>
    internal void SweepDue()
    {
        _sweepsSkipped = 0;
        TimerSweepsRun++;
        List<PendingChange>? writes = null;
        Arrivals arrived;
        lock (_gate)
        {
            arrived = SweepLocked(NowMs, _sweepWrites);
            if (_sweepWrites.Count > 0)
            {
                writes = [.. _sweepWrites];
                _sweepWrites.Clear();
            }
        }
        if (writes is not null)
        {
            Flush(writes);
        }
        SignalArrivals(arrived);
        // Receive streams wait without timers of their own: the sweep ends the waits that ran their time.
        _main.WakeExpired(NowMs);
        _deadLetter.WakeExpired(NowMs);
        StartForwarding();
    }

    /// <summary>The sub-queues in which a sweep made messages available.</summary>
    [Flags]
    private enum Arrivals
    {
        None = 0,
        Main = 1,
        DeadLetter = 2,
    }

    /// <summary>
    /// Wakes the receivers of each sub-queue a sweep made messages available in. Waiting receivers
    /// rely on it: they sleep until an arrival (or their deadline), not on a timer of their own.
    /// </summary>
    private void SignalArrivals(Arrivals arrived)
    {
        if ((arrived & Arrivals.Main) != 0)
        {
            _main.SignalArrived();
        }
        if ((arrived & Arrivals.DeadLetter) != 0)
        {
            _deadLetter.SignalArrived();
        }
    }

    /// <summary>Releases due locks, shows due scheduled messages, expires due ones; returns where messages became available.</summary>
    private Arrivals SweepLocked(long now, List<PendingChange> writes)
    {
        var arrived = Arrivals.None;
        _settledLocks.Prune(now);
        while (_lockExpiry.TryPeek(out var locked, out var until) && until <= now)
        {
            _lockExpiry.Dequeue();
            if (locked.LockToken is null || locked.Settling)
            {
                continue;
            }
            if (locked.LockedUntilMs > now)
            {
                // Renewed since it was queued: look again at the new expiry.
                _lockExpiry.Enqueue(locked, locked.LockedUntilMs);
                continue;
            }
            if (ReleaseLockLocked(locked, writes))
            {
                arrived |= locked.SubQueue == SubQueue.DeadLetter ? Arrivals.DeadLetter : Arrivals.Main;
            }
        }
        while (_scheduled.TryPeek(out var due, out var at) && at <= now)
        {
            _scheduled.Dequeue();
            if (due.State == StoredMessageState.Scheduled && !due.Settling && IsInMemory(_main, due))
            {
                ForgetScheduledLocked(due);
                // Visible from now on; the stored row stays "scheduled" with a time in the past,
                // which a reload reads as active, so this needs no write.
                due.State = StoredMessageState.Active;
                _main.Available.Add(due.SequenceNumber);
                arrived |= Arrivals.Main;
            }
        }
        while (_timeToLive.TryPeek(out var expiring, out var expiresAt) && expiresAt <= now)
        {
            _timeToLive.Dequeue();
            // A locked message belongs to its receiver until the lock goes; it expires when taken next.
            if (!expiring.IsLocked && !expiring.Settling && expiring.SubQueue == SubQueue.Main
                && expiring.State != StoredMessageState.Scheduled && IsInMemory(_main, expiring))
            {
                ExpireLocked(expiring, writes);
            }
        }
        MaybeRefillLocked(_main);
        MaybeRefillLocked(_deadLetter);
        MaybeRefillScheduledLocked();
        MaybeExpireStoredLocked(now);
        EvictDeferredLocked();
        CompactDueTimesLocked();
        _duplicates.Prune(now, _isInFlight);
        var next = NextSweepDueLocked(now);
        Volatile.Write(ref _sweepDueMs, next);
        ScheduleSweep(Math.Min(next, now + HousekeepingMs));
        return arrived;
    }

    /// <summary>
    /// When the next sweep has something to do: at once (the next tick) while messages wait in the
    /// database to be read back or expired, scheduled ones to be read back, deferred ones to leave
    /// memory; otherwise the earliest due time in memory, duplicate ids to be forgotten and messages
    /// to forward (after a failed run's rest) included (never, for an idle queue). A queue with duplicate detection or
    /// forwarding was swept every tick while it remembered an id or had forwarding set: 15,000 such
    /// queues were 60,000 sweeps a second however quiet.
    /// </summary>
    private long NextSweepDueLocked(long now)
    {
        var settings = Settings;
        if (_main.StoredCount > 0 || _main.TailPending || _deadLetter.StoredCount > 0 || _deadLetter.TailPending
            || _scheduledStoredCount > 0 || OverBudget(_deferredBytes))
        {
            return now;
        }
        var due = _duplicates.NextPruneDueMs(now);
        if ((settings.ForwardTo is not null && _main.Available.Count > 0)
            || (settings.ForwardDeadLetteredMessagesTo is not null && _deadLetter.Available.Count > 0))
        {
            due = Math.Min(due, ForwardDueMs(now));
        }
        if (_lockExpiry.TryPeek(out _, out var lockExpires))
        {
            due = Math.Min(due, lockExpires);
        }
        if (_scheduled.TryPeek(out _, out var scheduledAt))
        {
            due = Math.Min(due, scheduledAt);
        }
        if (_timeToLive.TryPeek(out _, out var expiresAt))
        {
            due = Math.Min(due, expiresAt);
        }
        return due;
    }

    /// <summary>
    /// Whether this very message is in memory: a heap may still hold an object that left memory (a
    /// scheduled or deferred message past the cache) and was read back later as a new one.
    /// </summary>
    private static bool IsInMemory(SubQueueState sub, StoredMessage message) =>
        sub.Messages.TryGetValue(message.SequenceNumber, out var current) && ReferenceEquals(current, message);

    /// <summary>
    /// The due-time heaps (lock expiry, scheduled time, TTL) keep an entry when its message leaves
    /// early (completed, received): it is skipped when it comes due. Such entries hold their
    /// message's bytes, and a busy queue completes tens of thousands of messages a second, each
    /// with a lock expiry a minute away (1.8 GB held after draining a million). So each heap is
    /// rebuilt from its live entries once it holds more than twice as many (amortised O(1)), plus
    /// <see cref="DueTimeSlack"/>: with 15,000 quiet queues, a slack of 1,024 stale entries each held
    /// every message completed in the last 17 minutes (66,000 messages, 99 MB, at 1,500 queues after 45 s).
    /// </summary>
    internal const int DueTimeSlack = 4;

    private void CompactDueTimesLocked()
    {
        ClearDueTimesWhenNoneLiveLocked();
        if (_lockExpiry.Count > (2L * _locks.Count) + DueTimeSlack)
        {
            _lockExpiry = new PriorityQueue<StoredMessage, long>(_locks.Values.Select(m => (m, m.LockedUntilMs)));
        }
        if (_timeToLive.Count > (2L * _main.Messages.Count) + DueTimeSlack)
        {
            _timeToLive = new PriorityQueue<StoredMessage, long>(
                _main.Messages.Values.Where(m => m.ExpiresAtMs is not null).Select(m => (m, m.ExpiresAtMs!.Value)));
        }
        if (_scheduled.Count > (2L * _main.Messages.Count) + DueTimeSlack)
        {
            _scheduled = new PriorityQueue<StoredMessage, long>(
                _main.Messages.Values.Where(m => m.State == StoredMessageState.Scheduled && m.ScheduledAtMs is not null).Select(m => (m, m.ScheduledAtMs!.Value)));
        }
    }

    /// <summary>
    /// Empties a due-time heap none of whose entries can be live any more (no lock held, no message
    /// in memory), without waiting for the slack to fill: a quiet queue completes its one message and
    /// holds nothing, and the stale entry would keep that message and its payload alive for seconds,
    /// long enough to be carried into the older generations of the heap (15,000 quiet queues held
    /// 24,000 completed messages and 30 MB of their payloads). Clear keeps the array.
    /// </summary>
    private void ClearDueTimesWhenNoneLiveLocked()
    {
        if (_locks.Count == 0 && _lockExpiry.Count > 0)
        {
            _lockExpiry.Clear();
        }
        if (_main.Messages.Count == 0)
        {
            if (_timeToLive.Count > 0)
            {
                _timeToLive.Clear();
            }
            if (_scheduled.Count > 0)
            {
                _scheduled.Clear();
            }
        }
    }

    private static Timestamp ToTimestamp(long ms) => Timestamp.FromDateTimeOffset(DateTimeOffset.FromUnixTimeMilliseconds(ms));

    private ReceivedMessage ToReceived(StoredMessage m, bool withLock)
    {
        var received = ToReceivedWithoutMessage(m, withLock);
        received.Message = m.MessageToDeliver();
        return received;
    }

    /// <summary>
    /// A delivery's broker properties, read under the entity's lock; its message is parsed from the
    /// payload afterwards (<see cref="StoredMessage.ToDeliver"/>), outside the lock.
    /// </summary>
    private ReceivedMessage ToReceivedWithoutMessage(StoredMessage m, bool withLock)
    {
        var received = new ReceivedMessage
        {
            SequenceNumber = m.SequenceNumber,
            EnqueuedTime = ToTimestamp(m.ScheduledAtMs is { } s && s > m.EnqueuedAtMs ? s : m.EnqueuedAtMs),
            DeliveryCount = m.DeliveryCount,
            State = m.State switch
            {
                StoredMessageState.Deferred => MessageState.Deferred,
                StoredMessageState.Scheduled => MessageState.Scheduled,
                _ => MessageState.Active,
            },
            DeadLetterReason = m.DeadLetterReason ?? "",
            DeadLetterErrorDescription = m.DeadLetterDescription ?? "",
            DeadLetterSource = m.DeadLetterSource ?? "",
        };
        if (m.ExpiresAtMs is { } expires)
        {
            received.ExpiresAt = ToTimestamp(expires);
        }
        if (withLock && m.LockToken is { } token)
        {
            received.LockToken = token.ToString();
            received.LockedUntil = ToTimestamp(m.LockedUntilMs);
        }
        return received;
    }
}
