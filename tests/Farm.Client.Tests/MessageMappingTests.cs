using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Client.Tests;

public class MessageMappingTests
{
    [Fact]
    public void ToProto_CopiesEveryField()
    {
        var scheduled = new DateTimeOffset(2030, 1, 2, 3, 4, 5, TimeSpan.Zero);
        var message = new FarmMessage("hello")
        {
            MessageId = "m1",
            CorrelationId = "c1",
            SessionId = "s1",
            Subject = "subj",
            ContentType = "text/plain",
            To = "to",
            ReplyTo = "reply",
            ReplyToSessionId = "rs",
            TimeToLive = TimeSpan.FromMinutes(5),
            ScheduledEnqueueTime = scheduled,
            ApplicationProperties = { ["n"] = 7, ["s"] = "x" },
        };

        var proto = MessageMapper.ToProto(message);

        Assert.Equal("hello", proto.Body.ToStringUtf8());
        Assert.Equal(("m1", "c1", "s1", "subj", "text/plain"), (proto.MessageId, proto.CorrelationId, proto.SessionId, proto.Subject, proto.ContentType));
        Assert.Equal(("to", "reply", "rs"), (proto.To, proto.ReplyTo, proto.ReplyToSessionId));
        Assert.Equal(TimeSpan.FromMinutes(5), proto.TimeToLive.ToTimeSpan());
        Assert.Equal(scheduled, proto.ScheduledEnqueueTime.ToDateTimeOffset());
        Assert.Equal(7, proto.ApplicationProperties["n"].IntValue);
        Assert.Equal("x", proto.ApplicationProperties["s"].StringValue);
    }

    [Fact]
    public void ToProto_UnsetOptionalFields_StayUnsetOnTheWire()
    {
        var proto = MessageMapper.ToProto(new FarmMessage { TimeToLive = TimeSpan.MaxValue });

        Assert.Null(proto.TimeToLive);
        Assert.Null(proto.ScheduledEnqueueTime);
        Assert.Equal(string.Empty, proto.MessageId);
    }

    [Fact]
    public void ToProto_NonPositiveTtl_Throws()
        => Assert.Throws<ArgumentException>(() => MessageMapper.ToProto(new FarmMessage { TimeToLive = TimeSpan.Zero }));

    [Fact]
    public void ToProto_UnsupportedProperty_ThrowsNamingIt()
    {
        var message = new FarmMessage { ApplicationProperties = { ["bad"] = new object() } };

        var error = Assert.Throws<ArgumentException>(() => MessageMapper.ToProto(message));

        Assert.Contains("'bad'", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void FromProto_CopiesBrokerProperties()
    {
        var enqueued = new DateTimeOffset(2024, 1, 1, 0, 0, 0, TimeSpan.Zero);
        var received = new ReceivedMessage
        {
            Message = new Message { Body = ByteString.CopyFromUtf8("body"), MessageId = "m", ApplicationProperties = { ["k"] = new PropertyValue { BoolValue = true } } },
            SequenceNumber = 42,
            EnqueuedTime = Timestamp.FromDateTimeOffset(enqueued),
            DeliveryCount = 3,
            LockToken = "lock-1",
            LockedUntil = Timestamp.FromDateTimeOffset(enqueued.AddMinutes(1)),
            ExpiresAt = Timestamp.FromDateTimeOffset(enqueued.AddDays(1)),
            State = MessageState.Deferred,
            DeadLetterReason = "why",
            DeadLetterErrorDescription = "because",
            DeadLetterSource = "orders",
        };

        var message = MessageMapper.FromProto(received, "orders", settleable: true);

        Assert.Equal("body", message.Body.ToString());
        Assert.Equal("m", message.MessageId);
        Assert.Null(message.CorrelationId);
        Assert.Equal(42, message.SequenceNumber);
        Assert.Equal(enqueued, message.EnqueuedTime);
        Assert.Equal(3, message.DeliveryCount);
        Assert.Equal("lock-1", message.LockToken);
        Assert.Equal(enqueued.AddMinutes(1), message.LockedUntil);
        Assert.Equal(enqueued.AddDays(1), message.ExpiresAt);
        Assert.Equal(FarmMessageState.Deferred, message.State);
        Assert.Equal(("why", "because", "orders"), (message.DeadLetterReason, message.DeadLetterErrorDescription, message.DeadLetterSource));
        Assert.Equal(true, message.ApplicationProperties["k"]);
        Assert.True(message.IsSettleable);
    }

    [Fact]
    public void FromProto_WithoutLockToken_IsNotSettleable()
    {
        var message = MessageMapper.FromProto(new ReceivedMessage { Message = new Message(), SequenceNumber = 1 }, "q", settleable: true);

        Assert.False(message.IsSettleable);
    }

    [Fact]
    public void RoundTrip_ThroughReceivedMessage_KeepsUserFields()
    {
        var original = new FarmMessage(new byte[] { 0, 255, 7 }) { MessageId = "id", Subject = "s", ApplicationProperties = { ["when"] = TimeSpan.FromSeconds(3) } };
        var received = MessageMapper.FromProto(new ReceivedMessage { Message = MessageMapper.ToProto(original) }, "q", settleable: false);

        var copy = new FarmMessage(received);

        Assert.Equal(original.Body.ToArray(), copy.Body.ToArray());
        Assert.Equal("id", copy.MessageId);
        Assert.Equal("s", copy.Subject);
        Assert.Equal(TimeSpan.FromSeconds(3), copy.ApplicationProperties["when"]);
    }
}
