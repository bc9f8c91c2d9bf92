using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>SDK messages to and from the wire types.</summary>
internal static class MessageMapper
{
    public static Message ToProto(FarmMessage message)
    {
        ArgumentNullException.ThrowIfNull(message);
        var proto = new Message
        {
            Body = UnsafeByteOperations.UnsafeWrap(message.Body.ToMemory()),
            MessageId = message.MessageId ?? string.Empty,
            CorrelationId = message.CorrelationId ?? string.Empty,
            SessionId = message.SessionId ?? string.Empty,
            Subject = message.Subject ?? string.Empty,
            ContentType = message.ContentType ?? string.Empty,
            To = message.To ?? string.Empty,
            ReplyTo = message.ReplyTo ?? string.Empty,
            ReplyToSessionId = message.ReplyToSessionId ?? string.Empty,
        };

        if (message.TimeToLive is { } ttl)
        {
            if (ttl <= TimeSpan.Zero)
            {
                throw new ArgumentException($"TimeToLive must be positive, not {ttl}.", nameof(message));
            }

            // TimeSpan.MaxValue means "never expires": leave it to the entity's default.
            if (ttl < TimeSpan.MaxValue)
            {
                proto.TimeToLive = Duration.FromTimeSpan(ttl);
            }
        }

        if (message.ScheduledEnqueueTime is { } scheduled)
        {
            proto.ScheduledEnqueueTime = Timestamp.FromDateTimeOffset(scheduled);
        }

        PropertyValues.CopyTo(message.ApplicationProperties, proto.ApplicationProperties);
        return proto;
    }

    public static FarmReceivedMessage FromProto(ReceivedMessage received, string entityPath, bool settleable)
    {
        var message = received.Message ?? new Message();
        // Converted when asked for, not per message received.
        var properties = message.ApplicationProperties.Count == 0
            ? ReceivedApplicationProperties.Empty
            : new ReceivedApplicationProperties(message.ApplicationProperties);

        return new FarmReceivedMessage
        {
            Body = message.Body.IsEmpty ? BinaryData.Empty : BinaryData.FromBytes(message.Body.Memory),
            MessageId = NullIfEmpty(message.MessageId),
            CorrelationId = NullIfEmpty(message.CorrelationId),
            SessionId = NullIfEmpty(message.SessionId),
            Subject = NullIfEmpty(message.Subject),
            ContentType = NullIfEmpty(message.ContentType),
            To = NullIfEmpty(message.To),
            ReplyTo = NullIfEmpty(message.ReplyTo),
            ReplyToSessionId = NullIfEmpty(message.ReplyToSessionId),
            TimeToLive = message.TimeToLive?.ToTimeSpan(),
            ScheduledEnqueueTime = message.ScheduledEnqueueTime?.ToDateTimeOffset(),
            ApplicationProperties = properties,
            SequenceNumber = received.SequenceNumber,
            EnqueuedTime = received.EnqueuedTime?.ToDateTimeOffset() ?? default,
            DeliveryCount = received.DeliveryCount,
            LockToken = received.LockToken,
            LockedUntil = received.LockedUntil?.ToDateTimeOffset() ?? default,
            ExpiresAt = received.ExpiresAt?.ToDateTimeOffset(),
            State = received.State switch
            {
                MessageState.Deferred => FarmMessageState.Deferred,
                MessageState.Scheduled => FarmMessageState.Scheduled,
                _ => FarmMessageState.Active,
            },
            DeadLetterReason = NullIfEmpty(received.DeadLetterReason),
            DeadLetterErrorDescription = NullIfEmpty(received.DeadLetterErrorDescription),
            DeadLetterSource = NullIfEmpty(received.DeadLetterSource),
            EntityPath = entityPath,
            IsSettleable = settleable && received.LockToken.Length > 0,
        };
    }

    /// <summary>Bytes the message adds to a SendRequest (field tag + length prefix + body).</summary>
    public static int EncodedSizeInRequest(Message proto)
    {
        var size = proto.CalculateSize();
        return 1 + CodedOutputStream.ComputeLengthSize(size) + size;
    }

    private static string? NullIfEmpty(string value) => value.Length == 0 ? null : value;
}
