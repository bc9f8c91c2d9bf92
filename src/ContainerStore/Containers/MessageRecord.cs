namespace Farm.ContainerStore.Containers;

/// <summary>Which queue of an entity a message is in.</summary>
public enum SubQueue
{
    Main = 0,
    DeadLetter = 1,
}

public enum StoredMessageState
{
    Active = 0,
    Deferred = 1,
    Scheduled = 2,
}

/// <summary>
/// The stored state of a subscription's tombstone: an implicit message (see
/// <see cref="MessageRecord.Implicit"/>) completed above its subscription's done mark. Reads never
/// return such rows; they go once the mark passes them.
/// </summary>
public static class Tombstone
{
    public const int State = 3;
}

/// <summary>
/// A stored message row. The broker owns the payload format (the serialized wire Message); the
/// store only keeps the columns it needs to find, order and expire messages. Times are Unix
/// milliseconds (UTC).
/// </summary>
public sealed record MessageRecord
{
    public required long EntityId { get; init; }
    public required long SequenceNumber { get; init; }
    public SubQueue SubQueue { get; init; }
    public StoredMessageState State { get; init; }
    public int DeliveryCount { get; init; }
    public required long EnqueuedAtMs { get; init; }
    public long? ScheduledAtMs { get; init; }
    public long? ExpiresAtMs { get; init; }
    public string? MessageId { get; init; }
    public string? DeadLetterReason { get; init; }
    public string? DeadLetterDescription { get; init; }
    public string? DeadLetterSource { get; init; }

    /// <summary>The serialized message. May be null in records loaded without payloads.</summary>
    public byte[]? Payload { get; init; }

    public int PayloadSize { get; init; }

    /// <summary>
    /// Set by the paged reads of a subscription's rows (those given a topic to take copies from): the
    /// row is its message's only stored form, carrying its own payload while its topic holds no copy
    /// (a message only this subscription got). Its topic counts such rows towards its size.
    /// </summary>
    public bool StoredAlone { get; init; }

    /// <summary>
    /// On a topic's copy as written: the subscriptions (a bit per follower slot, lowest bit of the
    /// first byte is slot 0) that got the message without a row of their own (copy_members).
    /// </summary>
    public byte[]? Members { get; init; }

    /// <summary>
    /// Set on a subscription's message read back from its topic's copy and membership rather than a row
    /// of its own (an implicit message: see <see cref="FollowerState"/>). Its first write makes it a row
    /// (<see cref="MessageUpdate.InsertIfMissing"/>); completing it moves the subscription's done mark
    /// or writes a tombstone (<see cref="ContainerWriteBatch.DoneThrough"/>, <see cref="ContainerWriteBatch.Tombstones"/>).
    /// </summary>
    public bool Implicit { get; init; }

    /// <summary>
    /// What an update stores for a delivery count of 0 (<see cref="MessageUpdate.StoredDeliveryCount"/>):
    /// a delivery taken back (given back undelivered, a count written back, a dead letter reinstated)
    /// must read as 0 even at or below the entity's delivery mark. An insert stores 0.
    /// </summary>
    public const int UncountedBelowMark = -1;

    /// <summary>
    /// The delivery count this row stands for, given its entity's delivery mark
    /// (<see cref="EntityLoad.DeliveredThrough"/>): a message of the main queue at or below the mark
    /// that was never scheduled was delivered at least once, though its row may still say 0 (the
    /// mark counted that first delivery instead of a write of the row). <see cref="DeliveryCount"/>
    /// is the column as stored.
    /// </summary>
    public int DeliveryCountUnder(long deliveredThrough) => DeliveryCount switch
    {
        UncountedBelowMark => 0,
        0 when SubQueue == SubQueue.Main && ScheduledAtMs is null && SequenceNumber <= deliveredThrough => 1,
        var count => count,
    };
}

/// <summary>Changes the mutable columns of a stored message. Payload null keeps the stored payload.</summary>
public sealed record MessageUpdate(
    long EntityId,
    long SequenceNumber,
    SubQueue SubQueue,
    StoredMessageState State,
    int DeliveryCount,
    string? DeadLetterReason,
    string? DeadLetterDescription,
    string? DeadLetterSource,
    byte[]? Payload)
{
    /// <summary>
    /// Only <see cref="DeliveryCount"/> differs from the stored row (a peek-lock delivery, or one
    /// given back undelivered); the other fields carry the row's current values. A store may then
    /// write that one column: in SQLite an update that names no indexed column leaves the indexes
    /// alone, where the full update rewrites an entry in each index over sub_queue and state.
    /// </summary>
    public bool DeliveryCountOnly { get; init; }

    /// <summary>The delivery_count column to write: a count of 0 is stored as <see cref="MessageRecord.UncountedBelowMark"/>.</summary>
    public int StoredDeliveryCount => DeliveryCount == 0 ? MessageRecord.UncountedBelowMark : DeliveryCount;

    /// <summary>
    /// For a subscription's implicit message (<see cref="MessageRecord.Implicit"/>), which may have no
    /// row yet: the row to insert, with this update's values, when the update finds none. Null: the row must exist.
    /// </summary>
    public MessageRecord? InsertIfMissing { get; init; }
}

/// <summary>
/// A subscription that follows its topic (schema version 7): its position in the topic's copies'
/// membership (<see cref="MessageRecord.Members"/>), the first sequence number it follows from, and its
/// done mark: every implicit message at or below <see cref="DoneThrough"/> was settled.
/// </summary>
public sealed record FollowerState(int Slot, long FollowFrom, long DoneThrough)
{
    /// <summary>Whether the copy of <paramref name="sequenceNumber"/> with <paramref name="members"/> is an implicit message of this follower (settled or not).</summary>
    public bool Follows(long sequenceNumber, byte[]? members) =>
        sequenceNumber >= FollowFrom && sequenceNumber > DoneThrough && IsMember(members, Slot);

    /// <summary>Whether slot <paramref name="slot"/>'s bit is set.</summary>
    public static bool IsMember(byte[]? members, int slot) =>
        members is not null && slot >= 0 && slot / 8 < members.Length && (members[slot / 8] & (1 << (slot % 8))) != 0;
}

public readonly record struct MessageKey(long EntityId, long SequenceNumber);

/// <summary>A MessageId seen by duplicate detection, remembered until <see cref="ExpiresAtMs"/>.</summary>
public sealed record DuplicateRecord(long EntityId, string MessageId, long ExpiresAtMs);

/// <summary>What the broker needs to serve an entity after loading its container.</summary>
/// <param name="Tails">For a load of the head only: per sub-queue, the active messages left in the database.</param>
/// <param name="DuplicateHistoryComplete">False when the load read only the newest ids of the window: older ones are in the database only.</param>
/// <param name="DeliveredThrough">
/// The entity's delivery mark (<see cref="ContainerWriteBatch.DeliveryMarks"/>): the rows are as
/// stored, <see cref="MessageRecord.DeliveryCountUnder"/> reads their counts with it.
/// </param>
public sealed record EntityLoad(
    long EntityId,
    long NextSequenceNumber,
    IReadOnlyList<MessageRecord> Messages,
    IReadOnlyList<DuplicateRecord> DuplicateHistory,
    IReadOnlyList<StoredTail>? Tails = null,
    bool DuplicateHistoryComplete = true,
    HeldTail? Held = null,
    StoredAloneTally StoredAlone = default,
    long DeliveredThrough = 0,
    FollowerState? Follower = null)
{
    /// <summary>
    /// The head load of an entity with nothing stored, as <see cref="IContainerDatabase.LoadEntityHeadAsync"/>
    /// reads it: a queue just created starts from it without a read (entity ids are never reused, so
    /// a new one has no rows).
    /// </summary>
    public static EntityLoad EmptyHead(long entityId) => QuietHead(entityId, nextSequenceNumber: 1, deliveredThrough: 0);

    /// <summary>
    /// The head load of an entity that has no message stored and no live duplicate-detection id
    /// (see <see cref="IContainerDatabase.LoadQuietHeadsAsync"/>): only its counter and delivery mark.
    /// </summary>
    public static EntityLoad QuietHead(long entityId, long nextSequenceNumber, long deliveredThrough, FollowerState? follower = null) => new(
        entityId, nextSequenceNumber, Messages: [], DuplicateHistory: [],
        Tails: [new StoredTail(SubQueue.Main, 0, nextSequenceNumber - 1, 0, 0), new StoredTail(SubQueue.DeadLetter, 0, nextSequenceNumber - 1, 0, 0)],
        DuplicateHistoryComplete: true,
        Held: HeldTails.Of([], [], []),
        DeliveredThrough: deliveredThrough,
        Follower: follower);
}

/// <summary>
/// A subscription's rows that are their message's only stored form (see <see cref="MessageRecord.StoredAlone"/>):
/// how many, and their payload bytes. Counted when the subscription is loaded (the head load of an
/// entity given a topic to take copies from); zero for anything else.
/// </summary>
public readonly record struct StoredAloneTally(long Count, long Bytes);

/// <summary>
/// What a paged load left in the database of the main queue's scheduled and deferred messages: the
/// scheduled ones from (<paramref name="ScheduledFromAtMs"/>, <paramref name="ScheduledFromSequence"/>)
/// on in due-time order (long.MaxValue: none), and any deferred ones; how many and their bytes.
/// </summary>
public sealed record HeldTail(long ScheduledFromAtMs, long ScheduledFromSequence, long ScheduledCount, long ScheduledBytes, long DeferredCount, long DeferredBytes);

/// <summary>
/// The active messages of a sub-queue after <paramref name="AfterSequence"/> (up to
/// <paramref name="ThroughSequence"/>, the last sequence number handed out when it was loaded): how
/// many, and their payload bytes; null when not counted at load (a deep queue's count takes seconds:
/// the broker counts it with <see cref="IContainerDatabase.CountActiveAsync"/> while it serves).
/// </summary>
public sealed record StoredTail(SubQueue SubQueue, long AfterSequence, long ThroughSequence, long? Count, long? Bytes);

/// <summary>
/// A topic's stored copy that no row points at any more: its sequence number, payload bytes, and the
/// followers that got it without a row (<see cref="MessageRecord.Members"/>; null: none), which the
/// broker judges (an implicit message still unsettled keeps the copy).
/// </summary>
public readonly record struct UnreferencedCopy(long SequenceNumber, long PayloadSize, byte[]? Members = null);

/// <summary>
/// What <see cref="IContainerDatabase.ScanCopiesAsync"/> found: the copies to delete, and how far
/// the range was scanned (every copy up to there is either among them or still pointed at).
/// </summary>
public sealed record CopyScan(IReadOnlyList<UnreferencedCopy> Unreferenced, long ScannedThrough);

public static class HeldTails
{
    /// <summary>
    /// What a paged load left in the database, from the scheduled and deferred rows it read (the
    /// scheduled ones in due-time order) and the main queue's totals per state.
    /// </summary>
    public static HeldTail Of(IReadOnlyList<MessageRecord> scheduled, IReadOnlyList<MessageRecord> deferred, IEnumerable<(StoredMessageState State, long Count, long Bytes)> totals)
    {
        long scheduledCount = 0, scheduledBytes = 0, deferredCount = 0, deferredBytes = 0;
        foreach (var (state, count, bytes) in totals)
        {
            if (state == StoredMessageState.Scheduled)
            {
                (scheduledCount, scheduledBytes) = (count, bytes);
            }
            else if (state == StoredMessageState.Deferred)
            {
                (deferredCount, deferredBytes) = (count, bytes);
            }
        }
        scheduledCount -= scheduled.Count;
        scheduledBytes -= scheduled.Sum(m => (long)m.PayloadSize);
        deferredCount -= deferred.Count;
        deferredBytes -= deferred.Sum(m => (long)m.PayloadSize);
        // The next scheduled message in the database comes right after the last one read.
        var (fromAt, fromSequence) = scheduledCount > 0 && scheduled.Count > 0
            ? (scheduled[^1].ScheduledAtMs ?? 0, scheduled[^1].SequenceNumber + 1)
            : scheduledCount > 0 ? (long.MinValue, long.MinValue) : (long.MaxValue, long.MaxValue);
        return new HeldTail(fromAt, fromSequence, scheduledCount, scheduledBytes, deferredCount, deferredBytes);
    }
}
