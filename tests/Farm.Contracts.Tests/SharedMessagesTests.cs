using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Contracts.Tests;

/// <summary>
/// <see cref="SharedMessages"/>: a receive session's response carries a message delivered to several
/// links once, and the client's read of it gives every delivery the same message as a response
/// without sharing would.
/// </summary>
public sealed class SharedMessagesTests
{
    private static ReceivedMessage Delivery(Message message, long sequence) =>
        new() { Message = message, SequenceNumber = sequence, LockToken = Guid.NewGuid().ToString(), DeliveryCount = 1 };

    private static ReceiveSessionResponse ResponseOf(params ReceivedMessage[][] links) =>
        new() { Links = { links.Select((messages, i) => new LinkResponse { Link = i + 1, Response = new ReceiveResponse { Messages = { messages } } }) } };

    [Fact]
    public void ASharedResponse_ReadsBackAsTheWholeOne_InFewerBytes()
    {
        var a = new Message { Body = ByteString.CopyFrom(new byte[1000]), MessageId = "a", ApplicationProperties = { ["k"] = new PropertyValue { StringValue = "v" } } };
        var b = new Message { Body = ByteString.CopyFromUtf8("b"), MessageId = "b" };
        var alone = new Message { MessageId = "alone" };
        var response = ResponseOf([Delivery(a, 1), Delivery(b, 2)], [Delivery(a, 1)], [Delivery(a, 1), Delivery(b, 2), Delivery(alone, 3)], []);
        var whole = response.ToByteArray();

        var shared = SharedMessages.Share(response);
        var sharedBytes = response.ToByteArray();
        SharedMessages.Restore(response, shared!);

        Assert.Equal(whole, response.ToByteArray());
        Assert.True(sharedBytes.Length < whole.Length - 1900, $"{sharedBytes.Length} bytes shared against {whole.Length} whole");
        var read = ReceiveSessionResponse.Parser.ParseFrom(sharedBytes);
        Assert.Equal(["a", "b"], read.SharedMessages.Select(m => m.MessageId));
        SharedMessages.Resolve(read);
        Assert.Equal(ReceiveSessionResponse.Parser.ParseFrom(whole), read);
        // One object per shared message: the deliveries of `a` hold the same one.
        Assert.Same(read.Links[0].Response.Messages[0].Message, read.Links[1].Response.Messages[0].Message);
    }

    [Fact]
    public void AResponseWithoutARepeatedMessage_IsLeftAsItIs()
    {
        var response = ResponseOf([Delivery(new Message { MessageId = "x" }, 1)], [Delivery(new Message { MessageId = "x" }, 1)]);
        var whole = response.ToByteArray();

        Assert.Null(SharedMessages.Share(response));
        Assert.Equal(whole, response.ToByteArray());
    }

    [Theory]
    [InlineData(2)]
    [InlineData(-1)]
    public void ADeliveryNamingASharedMessageTheResponseLacks_IsRefused(int position)
    {
        var response = ResponseOf([new ReceivedMessage { SequenceNumber = 1, SharedMessage = position }]);
        response.SharedMessages.Add(new Message { MessageId = "only" });

        var error = Assert.Throws<InvalidDataException>(() => SharedMessages.Resolve(response));

        Assert.Contains($"shared message {position}", error.Message);
    }
}
