using Google.Protobuf;

namespace Farm.Contracts.V1;

/// <summary>
/// A delivery whose <c>message</c> field a receiving client kept as bytes (see the client's
/// <c>DeferredDeliveryParsing</c>): a message waiting in a prefetch buffer is then one byte array,
/// not the graph of objects a parsed <see cref="Message"/> is (its body, property map, strings),
/// which the garbage collector traces and promotes for as long as the message waits.
/// </summary>
public sealed partial class ReceivedMessage
{
    /// <summary>The serialized <c>message</c> field, not parsed yet; null once parsed or when it came parsed.</summary>
    internal byte[]? UnparsedMessage { get; set; }

    /// <summary>
    /// The message, parsed from <see cref="UnparsedMessage"/> on first use. Like protobuf's own
    /// parse, a <c>message</c> field sent twice merges (the bytes are kept together).
    /// </summary>
    internal Message ParsedMessage()
    {
        if (UnparsedMessage is { } bytes)
        {
            Message = Message.Parser.ParseFrom(bytes);
            UnparsedMessage = null;
        }
        return Message ??= new Message();
    }
}
