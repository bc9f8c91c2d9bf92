using Google.Protobuf;

namespace Farm.Broker.Entities;

/// <summary>A message's stored form (the payload column).</summary>
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
}
