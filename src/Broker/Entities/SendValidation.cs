using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Broker.Entities;

/// <summary>Checks a send's messages before anything is accepted, the same way for queues and topics.</summary>
internal static class SendValidation
{
    /// <summary>
    /// Each message's stored bytes. Throws MessageSizeExceeded for a message over the limit, and
    /// InvalidArgument for a TimeToLive of zero or less (Azure refuses it too; stored, it would mean
    /// "never expires", the opposite of what the sender asked).
    /// </summary>
    public static byte[][] Payloads(IReadOnlyList<Message> messages, BrokerOptions options)
    {
        var payloads = new byte[messages.Count][];
        for (var i = 0; i < messages.Count; i++)
        {
            if (messages[i].TimeToLive is { } ttl && ttl.ToTimeSpan() <= TimeSpan.Zero)
            {
                throw FarmErrors.Invalid($"Message {i}: TimeToLive must be positive; got {ttl.ToTimeSpan()}.");
            }
            payloads[i] = messages[i].ToByteArray();
            if (payloads[i].Length > options.MaxMessageSizeBytes)
            {
                throw FarmErrors.SizeExceeded(
                    $"Message {i} is {payloads[i].Length} bytes; the maximum message size is {options.MaxMessageSizeBytes} bytes ({options.MaxMessageSizeBytes / 1024} KB).");
            }
        }
        return payloads;
    }
}
