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
            payloads[i] = messages[i].ToPayload();
            if (payloads[i].Length > options.MaxMessageSizeBytes)
            {
                throw FarmErrors.SizeExceeded(
                    $"Message {i} is {payloads[i].Length} bytes; the maximum message size is {options.MaxMessageSizeBytes} bytes ({options.MaxMessageSizeBytes / 1024} KB).");
            }
        }
        return payloads;
    }

    /// <summary>
    /// Refuses a send of <paramref name="total"/> bytes, storing nothing, when its container already
    /// has more sends waiting for the disk than allowed (SERVICE_BUSY, transient), or when the entity
    /// holding <paramref name="held"/> bytes (with its sends in flight) would pass MaxSizeInMegabytes
    /// (QUOTA_EXCEEDED).
    /// </summary>
    public static void EnsureRoom(string kind, string name, long held, long total, long maxSizeInMegabytes, Containers.CommitQueue commits, BrokerOptions options)
    {
        if (commits.WaitingBytes + total > options.MaxWaitingCommitBytes)
        {
            throw FarmErrors.Busy(
                $"The container of '{name}' has {commits.WaitingBytes} bytes of sends waiting to be written (the limit is {options.MaxWaitingCommitBytes}); nothing was stored, try again.");
        }
        if (held + total > maxSizeInMegabytes * 1024 * 1024)
        {
            throw FarmErrors.QuotaExceeded(
                $"The {kind} '{name}' is full: it holds {held} bytes (with sends in flight), this send adds {total}, and its MaxSizeInMegabytes is {maxSizeInMegabytes}. Nothing was stored.");
        }
    }
}
