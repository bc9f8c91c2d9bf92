using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Broker.Entities;

/// <summary>A message's stored form (the payload column), both ways.</summary>
internal static class PayloadBytes
{
    /// <summary>
    /// The serialized message, written straight into an array of its size: ToByteArray wraps the
    /// array in a CodedOutputStream first, one more object per message sent.
    /// </summary>
    public static byte[] ToPayload(this IMessage message)
    {
        var payload = new byte[message.CalculateSize()];
        message.WriteTo(payload.AsSpan());
        return payload;
    }

    /// <summary>A fresh message parsed from a payload; from a span, as parsing a byte[] makes a CodedInputStream first.</summary>
    public static Message ToMessage(byte[] payload) => Message.Parser.ParseFrom(payload.AsSpan());
}
