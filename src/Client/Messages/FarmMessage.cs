namespace Farm.Client;

/// <summary>A message to send, like Azure's ServiceBusMessage.</summary>
public sealed class FarmMessage
{
    public FarmMessage()
        : this(BinaryData.Empty)
    {
    }

    public FarmMessage(string body)
        : this(BinaryData.FromString(body))
    {
    }

    public FarmMessage(ReadOnlyMemory<byte> body)
        : this(BinaryData.FromBytes(body))
    {
    }

    public FarmMessage(BinaryData body) => Body = body ?? throw new ArgumentNullException(nameof(body));

    /// <summary>Copies a received message so it can be sent again (e.g. resubmitted from the dead-letter queue).</summary>
    public FarmMessage(FarmReceivedMessage received)
    {
        ArgumentNullException.ThrowIfNull(received);
        Body = received.Body;
        MessageId = received.MessageId;
        CorrelationId = received.CorrelationId;
        SessionId = received.SessionId;
        Subject = received.Subject;
        ContentType = received.ContentType;
        To = received.To;
        ReplyTo = received.ReplyTo;
        ReplyToSessionId = received.ReplyToSessionId;
        TimeToLive = received.TimeToLive;
        foreach (var (key, value) in received.ApplicationProperties)
        {
            ApplicationProperties[key] = value;
        }
    }

    public BinaryData Body { get; set; }

    public string? MessageId { get; set; }

    public string? CorrelationId { get; set; }

    public string? SessionId { get; set; }

    public string? Subject { get; set; }

    public string? ContentType { get; set; }

    public string? To { get; set; }

    public string? ReplyTo { get; set; }

    public string? ReplyToSessionId { get; set; }

    /// <summary>Null: the entity's DefaultMessageTimeToLive applies.</summary>
    public TimeSpan? TimeToLive { get; set; }

    /// <summary>Set: the message is scheduled and becomes visible at this time.</summary>
    public DateTimeOffset? ScheduledEnqueueTime { get; set; }

    /// <summary>
    /// Values may be string, int, long, double, bool, byte[], DateTimeOffset (or DateTime), TimeSpan or Guid;
    /// anything else is rejected with an <see cref="ArgumentException"/> when the message is sent.
    /// </summary>
    public IDictionary<string, object?> ApplicationProperties { get; } = new Dictionary<string, object?>(StringComparer.Ordinal);

    public override string ToString() => $"{{MessageId:{MessageId}}}";
}
