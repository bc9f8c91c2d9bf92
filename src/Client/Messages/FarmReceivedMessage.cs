namespace Farm.Client;

public enum FarmMessageState
{
    Active,
    Deferred,
    Scheduled,
}

/// <summary>A message handed out by the farm (receive, peek, receive-deferred), like Azure's ServiceBusReceivedMessage.</summary>
public sealed class FarmReceivedMessage
{
    internal FarmReceivedMessage()
    {
    }

    public BinaryData Body { get; internal init; } = BinaryData.Empty;

    public string? MessageId { get; internal init; }

    public string? CorrelationId { get; internal init; }

    public string? SessionId { get; internal init; }

    public string? Subject { get; internal init; }

    public string? ContentType { get; internal init; }

    public string? To { get; internal init; }

    public string? ReplyTo { get; internal init; }

    public string? ReplyToSessionId { get; internal init; }

    public TimeSpan? TimeToLive { get; internal init; }

    public DateTimeOffset? ScheduledEnqueueTime { get; internal init; }

    public IReadOnlyDictionary<string, object?> ApplicationProperties { get; internal init; } = ReceivedApplicationProperties.Empty;

    public long SequenceNumber { get; internal init; }

    public DateTimeOffset EnqueuedTime { get; internal init; }

    public int DeliveryCount { get; internal init; }

    /// <summary>Empty for peeked and ReceiveAndDelete messages.</summary>
    public string LockToken { get; internal init; } = string.Empty;

    /// <summary>Moves forward when the lock is renewed.</summary>
    public DateTimeOffset LockedUntil { get; internal set; }

    public DateTimeOffset? ExpiresAt { get; internal init; }

    public FarmMessageState State { get; internal init; }

    public string? DeadLetterReason { get; internal init; }

    public string? DeadLetterErrorDescription { get; internal init; }

    public string? DeadLetterSource { get; internal init; }

    /// <summary>The entity path it was received from; settlement goes there.</summary>
    internal string EntityPath { get; init; } = string.Empty;

    /// <summary>Whether this message may be settled: received under peek-lock (not peeked, not ReceiveAndDelete).</summary>
    internal bool IsSettleable { get; init; }

    public override string ToString() => $"{{MessageId:{MessageId}, SequenceNumber:{SequenceNumber}}}";
}
