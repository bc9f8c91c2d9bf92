using Farm.Contracts.V1;
using Farm.Gateway.Amqp;
using Farm.Gateway.Amqp.Links;
using Farm.Gateway.Amqp.Management;
using Farm.Gateway.Amqp.Messages;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Encoding;
using Microsoft.Azure.Amqp.Framing;
using Disposition = Farm.Contracts.V1.Disposition;
using FarmMessage = Farm.Contracts.V1.Message;

namespace Farm.Gateway.Tests.Amqp;

public sealed class AmqpMessageMappingTests
{
    private static readonly DateTime Scheduled = new(2030, 1, 2, 3, 4, 5, DateTimeKind.Utc);

    [Fact]
    public void AnSdkMessage_BecomesAFarmMessage_WithEveryPropertyAndTypedApplicationProperties()
    {
        using var amqp = AmqpMessage.Create(new Data { Value = new ArraySegment<byte>("{\"a\":1}"u8.ToArray()) });
        amqp.Properties.MessageId = "m-1";
        amqp.Properties.CorrelationId = "c-1";
        amqp.Properties.Subject = "rush";
        amqp.Properties.ContentType = "application/json";
        amqp.Properties.To = "to";
        amqp.Properties.ReplyTo = "reply";
        amqp.Properties.GroupId = "session";
        amqp.Properties.ReplyToGroupId = "reply-session";
        amqp.Header.Ttl = 90_000;
        amqp.MessageAnnotations.Map[AmqpMessageMapping.ScheduledEnqueueTime] = Scheduled;
        amqp.ApplicationProperties.Map["s"] = "text";
        amqp.ApplicationProperties.Map["u"] = 5u;
        amqp.ApplicationProperties.Map["i"] = -3;
        amqp.ApplicationProperties.Map["d"] = 1.5;
        amqp.ApplicationProperties.Map["b"] = true;
        amqp.ApplicationProperties.Map["t"] = Scheduled;

        var message = AmqpMessageMapping.ToFarm(Roundtrip(amqp));

        Assert.Equal("{\"a\":1}", message.Body.ToStringUtf8());
        Assert.Equal(("m-1", "c-1", "rush", "application/json"), (message.MessageId, message.CorrelationId, message.Subject, message.ContentType));
        Assert.Equal(("to", "reply", "session", "reply-session"), (message.To, message.ReplyTo, message.SessionId, message.ReplyToSessionId));
        Assert.Equal(TimeSpan.FromSeconds(90), message.TimeToLive.ToTimeSpan());
        Assert.Equal(Scheduled, message.ScheduledEnqueueTime.ToDateTime());
        Assert.Equal("text", message.ApplicationProperties["s"].StringValue);
        Assert.Equal(5, message.ApplicationProperties["u"].LongValue);
        Assert.Equal(-3, message.ApplicationProperties["i"].IntValue);
        Assert.Equal(1.5, message.ApplicationProperties["d"].DoubleValue);
        Assert.True(message.ApplicationProperties["b"].BoolValue);
        Assert.Equal(Scheduled, message.ApplicationProperties["t"].TimestampValue.ToDateTime());
    }

    [Fact]
    public void AMessageWithoutAnId_GetsOne_AsAzureGivesIt()
    {
        using var amqp = AmqpMessage.Create(new Data { Value = new ArraySegment<byte>([1]) });
        var first = AmqpMessageMapping.ToFarm(amqp).MessageId;
        var second = AmqpMessageMapping.ToFarm(amqp).MessageId;
        Assert.Equal(32, first.Length);
        Assert.NotEqual(first, second);
    }

    [Fact]
    public void AnAzureBatch_IsUnpackedIntoItsMessages_IgnoringTheEnvelope()
    {
        var inner = new[] { "one", "two", "three" }.Select(body =>
        {
            using var message = AmqpMessage.Create(new Data { Value = new ArraySegment<byte>(System.Text.Encoding.UTF8.GetBytes(body)) });
            message.Properties.MessageId = body;
            return new Data { Value = AmqpMessageMapping.Encode(message) };
        }).ToList();
        using var batch = AmqpMessage.Create(inner);
        batch.Properties.MessageId = "envelope";
        // The format travels on the transfer frame, not in the encoded message.
        using var received = Roundtrip(batch);
        received.MessageFormat = AmqpMessageMapping.BatchMessageFormat;

        var messages = AmqpMessageMapping.ToFarmMessages(received);

        Assert.Equal(["one", "two", "three"], messages.Select(m => m.MessageId));
        Assert.Equal(["one", "two", "three"], messages.Select(m => m.Body.ToStringUtf8()));
    }

    [Fact]
    public void AStringValueBody_IsStoredAsItsUtf8_AndOtherValueBodiesAreRefusedNamingTheType()
    {
        using var text = AmqpMessage.Create(new AmqpValue { Value = "héllo" });
        Assert.Equal("héllo", AmqpMessageMapping.ToFarm(Roundtrip(text)).Body.ToStringUtf8());

        using var map = AmqpMessage.Create(new AmqpValue { Value = new AmqpMap { [new MapKey("k")] = 1 } });
        var error = Assert.Throws<Farm.Broker.BrokerException>(() => AmqpMessageMapping.ToFarm(Roundtrip(map)));
        Assert.Contains("AmqpMap", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void AReceivedMessage_CarriesTheAnnotationsTheSdksRead()
    {
        var lockedUntil = new DateTime(2030, 5, 6, 7, 8, 9, DateTimeKind.Utc);
        var received = new ReceivedMessage
        {
            Message = new FarmMessage
            {
                Body = ByteString.CopyFromUtf8("hi"),
                MessageId = "m",
                SessionId = "s",
                TimeToLive = Duration.FromTimeSpan(TimeSpan.FromMinutes(5)),
                ApplicationProperties = { ["n"] = new PropertyValue { LongValue = 7 }, ["g"] = new PropertyValue { GuidValue = Guid.Empty.ToString() } },
            },
            SequenceNumber = 42,
            EnqueuedTime = Timestamp.FromDateTime(Scheduled),
            ExpiresAt = Timestamp.FromDateTime(Scheduled.AddMinutes(5)),
            DeliveryCount = 3,
            LockToken = Guid.NewGuid().ToString(),
            LockedUntil = Timestamp.FromDateTime(lockedUntil),
            State = MessageState.Deferred,
            DeadLetterReason = "why",
            DeadLetterErrorDescription = "because",
        };

        using var amqp = Roundtrip(AmqpMessageMapping.FromFarm(received));

        Assert.Equal(42L, amqp.MessageAnnotations.Map[AmqpMessageMapping.SequenceNumber]);
        Assert.Equal(Scheduled, amqp.MessageAnnotations.Map[AmqpMessageMapping.EnqueuedTime]);
        Assert.Equal(lockedUntil, amqp.MessageAnnotations.Map[AmqpMessageMapping.LockedUntil]);
        Assert.Equal(1, amqp.MessageAnnotations.Map[AmqpMessageMapping.MessageState]);
        // Deliveries before this one, as Azure puts it on the wire.
        Assert.Equal(2u, amqp.Header.DeliveryCount);
        Assert.Equal(300_000u, amqp.Header.Ttl);
        Assert.Equal("m", amqp.Properties.MessageId.ToString());
        Assert.Equal("s", amqp.Properties.GroupId);
        Assert.Equal(7L, amqp.ApplicationProperties.Map["n"]);
        Assert.Equal(Guid.Empty, amqp.ApplicationProperties.Map["g"]);
        Assert.Equal("why", amqp.ApplicationProperties.Map[AmqpMessageMapping.DeadLetterReasonProperty]);
        Assert.Equal("because", amqp.ApplicationProperties.Map[AmqpMessageMapping.DeadLetterErrorDescriptionProperty]);
        Assert.Equal("hi", System.Text.Encoding.UTF8.GetString(amqp.DataBody.Single().Value is ArraySegment<byte> body ? body.ToArray() : []));
    }

    [Fact]
    public void ALockToken_TravelsAsTheDeliveryTag_InDotNetGuidByteOrder()
    {
        var token = Guid.NewGuid();
        var tag = AmqpMessageMapping.DeliveryTagOf(token.ToString());
        Assert.Equal(token.ToByteArray(), tag.ToArray());
        Assert.Equal(token.ToString(), AmqpMessageMapping.LockTokenOf(tag));
    }

    [Fact]
    public void Outcomes_BecomeTheSettlementsAzureMeansByThem()
    {
        var token = Guid.NewGuid().ToString();
        Assert.Equal(Disposition.Complete, OutgoingMessageLink.SettlementOf(token, new Accepted()).Disposition);
        Assert.Equal(Disposition.Abandon, OutgoingMessageLink.SettlementOf(token, new Released()).Disposition);

        var abandon = OutgoingMessageLink.SettlementOf(token, new Modified { UndeliverableHere = false, MessageAnnotations = new Fields { { "retry", 2 } } });
        Assert.Equal(Disposition.Abandon, abandon.Disposition);
        Assert.Equal(2, abandon.PropertiesToModify["retry"].IntValue);

        Assert.Equal(Disposition.Defer, OutgoingMessageLink.SettlementOf(token, new Modified { UndeliverableHere = true }).Disposition);

        var info = new Fields { { "DeadLetterReason", "bad" }, { "DeadLetterErrorDescription", "really" }, { "extra", "x" } };
        var deadLetter = OutgoingMessageLink.SettlementOf(token, new Rejected { Error = new Error { Condition = "com.microsoft:dead-letter", Info = info } });
        Assert.Equal(Disposition.DeadLetter, deadLetter.Disposition);
        Assert.Equal(("bad", "really"), (deadLetter.DeadLetterReason, deadLetter.DeadLetterErrorDescription));
        Assert.Equal("x", deadLetter.PropertiesToModify["extra"].StringValue);
        Assert.False(deadLetter.PropertiesToModify.ContainsKey("DeadLetterReason"));
    }

    [Fact]
    public void Rules_AreDescribedWithTheNumericDescriptorsTheSdksDecode()
    {
        var sql = ManagementNode.Describe(new RuleProperties { Name = "r", SqlFilter = new SqlFilter { Expression = "a = 1" }, SqlAction = "SET b = 2" });
        Assert.Equal(0x0000013700000004UL, sql.Descriptor);
        var parts = Assert.IsType<List<object?>>(sql.Value);
        Assert.Equal(0x0000001370000006UL, ((DescribedType)parts[0]!).Descriptor);
        Assert.Equal(0x0000013700000006UL, ((DescribedType)parts[1]!).Descriptor);
        Assert.Equal("r", parts[2]);

        var all = ManagementNode.Describe(new RuleProperties { Name = "$Default" });
        var allParts = (List<object?>)all.Value;
        Assert.Equal(0x0000001370000007UL, ((DescribedType)allParts[0]!).Descriptor);
        // The action is always a described value: the JavaScript SDK reads its descriptor unguarded.
        Assert.Equal(0x0000013700000005UL, ((DescribedType)allParts[1]!).Descriptor);
    }

    [Theory]
    [InlineData("orders", "orders")]
    [InlineData("/orders", "orders")]
    [InlineData("sb://host:5672/orders/", "orders")]
    [InlineData("events/Subscriptions/all/$DeadLetterQueue", "events/Subscriptions/all/$DeadLetterQueue")]
    [InlineData(null, "")]
    public void LinkAddresses_AreEntityPaths(string? address, string path) =>
        Assert.Equal(path, AmqpFrontDoor.NormalizeAddress(address));

    [Fact]
    public void FarmFailures_BecomeTheConditionsTheSdksMapToTheirCodes()
    {
        Assert.Equal("amqp:not-found", AmqpErrors.Classify(Farm.Broker.FarmErrors.EntityNotFound("q")).Condition.Value);
        Assert.Contains("could not be found", AmqpErrors.Classify(Farm.Broker.FarmErrors.EntityNotFound("q")).Description, StringComparison.Ordinal);
        Assert.Equal("com.microsoft:message-lock-lost", AmqpErrors.Classify(Farm.Broker.FarmErrors.LockLost("q", "t")).Condition.Value);
        Assert.Equal("amqp:link:message-size-exceeded", AmqpErrors.Classify(Farm.Broker.FarmErrors.SizeExceeded("big")).Condition.Value);
        Assert.Equal("com.microsoft:server-busy", AmqpErrors.Classify(Farm.Broker.FarmErrors.Busy("moving")).Condition.Value);
        Assert.True(AmqpErrors.IsTransient(Farm.Broker.FarmErrors.StaleEpoch(1)));
        Assert.Equal(410, AmqpErrors.StatusCodeOf("com.microsoft:message-lock-lost"));
    }

    /// <summary>Encoded and decoded again, as the message crosses the wire.</summary>
    private static AmqpMessage Roundtrip(AmqpMessage message) => AmqpMessageMapping.Decode(AmqpMessageMapping.Encode(message));
}
