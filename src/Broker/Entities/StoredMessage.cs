using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>
/// A committed message as the broker keeps it in memory (the entity's message cache). Mutated only
/// under its entity's lock.
/// </summary>
internal sealed class StoredMessage
{
    public required long SequenceNumber { get; init; }
    public required Message Message { get; set; }
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

    public bool IsLocked => LockToken is not null;

    public MessageUpdate ToUpdate(long entityId, byte[]? payload = null) => new(
        entityId, SequenceNumber, SubQueue, State, DeliveryCount, DeadLetterReason, DeadLetterDescription, DeadLetterSource, payload);

    /// <summary><paramref name="shared"/>: the topic's copy, for a subscription row stored without a payload.</summary>
    public static StoredMessage FromRecord(MessageRecord record, Message? shared = null) => new()
    {
        SequenceNumber = record.SequenceNumber,
        Message = shared ?? Message.Parser.ParseFrom(record.Payload ?? []),
        EnqueuedAtMs = record.EnqueuedAtMs,
        PayloadSize = record.PayloadSize,
        SubQueue = record.SubQueue,
        State = record.State,
        DeliveryCount = record.DeliveryCount,
        ScheduledAtMs = record.ScheduledAtMs,
        ExpiresAtMs = record.ExpiresAtMs,
        DeadLetterReason = record.DeadLetterReason,
        DeadLetterDescription = record.DeadLetterDescription,
        DeadLetterSource = record.DeadLetterSource,
    };
}
