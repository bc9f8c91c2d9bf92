using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Tests;

/// <summary>
/// Messages that carry their number in their body, for the tests of order and exactly-once
/// delivery through a message cache of a few messages (issue "Bounded memory").
/// </summary>
internal static class NumberedMessages
{
    public const int BodyBytes = 100;

    /// <summary>A message's bytes as the broker counts them (the body and its framing).</summary>
    public const int MessageBytes = BodyBytes + 40;

    /// <summary>Gives every entity of the harness's next node a cache of about five messages, read back seven at a time.</summary>
    public static void UseCacheOfFive(BrokerHarness farm)
    {
        farm.Options.MessageCacheSizePerEntity = 5 * MessageBytes;
        farm.Options.MaxMessagesPerRefill = 7;
    }

    public static Message Numbered(int i, DateTimeOffset? scheduledAt = null)
    {
        var message = new Message
        {
            MessageId = $"m-{i}",
            Body = ByteString.CopyFromUtf8(i.ToString("D6", System.Globalization.CultureInfo.InvariantCulture).PadRight(BodyBytes, '.')),
        };
        if (scheduledAt is { } at)
        {
            message.ScheduledEnqueueTime = Timestamp.FromDateTimeOffset(at);
        }
        return message;
    }

    public static int NumberOf(ReceivedMessage m) => int.Parse(m.Message.Body.ToStringUtf8()[..6], System.Globalization.CultureInfo.InvariantCulture);
}
