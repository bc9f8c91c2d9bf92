using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Contracts.Tests;

/// <summary>
/// <see cref="StoredDeliveries"/>: the node's receive responses with each delivery's stored bytes
/// spliced in are, byte for byte, what the generated code writes for the same deliveries parsed, so
/// a client cannot tell them apart.
/// </summary>
public sealed class StoredDeliveriesTests
{
    private static readonly Message Small = new() { MessageId = "small", Body = ByteString.CopyFromUtf8("hi") };

    // A body past 16 KB: its length prefixes take three bytes at every level.
    private static readonly Message Large = new()
    {
        MessageId = "large",
        Body = ByteString.CopyFrom(Enumerable.Range(0, 20_000).Select(i => (byte)i).ToArray()),
        SessionId = "s",
        TimeToLive = Duration.FromTimeSpan(TimeSpan.FromMinutes(5)),
        ApplicationProperties = { ["k"] = new PropertyValue { StringValue = "v" }, ["n"] = new PropertyValue { LongValue = 42 } },
    };

    /// <summary>A delivery with every field of ReceivedMessage but its message set.</summary>
    private static ReceivedMessage Delivery(long sequence) => new()
    {
        SequenceNumber = sequence,
        EnqueuedTime = Timestamp.FromDateTimeOffset(new DateTimeOffset(2026, 12, 2, 8, 0, 0, TimeSpan.Zero)),
        DeliveryCount = 3,
        LockToken = Guid.NewGuid().ToString(),
        LockedUntil = Timestamp.FromDateTimeOffset(new DateTimeOffset(2026, 12, 2, 8, 1, 0, TimeSpan.Zero)),
        ExpiresAt = Timestamp.FromDateTimeOffset(new DateTimeOffset(2026, 12, 3, 8, 0, 0, TimeSpan.Zero)),
        State = MessageState.Active,
        DeadLetterReason = "reason",
        DeadLetterErrorDescription = "description",
        DeadLetterSource = "source",
    };

    private static ReceivedMessage Stored(Message message, long sequence) => StoredAs(message.ToByteArray(), sequence);

    private static ReceivedMessage StoredAs(byte[] payload, long sequence)
    {
        var delivery = Delivery(sequence);
        delivery.StoredMessage = payload;
        return delivery;
    }

    private static ReceivedMessage Parsed(ReceivedMessage stored)
    {
        var parsed = stored.Clone();
        parsed.Message = Message.Parser.ParseFrom(stored.StoredMessage);
        return parsed;
    }

    [Fact]
    public void TheDeliveryFieldsThisTestSets_AreAllThereAre()
    {
        // A field added to ReceivedMessage must be set in Delivery above, so the splice is checked with it.
        Assert.Equal(Enumerable.Range(1, 12), ReceivedMessage.Descriptor.Fields.InFieldNumberOrder().Select(f => f.FieldNumber));
    }

    [Fact]
    public void AReceiveResponseOfStoredDeliveries_IsWhatTheGeneratedCodeWritesForThemParsed()
    {
        var stored = new ReceiveResponse { Messages = { Stored(Small, 1), Stored(Large, 2), Stored(new Message(), 3) } };
        var parsed = new ReceiveResponse { Messages = { stored.Messages.Select(Parsed) } };

        var bytes = StoredDeliveries.ToBytes(stored);

        Assert.Equal(parsed.ToByteArray(), bytes);
        Assert.Equal(parsed.CalculateSize(), StoredDeliveries.SizeOf(stored));
        Assert.Equal(parsed, ReceiveResponse.Parser.ParseFrom(bytes));
        // Written as stored: nothing was parsed into the node's deliveries.
        Assert.All(stored.Messages, m => Assert.Null(m.Message));
    }

    [Fact]
    public void AResponseWithoutStoredDeliveries_IsWrittenByTheGeneratedCode()
    {
        var response = new ReceiveResponse { Messages = { Parsed(Stored(Large, 1)) } };
        var settled = new ReceiveResponse { Settled = new ReceiveSettled { Id = 3, AllSucceeded = 2 } };

        Assert.Equal(response.ToByteArray(), StoredDeliveries.ToBytes(response));
        Assert.Equal(settled.ToByteArray(), StoredDeliveries.ToBytes(settled));
    }

    [Fact]
    public void AResponseHoldingMoreThanDeliveries_HasItsStoredOnesParsed_AndReadsTheSame()
    {
        var stored = new ReceiveResponse { Messages = { Stored(Small, 1) }, Drained = true };
        var parsed = new ReceiveResponse { Messages = { Parsed(stored.Messages[0]) }, Drained = true };

        Assert.Equal(parsed.ToByteArray(), StoredDeliveries.ToBytes(stored));
    }

    [Fact]
    public void AReceiveSessionResponse_WithStoredParsedAndEndingLinks_IsWhatTheGeneratedCodeWrites()
    {
        var proxied = Parsed(Stored(Small, 7));
        var stored = new ReceiveSessionResponse
        {
            Links =
            {
                new LinkResponse { Link = 1, Response = new ReceiveResponse { Messages = { Stored(Small, 1), Stored(Large, 2) } } },
                // A proxied link's deliveries come parsed from their owner.
                new LinkResponse { Link = 300, Response = new ReceiveResponse { Messages = { proxied } } },
                new LinkResponse { Link = 5, Response = new ReceiveResponse { Drained = true } },
                new LinkResponse { Link = long.MaxValue, Ended = true, Failure = new CallFailure { StatusCode = 5, Detail = "gone" } },
                new LinkResponse { Response = new ReceiveResponse { Messages = { Stored(Large, 9) } } },
            },
        };
        var parsed = new ReceiveSessionResponse
        {
            Links = { stored.Links.Select(l => l.Response is { Messages.Count: > 0 } r
                ? new LinkResponse { Link = l.Link, Response = new ReceiveResponse { Messages = { r.Messages.Select(m => m.StoredMessage is null ? m : Parsed(m)) } } }
                : l) },
        };

        Assert.Equal(parsed.ToByteArray(), StoredDeliveries.ToBytes(stored));
        Assert.Equal(parsed.CalculateSize(), StoredDeliveries.SizeOf(stored));
        Assert.Equal(parsed.Links[0].CalculateSize(), StoredDeliveries.SizeOf(stored.Links[0]));
    }

    [Fact]
    public void AStoredPayloadDeliveredToSeveralLinks_GoesOnTheWireOnce_AfterTheSharedParsedOnes_AndReadsBackWhole()
    {
        // A topic's message to two subscriptions of one session: the same payload array. A proxied
        // link's message, parsed, delivered twice too.
        var topicPayload = Large.ToByteArray();
        var proxiedMessage = Small.Clone();
        var response = new ReceiveSessionResponse
        {
            Links =
            {
                new LinkResponse { Link = 1, Response = new ReceiveResponse { Messages = { StoredAs(topicPayload, 1), Stored(Small, 2) } } },
                new LinkResponse { Link = 2, Response = new ReceiveResponse { Messages = { StoredAs(topicPayload, 1) } } },
                new LinkResponse { Link = 3, Response = new ReceiveResponse { Messages = { WithMessage(proxiedMessage, 4) } } },
                new LinkResponse { Link = 4, Response = new ReceiveResponse { Messages = { WithMessage(proxiedMessage, 4) } } },
            },
        };
        var whole = ReceiveSessionResponse.Parser.ParseFrom(StoredDeliveries.ToBytes(response));

        var shared = SharedMessages.Share(response);
        var sharedBytes = StoredDeliveries.ToBytes(response);
        SharedMessages.Restore(response, shared!);

        var read = ReceiveSessionResponse.Parser.ParseFrom(sharedBytes);
        Assert.Equal(["small", "large"], read.SharedMessages.Select(m => m.MessageId));
        Assert.Equal([2, 0, 2, 1, 1], read.Links.SelectMany(l => l.Response.Messages).Select(m => m.SharedMessage));
        Assert.True(sharedBytes.Length < whole.CalculateSize() - 19_000, $"{sharedBytes.Length} bytes shared against {whole.CalculateSize()} whole");
        SharedMessages.Resolve(read);
        Assert.Equal(whole, read);
        // Restored as they were: the stored deliveries still stored, the proxied ones with their message.
        Assert.Equal(whole, ReceiveSessionResponse.Parser.ParseFrom(StoredDeliveries.ToBytes(response)));
        Assert.Same(topicPayload, response.Links[1].Response.Messages[0].StoredMessage);
        Assert.Same(proxiedMessage, response.Links[3].Response.Messages[0].Message);
    }

    private static ReceivedMessage WithMessage(Message message, long sequence)
    {
        var delivery = Delivery(sequence);
        delivery.Message = message;
        return delivery;
    }
}
