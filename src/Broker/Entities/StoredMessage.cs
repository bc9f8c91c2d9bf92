using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

/// <summary>
/// A committed message as the broker keeps it in memory (the entity's message cache). Mutated only
/// under its entity's lock. The message itself is kept as the bytes the store holds (one array,
/// shared by every subscription that got the topic's copy unchanged), not as a parsed object
/// graph: it is parsed when handed out, forwarded or modified.
/// </summary>
internal sealed class StoredMessage
{
    public required long SequenceNumber { get; init; }
    /// <summary>The serialized message (the payload column).</summary>
    public required byte[] Payload { get; set; }
    public required long EnqueuedAtMs { get; init; }
    public required int PayloadSize { get; set; }
    public SubQueue SubQueue { get; set; }
    public StoredMessageState State { get; set; }
    public int DeliveryCount { get; set; }
    public long? ScheduledAtMs { get; init; }
    public long? ExpiresAtMs { get; init; }
    public string? DeadLetterReason { get; set; }
    public string? DeadLetterDescription { get; set; }
    public string? DeadLetterSource { get; set; }

    /// <summary>Set while a peek-lock is held.</summary>
    public Guid? LockToken { get; set; }
    public long LockedUntilMs { get; set; }

    /// <summary>A write that removes or moves this message is in flight: hand it to nobody.</summary>
    public bool Settling { get; set; }

    /// <summary>
    /// The stored row's delivery count is one ahead of <see cref="DeliveryCount"/>: the send wrote it
    /// counted because a peek-lock receiver was already waiting for it, so the delivery that raises
    /// the count in memory needs no write of its own (<see cref="QueueEntity"/>'s send and take).
    /// Cleared by that delivery, and by any write of the row, which carries the count as memory has it.
    /// </summary>
    public bool DurableCountAhead { get; set; }

    /// <summary>
    /// A subscription's message that is its only stored form (its row carries the payload and the topic
    /// keeps no copy): the subscription counts it towards its topic's size. Always false in a queue.
    /// </summary>
    public bool StoredAlone { get; set; }

    /// <summary>
    /// A subscription's message that came without a row of its own: its topic's copy names the
    /// subscription (a follower, see QueueEntity.Follower.cs). Its writes may have to make its row
    /// (<see cref="Written"/>), and its removal moves the follower's done mark or writes a tombstone.
    /// </summary>
    public bool Implicit { get; set; }

    /// <summary>An implicit message some write was made for: it may have a row by now.</summary>
    public bool RowMayExist { get; private set; }

    /// <summary>
    /// A row its topic's fan-out wrote in this ownership, knowing the copy does not name the
    /// subscription: deleting it cannot bring an implicit message back, so it needs no tombstone.
    /// </summary>
    public bool WithoutMembership { get; set; }

    public bool IsLocked => LockToken is not null;

    /// <summary>
    /// The parse this message shares with others holding the same <see cref="Payload"/> (the other
    /// subscriptions a topic message went to unchanged); null: its own.
    /// </summary>
    public SharedParse? SharedParse { get; set; }

    /// <summary>A fresh parsed copy of the message: the caller may change it.</summary>
    public Contracts.V1.Message ParseMessage() => PayloadBytes.ToMessage(Payload);

    /// <summary>The message to hand a receiver: shared with the other holders of its payload when there are some, so read-only.</summary>
    public Contracts.V1.Message MessageToDeliver() => ToDeliver(Payload, SharedParse);

    /// <summary>
    /// <see cref="MessageToDeliver"/> from a payload and shared parse read earlier (under the entity's
    /// lock), so the parse itself can run outside it: a payload array is never changed, only replaced.
    /// </summary>
    public static Contracts.V1.Message ToDeliver(byte[] payload, SharedParse? shared) => shared?.Get(payload) ?? PayloadBytes.ToMessage(payload);

    /// <summary>Replaces the payload (a settlement modified properties); the caller adjusts its sub-queue's size.</summary>
    public void ReplacePayload(byte[] payload)
    {
        Payload = payload;
        PayloadSize = payload.Length;
        // Its own now: the others' parse is of the old payload.
        SharedParse = null;
    }

    public MessageUpdate ToUpdate(long entityId, byte[]? payload = null)
    {
        // The row written carries the count as memory has it: nothing is ahead any more.
        if (DurableCountAhead)
        {
            DurableCountAhead = false;
        }
        return Written(entityId, new(entityId, SequenceNumber, SubQueue, State, DeliveryCount, DeadLetterReason, DeadLetterDescription, DeadLetterSource, payload));
    }

    /// <summary>
    /// <paramref name="update"/> as this message writes it: an implicit message may have no row yet,
    /// so the update carries the row to insert with its values (the copy's payload unless it brings one).
    /// </summary>
    public MessageUpdate Written(long entityId, MessageUpdate update)
    {
        if (!Implicit)
        {
            return update;
        }
        RowMayExist = true;
        return update with
        {
            InsertIfMissing = new MessageRecord
            {
                EntityId = entityId,
                SequenceNumber = SequenceNumber,
                SubQueue = update.SubQueue,
                State = update.State,
                DeliveryCount = update.StoredDeliveryCount,
                EnqueuedAtMs = EnqueuedAtMs,
                ScheduledAtMs = ScheduledAtMs,
                ExpiresAtMs = ExpiresAtMs,
                DeadLetterReason = update.DeadLetterReason,
                DeadLetterDescription = update.DeadLetterDescription,
                DeadLetterSource = update.DeadLetterSource,
                Payload = update.Payload,
                PayloadSize = update.Payload?.Length ?? PayloadSize,
            },
        };
    }

    /// <summary>The update of a delivery: only the delivery count changed since the row was last written.</summary>
    public MessageUpdate ToDeliveryCountUpdate(long entityId) => ToUpdate(entityId) with { DeliveryCountOnly = true };

    /// <summary>
    /// A subscription's row comes with its topic's copy (IContainerDatabase reads it along). Its
    /// delivery count is read with the entity's delivery mark (<paramref name="deliveredThrough"/>,
    /// <see cref="SubQueueState.DeliveredThrough"/>).
    /// </summary>
    public static StoredMessage FromRecord(MessageRecord record, long deliveredThrough) => new()
    {
        SequenceNumber = record.SequenceNumber,
        Payload = record.Payload ?? [],
        EnqueuedAtMs = record.EnqueuedAtMs,
        PayloadSize = record.PayloadSize,
        SubQueue = record.SubQueue,
        State = record.State,
        DeliveryCount = record.DeliveryCountUnder(deliveredThrough),
        ScheduledAtMs = record.ScheduledAtMs,
        ExpiresAtMs = record.ExpiresAtMs,
        DeadLetterReason = record.DeadLetterReason,
        DeadLetterDescription = record.DeadLetterDescription,
        DeadLetterSource = record.DeadLetterSource,
        StoredAlone = record.StoredAlone,
        Implicit = record.Implicit,
    };
}
