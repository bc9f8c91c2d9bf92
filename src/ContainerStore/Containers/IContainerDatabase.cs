namespace Farm.ContainerStore.Containers;

/// <summary>
/// One container database. Only its owning broker writes to it; every write transaction checks
/// the owner epoch stored inside it, so a broker that lost the container cannot write.
/// </summary>
public interface IContainerDatabase : IAsyncDisposable
{
    string ConnectionString { get; }

    /// <summary>
    /// Whether this store keeps followers (schema version 7): a subscription's messages stored as its
    /// topic's copy and membership, without rows of their own (<see cref="MessageRecord.Implicit"/>,
    /// <see cref="FollowerState"/>). A store without them gets a row per subscription and message.
    /// </summary>
    bool FollowsTopics => false;

    Task<long> ReadEpochAsync(CancellationToken cancellationToken = default);

    /// <summary>
    /// Raises the stored owner epoch to <paramref name="newEpoch"/> (a new owner does this before it
    /// serves). Returns false, changing nothing, when the stored epoch is already higher.
    /// </summary>
    Task<bool> RaiseEpochAsync(long newEpoch, CancellationToken cancellationToken = default);

    /// <summary>Loads an entity's messages (with payloads), its sequence counter and duplicate history.</summary>
    Task<EntityLoad> LoadEntityAsync(long entityId, long nowMs, CancellationToken cancellationToken = default);

    /// <summary>
    /// Loads what the broker keeps in memory of a queue or subscription: per sub-queue its active
    /// messages in sequence order up to <paramref name="cacheBytes"/> of payload (at least one), and
    /// up to as many bytes each of the main queue's scheduled messages (the first to come due) and
    /// deferred ones. The active messages after those stay in the database until read back
    /// (<see cref="EntityLoad.Tails"/>); the dead-letter queue's are counted here, the queue's are
    /// not (see <see cref="StoredTail"/>). The scheduled and deferred ones left are counted
    /// (<see cref="EntityLoad.Held"/>).
    /// </summary>
    /// <param name="copiesOf">
    /// For a subscription, its topic: a row stored without a payload comes back with the topic's copy
    /// (null when the copy is gone). A follower's implicit messages come too, every one of them (they
    /// were in memory where the topic's fan-out put them), with the rows up to the last of them.
    /// </param>
    /// <param name="maxDuplicates">Most duplicate-detection ids to read, the newest first (see <see cref="EntityLoad.DuplicateHistoryComplete"/>).</param>
    Task<EntityLoad> LoadEntityHeadAsync(long entityId, long nowMs, long cacheBytes, long copiesOf = 0, int maxDuplicates = int.MaxValue, CancellationToken cancellationToken = default);

    /// <summary>
    /// Of <paramref name="entityIds"/>, the quiet ones, in one statement: no message stored (in any
    /// state or sub-queue) and no duplicate-detection id live at <paramref name="nowMs"/>. Each
    /// comes back as <see cref="LoadEntityHeadAsync"/> would read it
    /// (<see cref="EntityLoad.QuietHead"/>); the others are left out and need their head load. A
    /// node that starts with thousands of stored queues, most of them empty, loads them this way
    /// instead of with a head load of eight statements each. Subscriptions of topic
    /// <paramref name="copiesOf"/> that follow it (<see cref="FollowerState"/>, returned with the load)
    /// are quiet only while the topic holds no membership past their done mark.
    /// </summary>
    Task<IReadOnlyList<EntityLoad>> LoadQuietHeadsAsync(IReadOnlyCollection<long> entityIds, long nowMs, long copiesOf = 0, CancellationToken cancellationToken = default);

    /// <summary>
    /// A sub-queue's active messages after <paramref name="afterSequence"/>, in sequence order: at most
    /// <paramref name="maxRows"/>, and no more once <paramref name="maxBytes"/> of payload are read (at least one).
    /// </summary>
    /// <param name="copiesOf">As for <see cref="LoadEntityHeadAsync"/>.</param>
    Task<IReadOnlyList<MessageRecord>> ReadActiveAsync(long entityId, SubQueue subQueue, long afterSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default);

    /// <summary>
    /// Scheduled messages of the main queue from due time <paramref name="fromAtMs"/> and sequence
    /// number <paramref name="fromSequence"/> on, in that order: at most <paramref name="maxRows"/>,
    /// and no more once <paramref name="maxBytes"/> of payload are read (at least one).
    /// </summary>
    Task<IReadOnlyList<MessageRecord>> ReadScheduledAsync(long entityId, long fromAtMs, long fromSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default);

    /// <summary>
    /// Active messages of the main queue after <paramref name="afterSequence"/> whose time to live
    /// ran out by <paramref name="nowMs"/>, the earliest expiry first (index messages_by_expiry): at
    /// most <paramref name="maxRows"/>, and no more once <paramref name="maxBytes"/> of payload are read (at least one).
    /// </summary>
    Task<IReadOnlyList<MessageRecord>> ReadExpiredAsync(long entityId, long afterSequence, long nowMs, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default);

    /// <summary>An entity's messages of the given sequence numbers, in any state (those that exist), in sequence order.</summary>
    Task<IReadOnlyList<MessageRecord>> ReadByKeyAsync(long entityId, IReadOnlyCollection<long> sequenceNumbers, long copiesOf = 0, CancellationToken cancellationToken = default);

    /// <summary>A sub-queue's messages in any state after <paramref name="afterSequence"/>, in order, limited as <see cref="ReadActiveAsync"/> is: what peek shows.</summary>
    Task<IReadOnlyList<MessageRecord>> ReadFromAsync(long entityId, SubQueue subQueue, long afterSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default);

    /// <summary>An entity's sequence counter (at least one past every stored row) and duplicate history, without its messages: what a topic keeps in memory.</summary>
    Task<EntityLoad> LoadEntityStateAsync(long entityId, long nowMs, int maxDuplicates = int.MaxValue, CancellationToken cancellationToken = default);

    /// <summary>Which of <paramref name="messageIds"/> the entity saw within its duplicate-detection window (stored with an expiry after <paramref name="nowMs"/>).</summary>
    Task<IReadOnlyCollection<string>> FindDuplicatesAsync(long entityId, IReadOnlyCollection<string> messageIds, long nowMs, CancellationToken cancellationToken = default);

    /// <summary>The record of a named send (<see cref="SendRecord"/>) made at or after <paramref name="sinceMs"/>; null when there is none.</summary>
    Task<SendRecord?> FindSendRecordAsync(string producerId, long sendId, long sinceMs, CancellationToken cancellationToken = default);

    /// <summary>
    /// The records of one producer's sends with these ids made at or after <paramref name="sinceMs"/>,
    /// in one read (a forwarder records each message under its source's sequence number); those
    /// without a record are left out.
    /// </summary>
    Task<IReadOnlyList<SendRecord>> FindSendRecordsAsync(string producerId, IReadOnlyCollection<long> sendIds, long sinceMs, CancellationToken cancellationToken = default);

    /// <summary>
    /// When the newest record of a producer whose id starts with <paramref name="producerPrefix"/>
    /// was made (ms since the epoch), pruned or not; null when there is none. Read through the
    /// records' time index from the newest down: cheap while such records are being made.
    /// </summary>
    Task<long?> NewestSendRecordAtMsAsync(string producerPrefix, CancellationToken cancellationToken = default);

    /// <summary>The entity's duplicate-detection ids within the window after <paramref name="afterMessageId"/> in ordinal order, at most <paramref name="maxRows"/>: a scan in pages.</summary>
    Task<IReadOnlyList<DuplicateRecord>> ReadDuplicatesAsync(long entityId, string afterMessageId, long nowMs, int maxRows, CancellationToken cancellationToken = default);

    /// <summary>
    /// Finds a topic's stored copies that no row of <paramref name="subscriptionIds"/> points at any
    /// more: among the copies in (<paramref name="afterSequence"/>, <paramref name="throughSequence"/>]
    /// (at most <paramref name="maxRows"/> of them, and none at or past the lowest active message of a
    /// subscription's main queue, which its copies still need), and among <paramref name="recheck"/>.
    /// </summary>
    Task<CopyScan> ScanCopiesAsync(
        long topicId, IReadOnlyCollection<long> subscriptionIds, long afterSequence, long throughSequence, int maxRows, IReadOnlyCollection<long> recheck,
        CancellationToken cancellationToken = default);

    /// <summary>How many active messages of a sub-queue have a sequence number in (<paramref name="afterSequence"/>, <paramref name="throughSequence"/>], and their payload bytes.</summary>
    Task<(long Count, long Bytes)> CountActiveAsync(long entityId, SubQueue subQueue, long afterSequence, long throughSequence, CancellationToken cancellationToken = default);

    /// <summary>Reads payloads of the given messages (for a cache that dropped them).</summary>
    Task<IReadOnlyDictionary<long, byte[]>> ReadPayloadsAsync(long entityId, IReadOnlyCollection<long> sequenceNumbers, CancellationToken cancellationToken = default);

    /// <summary>
    /// Applies the batch in one durable transaction, after checking that the stored epoch equals
    /// <paramref name="expectedEpoch"/>; throws <see cref="StaleEpochException"/> (writing nothing) when not,
    /// and <see cref="CommitOutcomeUnknownException"/> when the COMMIT itself failed (it may or may not
    /// have been written). Any other failure wrote nothing.
    /// </summary>
    Task CommitAsync(long expectedEpoch, ContainerWriteBatch batch, CancellationToken cancellationToken = default);

    /// <summary>
    /// <see cref="CommitAsync"/> with its durability awaited apart: returns once the transaction has
    /// committed (later reads and transactions see it), with a task that completes once it is
    /// durable, or fails with <see cref="CommitOutcomeUnknownException"/> when making it durable
    /// failed (and then nothing committed since may be taken as durable either). The group commit
    /// writes its next transaction while the disk writes this one; nothing in it may be acknowledged
    /// before that task completes. A store whose commits are durable when they return (PostgreSQL)
    /// gives a completed task.
    /// </summary>
    async Task<Task> CommitBeforeDurableAsync(long expectedEpoch, ContainerWriteBatch batch, CancellationToken cancellationToken = default)
    {
        await CommitAsync(expectedEpoch, batch, cancellationToken).ConfigureAwait(false);
        return Task.CompletedTask;
    }
}

/// <summary>The container's owner epoch moved on: the writer lost ownership. Nothing was written.</summary>
public sealed class StaleEpochException(long expected, long actual)
    : Exception($"The container's owner epoch is {actual}, not {expected}: this broker no longer owns it.")
{
    public long ExpectedEpoch { get; } = expected;
    public long ActualEpoch { get; } = actual;
}

/// <summary>
/// The COMMIT itself failed (a failed fsync, a connection lost while the server committed): the batch
/// may or may not be durable. The caller must neither acknowledge it nor assume it was not written;
/// only reading the database again tells.
/// </summary>
public sealed class CommitOutcomeUnknownException(string message, Exception inner) : Exception(message, inner);

/// <summary>
/// A container database used after it was closed: its container left this node (a lease lost, a
/// hand-over) or the node is stopping. Thrown before anything is read or written, so nothing was
/// written. An ObjectDisposedException, as any use of a disposed object is.
/// </summary>
public sealed class ContainerDatabaseClosedException(object database)
    : ObjectDisposedException(database.GetType().FullName, "The container database was closed: its container left this node, or the node is stopping.")
{
    /// <summary>Throws when <paramref name="closed"/>.</summary>
    public static void ThrowIfClosed(bool closed, object database)
    {
        if (closed)
        {
            throw new ContainerDatabaseClosedException(database);
        }
    }
}
