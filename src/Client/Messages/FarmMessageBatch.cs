using Farm.Contracts.V1;

namespace Farm.Client;

public sealed record CreateMessageBatchOptions
{
    /// <summary>At most <see cref="FarmMessageLimits.MaxBatchSizeInBytes"/>; null means that limit.</summary>
    public long? MaxSizeInBytes { get; init; }
}

/// <summary>A set of messages sent atomically by one <see cref="FarmSender.SendMessagesAsync(FarmMessageBatch, CancellationToken)"/>.</summary>
public sealed class FarmMessageBatch : IDisposable
{
    private readonly List<Message> _messages = [];

    internal FarmMessageBatch(long maxSizeInBytes) => MaxSizeInBytes = maxSizeInBytes;

    public long MaxSizeInBytes { get; }

    /// <summary>The encoded size of the messages added so far.</summary>
    public long SizeInBytes { get; private set; }

    public int Count => _messages.Count;

    internal IReadOnlyList<Message> Messages => _messages;

    /// <summary>Adds the message when it fits; false when the batch is full or the message exceeds the per-message limit.</summary>
    public bool TryAddMessage(FarmMessage message)
    {
        var proto = MessageMapper.ToProto(message);
        var size = MessageMapper.EncodedSizeInRequest(proto);
        if (size > FarmMessageLimits.MaxMessageSizeInBytes
            || SizeInBytes + size > MaxSizeInBytes
            || _messages.Count >= FarmMessageLimits.MaxMessagesPerBatch)
        {
            return false;
        }

        _messages.Add(proto);
        SizeInBytes += size;
        return true;
    }

    public void Dispose() => _messages.Clear();
}
