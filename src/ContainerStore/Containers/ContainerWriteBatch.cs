namespace Farm.ContainerStore.Containers;

/// <summary>
/// Everything one group commit writes to a container database, applied in one transaction in
/// this order: inserts, updates, deletes (copy deletes with them), tombstones, sequence counters, delivery marks and
/// done marks (never lowered), followers, duplicate history,
/// send records, pruning, and purges last, so nothing written for an entity deleted in the same batch survives it.
/// Every update and delete must find its row, or the transaction fails with
/// <see cref="MissingRowException"/>; only rows of an entity purged in the same batch, or by an
/// earlier batch through the same database handle, may be missing (a settlement racing the delete
/// of its queue or subscription).
/// </summary>
public sealed class ContainerWriteBatch
{
    public List<long> PurgedEntities { get; } = [];
    public List<MessageRecord> Inserts { get; } = [];
    public List<MessageUpdate> Updates { get; } = [];
    public List<MessageKey> Deletes { get; } = [];

    /// <summary>Entity id -> the next sequence number it will hand out.</summary>
    public Dictionary<long, long> SequenceCounters { get; } = [];

    /// <summary>
    /// Entity id -> its delivery mark (never lowered): every message of its main queue at or below
    /// it that was never scheduled has been delivered at least once. A peek-lock receive that takes
    /// messages in sequence order for their first delivery writes this instead of each row's count
    /// (<see cref="MessageRecord.DeliveryCountUnder"/> reads a row's count with it).
    /// </summary>
    public Dictionary<long, long> DeliveryMarks { get; } = [];

    /// <summary>
    /// Subscription id -> its follower slot and the sequence number it follows from (schema version 7;
    /// written once, when it takes the slot). Skipped for an entity purged.
    /// </summary>
    public Dictionary<long, (int Slot, long FollowFrom)> Followers { get; } = [];

    /// <summary>
    /// Subscription id -> its done mark (never lowered, see <see cref="FollowerState"/>): every
    /// implicit message at or below it was settled. Its tombstones at or below it go in the same transaction.
    /// </summary>
    public Dictionary<long, long> DoneThrough { get; } = [];

    /// <summary>
    /// Implicit messages completed above their subscription's done mark: a tombstone row each (replacing
    /// the row the message got, if any), applied after the deletes and before the done marks.
    /// </summary>
    public List<MessageKey> Tombstones { get; } = [];

    /// <summary>A topic's copies to delete (each must exist), with their membership, if any.</summary>
    public List<MessageKey> CopyDeletes { get; } = [];

    public List<DuplicateRecord> Duplicates { get; } = [];

    /// <summary>Duplicate history older than this (Unix ms) may be dropped; 0 keeps everything.</summary>
    public long PruneDuplicatesBeforeMs { get; set; }

    /// <summary>The named sends whose messages this batch stores (see <see cref="SendRecord"/>).</summary>
    public List<SendRecord> Sends { get; } = [];

    /// <summary>Send records made before this (Unix ms) may be dropped; 0 keeps everything.</summary>
    public long PruneSendsBeforeMs { get; set; }

    public bool IsEmpty =>
        PurgedEntities.Count == 0 && Inserts.Count == 0 && Updates.Count == 0 && Deletes.Count == 0
        && SequenceCounters.Count == 0 && DeliveryMarks.Count == 0 && Followers.Count == 0 && DoneThrough.Count == 0 && Tombstones.Count == 0
        && CopyDeletes.Count == 0 && Duplicates.Count == 0 && PruneDuplicatesBeforeMs == 0
        && Sends.Count == 0 && PruneSendsBeforeMs == 0;

    public void Clear()
    {
        PurgedEntities.Clear();
        Inserts.Clear();
        Updates.Clear();
        Deletes.Clear();
        SequenceCounters.Clear();
        DeliveryMarks.Clear();
        Followers.Clear();
        DoneThrough.Clear();
        Tombstones.Clear();
        CopyDeletes.Clear();
        Duplicates.Clear();
        PruneDuplicatesBeforeMs = 0;
        Sends.Clear();
        PruneSendsBeforeMs = 0;
    }
}
