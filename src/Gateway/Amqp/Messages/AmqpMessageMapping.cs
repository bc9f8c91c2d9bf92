using Farm.Broker;
using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.Collections;
using Google.Protobuf.WellKnownTypes;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Encoding;
using Microsoft.Azure.Amqp.Framing;
using FarmMessage = Farm.Contracts.V1.Message;

namespace Farm.Gateway.Amqp.Messages;

/// <summary>
/// AMQP messages as the Azure Service Bus SDKs write and read them, to and from Farm's own
/// message: the standard properties, the x-opt-* annotations, and application properties with
/// their types. A Farm message body is bytes: a Data body is those bytes, an AmqpValue string or
/// binary is its UTF-8 or bytes, and a body goes out as one Data section.
/// </summary>
internal static class AmqpMessageMapping
{
    // Message annotations Azure Service Bus reads and writes (x-opt-*), and the application
    // properties that carry a dead letter's reason.
    public static readonly AmqpSymbol SequenceNumber = "x-opt-sequence-number";
    public static readonly AmqpSymbol EnqueuedTime = "x-opt-enqueued-time";
    public static readonly AmqpSymbol LockedUntil = "x-opt-locked-until";
    public static readonly AmqpSymbol ScheduledEnqueueTime = "x-opt-scheduled-enqueue-time";
    public static readonly AmqpSymbol EnqueueSequenceNumber = "x-opt-enqueue-sequence-number";
    public static readonly AmqpSymbol DeadLetterSource = "x-opt-deadletter-source";
    public static readonly AmqpSymbol MessageState = "x-opt-message-state";
    public static readonly AmqpSymbol PartitionKey = "x-opt-partition-key";
    public const string DeadLetterReasonProperty = "DeadLetterReason";
    public const string DeadLetterErrorDescriptionProperty = "DeadLetterErrorDescription";

    // .NET types Azure's .NET SDK sends as described types (com.microsoft:*).
    private static readonly AmqpSymbol TimeSpanDescriptor = "com.microsoft:timespan";
    private static readonly AmqpSymbol UriDescriptor = "com.microsoft:uri";
    private static readonly AmqpSymbol DateTimeOffsetDescriptor = "com.microsoft:datetime-offset";

    /// <summary>The message format of an Azure batch: each Data section of the body is a whole encoded message.</summary>
    public const uint BatchMessageFormat = 0x80013700;

    /// <summary>The messages an AMQP transfer holds: itself, or each message of an Azure batch.</summary>
    public static List<FarmMessage> ToFarmMessages(AmqpMessage amqp)
    {
        if (amqp.MessageFormat != BatchMessageFormat)
        {
            return [ToFarm(amqp)];
        }
        var messages = new List<FarmMessage>();
        foreach (var data in amqp.DataBody)
        {
            using var inner = Decode(SegmentOf(data));
            messages.Add(ToFarm(inner));
        }
        return messages;
    }

    private static ArraySegment<byte> SegmentOf(Data data) => data.Value switch
    {
        ArraySegment<byte> segment => segment,
        byte[] bytes => new ArraySegment<byte>(bytes),
        _ => ArraySegment<byte>.Empty,
    };

    /// <summary>A whole encoded message (a batch's Data section, a $management request's "message").</summary>
    public static AmqpMessage Decode(ArraySegment<byte> encoded)
    {
        var copy = encoded.ToArray();
        return AmqpMessage.CreateAmqpStreamMessage(new BufferListStream([new ArraySegment<byte>(copy)]), true);
    }

    /// <summary>A message encoded whole, as $management answers carry them.</summary>
    public static ArraySegment<byte> Encode(AmqpMessage message)
    {
        using var stream = message.ToStream();
        using var buffer = new MemoryStream();
        stream.CopyTo(buffer);
        return new ArraySegment<byte>(buffer.ToArray());
    }

    public static FarmMessage ToFarm(AmqpMessage amqp)
    {
        var message = new FarmMessage { Body = BodyOf(amqp) };
        // Azure Service Bus gives a message without an id one of its own; the JavaScript SDK
        // relies on it (its lock renewal is keyed by message id).
        message.MessageId = Guid.NewGuid().ToString("N");
        if ((amqp.Sections & SectionFlag.Properties) != 0 && amqp.Properties is { } properties)
        {
            message.MessageId = properties.MessageId?.ToString() ?? message.MessageId;
            message.CorrelationId = properties.CorrelationId?.ToString() ?? string.Empty;
            message.Subject = properties.Subject ?? string.Empty;
            message.ContentType = properties.ContentType.Value ?? string.Empty;
            message.To = properties.To?.ToString() ?? string.Empty;
            message.ReplyTo = properties.ReplyTo?.ToString() ?? string.Empty;
            message.SessionId = properties.GroupId ?? string.Empty;
            message.ReplyToSessionId = properties.ReplyToGroupId ?? string.Empty;
        }
        if ((amqp.Sections & SectionFlag.Header) != 0 && amqp.Header?.Ttl is { } ttl && ttl > 0)
        {
            message.TimeToLive = Duration.FromTimeSpan(TimeSpan.FromMilliseconds(ttl));
        }
        if ((amqp.Sections & SectionFlag.MessageAnnotations) != 0 && amqp.MessageAnnotations?.Map is { } annotations
            && annotations.TryGetValue<DateTime>(ScheduledEnqueueTime, out var scheduled) && scheduled > DateTime.UnixEpoch)
        {
            message.ScheduledEnqueueTime = Timestamp.FromDateTime(DateTime.SpecifyKind(scheduled, DateTimeKind.Utc));
        }
        if ((amqp.Sections & SectionFlag.ApplicationProperties) != 0 && amqp.ApplicationProperties?.Map is { } application)
        {
            foreach (var pair in application)
            {
                var name = pair.Key.Key?.ToString() ?? string.Empty;
                message.ApplicationProperties[name] = ToPropertyValue(name, pair.Value);
            }
        }
        return message;
    }

    private static ByteString BodyOf(AmqpMessage amqp)
    {
        if ((amqp.BodyType & SectionFlag.Data) != 0)
        {
            var sections = amqp.DataBody.ToList();
            if (sections.Count == 1)
            {
                return ByteString.CopyFrom(SegmentOf(sections[0]).AsSpan());
            }
            using var all = new MemoryStream();
            foreach (var data in sections)
            {
                all.Write(SegmentOf(data).AsSpan());
            }
            return ByteString.CopyFrom(all.GetBuffer(), 0, (int)all.Length);
        }
        if ((amqp.BodyType & SectionFlag.AmqpValue) != 0)
        {
            return amqp.ValueBody.Value switch
            {
                null => ByteString.Empty,
                string text => ByteString.CopyFromUtf8(text),
                ArraySegment<byte> bytes => ByteString.CopyFrom(bytes.AsSpan()),
                byte[] bytes => ByteString.CopyFrom(bytes),
                var other => throw FarmErrors.NotSupported(
                    $"An AmqpValue body of type {other.GetType().Name} is not supported: Farm stores a body as bytes. Send a Data body (bodyType 'data'), a string or binary value."),
            };
        }
        if ((amqp.BodyType & SectionFlag.AmqpSequence) != 0)
        {
            throw FarmErrors.NotSupported("An AmqpSequence body is not supported: Farm stores a body as bytes. Send a Data body (bodyType 'data').");
        }
        return ByteString.Empty;
    }

    /// <summary>An application property's AMQP value as Farm's typed value; types Farm cannot keep are refused, naming the property.</summary>
    public static PropertyValue ToPropertyValue(string name, object? value) => value switch
    {
        string s => new PropertyValue { StringValue = s },
        bool b => new PropertyValue { BoolValue = b },
        int i => new PropertyValue { IntValue = i },
        short s => new PropertyValue { IntValue = s },
        sbyte s => new PropertyValue { IntValue = s },
        byte b => new PropertyValue { IntValue = b },
        ushort u => new PropertyValue { IntValue = u },
        uint u => new PropertyValue { LongValue = u },
        long l => new PropertyValue { LongValue = l },
        ulong u when u <= long.MaxValue => new PropertyValue { LongValue = (long)u },
        double d => new PropertyValue { DoubleValue = d },
        float f => new PropertyValue { DoubleValue = f },
        decimal m => new PropertyValue { DoubleValue = (double)m },
        char c => new PropertyValue { StringValue = c.ToString() },
        Guid g => new PropertyValue { GuidValue = g.ToString() },
        DateTime t => new PropertyValue { TimestampValue = Timestamp.FromDateTime(DateTime.SpecifyKind(t, DateTimeKind.Utc)) },
        ArraySegment<byte> bytes => new PropertyValue { BytesValue = ByteString.CopyFrom(bytes.AsSpan()) },
        byte[] bytes => new PropertyValue { BytesValue = ByteString.CopyFrom(bytes) },
        AmqpSymbol symbol => new PropertyValue { StringValue = symbol.Value ?? string.Empty },
        DescribedType { Descriptor: AmqpSymbol d, Value: long ticks } when d.Equals(TimeSpanDescriptor) => new PropertyValue { DurationValue = Duration.FromTimeSpan(TimeSpan.FromTicks(ticks)) },
        DescribedType { Descriptor: AmqpSymbol d, Value: string uri } when d.Equals(UriDescriptor) => new PropertyValue { StringValue = uri },
        DescribedType { Descriptor: AmqpSymbol d, Value: object[] { Length: 2 } parts } when d.Equals(DateTimeOffsetDescriptor) && parts[0] is long ticks && parts[1] is long offset =>
            new PropertyValue { TimestampValue = Timestamp.FromDateTimeOffset(new DateTimeOffset(ticks, TimeSpan.FromTicks(offset))) },
        null => throw FarmErrors.Invalid($"The application property '{name}' is null; Farm keeps only typed values (send it without the property)."),
        var other => throw FarmErrors.Invalid($"The application property '{name}' has the AMQP type {other.GetType().Name}, which Farm does not keep (use a string, number, boolean, binary, timestamp or uuid)."),
    };

    public static object FromPropertyValue(PropertyValue value) => value.KindCase switch
    {
        PropertyValue.KindOneofCase.StringValue => value.StringValue,
        PropertyValue.KindOneofCase.LongValue => value.LongValue,
        PropertyValue.KindOneofCase.IntValue => value.IntValue,
        PropertyValue.KindOneofCase.DoubleValue => value.DoubleValue,
        PropertyValue.KindOneofCase.BoolValue => value.BoolValue,
        PropertyValue.KindOneofCase.BytesValue => new ArraySegment<byte>(value.BytesValue.ToByteArray()),
        PropertyValue.KindOneofCase.TimestampValue => value.TimestampValue.ToDateTime(),
        PropertyValue.KindOneofCase.DurationValue => new DescribedType(TimeSpanDescriptor, value.DurationValue.ToTimeSpan().Ticks),
        PropertyValue.KindOneofCase.GuidValue => Guid.TryParse(value.GuidValue, out var guid) ? guid : value.GuidValue,
        _ => string.Empty,
    };

    /// <summary>A message as the Azure SDKs read it from a receive link or a $management answer.</summary>
    public static AmqpMessage FromFarm(ReceivedMessage received)
    {
        var message = received.Message ?? new FarmMessage();
        var amqp = AmqpMessage.Create(new Data { Value = new ArraySegment<byte>(message.Body.ToByteArray()) });
        // On the wire, as Azure puts it, the count of deliveries before this one (the .NET and Java
        // SDKs add one back; the JavaScript SDK shows it as is). Farm's count includes this delivery.
        var deliveryCount = Math.Max(0, received.DeliveryCount - 1);
        amqp.Header.Durable = true;
        amqp.Header.DeliveryCount = (uint)deliveryCount;
        if (message.TimeToLive is { } ttl && ttl.ToTimeSpan() is var span && span > TimeSpan.Zero && span.TotalMilliseconds < uint.MaxValue)
        {
            amqp.Header.Ttl = (uint)span.TotalMilliseconds;
        }

        var properties = amqp.Properties;
        if (message.MessageId.Length > 0) properties.MessageId = message.MessageId;
        if (message.CorrelationId.Length > 0) properties.CorrelationId = message.CorrelationId;
        if (message.Subject.Length > 0) properties.Subject = message.Subject;
        if (message.ContentType.Length > 0) properties.ContentType = message.ContentType;
        if (message.To.Length > 0) properties.To = message.To;
        if (message.ReplyTo.Length > 0) properties.ReplyTo = message.ReplyTo;
        if (message.SessionId.Length > 0) properties.GroupId = message.SessionId;
        if (message.ReplyToSessionId.Length > 0) properties.ReplyToGroupId = message.ReplyToSessionId;
        if (received.EnqueuedTime is { } enqueued)
        {
            properties.CreationTime = enqueued.ToDateTime();
            if (received.ExpiresAt is { } expiresAt)
            {
                properties.AbsoluteExpiryTime = expiresAt.ToDateTime();
            }
        }

        var annotations = amqp.MessageAnnotations.Map;
        annotations[SequenceNumber] = received.SequenceNumber;
        annotations[EnqueueSequenceNumber] = received.SequenceNumber;
        if (received.EnqueuedTime is { } enqueuedTime)
        {
            annotations[EnqueuedTime] = enqueuedTime.ToDateTime();
        }
        if (received.LockedUntil is { } lockedUntil && received.LockToken.Length > 0)
        {
            annotations[LockedUntil] = lockedUntil.ToDateTime();
        }
        if (message.ScheduledEnqueueTime is { } scheduled)
        {
            annotations[ScheduledEnqueueTime] = scheduled.ToDateTime();
        }
        annotations[MessageState] = received.State switch
        {
            Contracts.V1.MessageState.Deferred => 1,
            Contracts.V1.MessageState.Scheduled => 2,
            _ => 0,
        };
        if (received.DeadLetterSource.Length > 0)
        {
            annotations[DeadLetterSource] = received.DeadLetterSource;
        }

        var application = amqp.ApplicationProperties.Map;
        foreach (var (name, value) in message.ApplicationProperties)
        {
            application[name] = FromPropertyValue(value);
        }
        if (received.DeadLetterReason.Length > 0)
        {
            application[DeadLetterReasonProperty] = received.DeadLetterReason;
        }
        if (received.DeadLetterErrorDescription.Length > 0)
        {
            application[DeadLetterErrorDescriptionProperty] = received.DeadLetterErrorDescription;
        }
        return amqp;
    }

    /// <summary>The delivery tag of a locked message: its lock token's 16 bytes in .NET order, which the SDKs read back as the same Guid.</summary>
    public static ArraySegment<byte> DeliveryTagOf(string lockToken) =>
        Guid.TryParse(lockToken, out var guid) ? new ArraySegment<byte>(guid.ToByteArray()) : new ArraySegment<byte>(Guid.NewGuid().ToByteArray());

    public static string LockTokenOf(ArraySegment<byte> deliveryTag) =>
        deliveryTag.Count == 16 ? new Guid(deliveryTag.AsSpan()).ToString() : Convert.ToHexString(deliveryTag.AsSpan());

    /// <summary>Every non-null entry of an AMQP map (string or symbol keys) into Farm's typed properties.</summary>
    public static void CopyProperties(IEnumerable<KeyValuePair<MapKey, object>>? from, MapField<string, PropertyValue> into)
    {
        foreach (var (key, value) in from ?? [])
        {
            var name = key.Key?.ToString() ?? string.Empty;
            if (value is not null)
            {
                into[name] = ToPropertyValue(name, value);
            }
        }
    }
}
