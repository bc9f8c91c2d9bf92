namespace Farm.Broker.Entities;

/// <summary>
/// The messages of one sub-queue (the queue itself, or its dead-letter queue): every committed
/// message by sequence number, and the ones a receiver may take now. Guarded by the entity lock.
/// </summary>
internal sealed class SubQueueState
{
    private TaskCompletionSource _arrived = NewSignal();

    public Dictionary<long, StoredMessage> Messages { get; } = [];

    /// <summary>All sequence numbers, for peek.</summary>
    public SortedSet<long> Ordered { get; } = [];

    /// <summary>Active, unlocked, visible messages: what a receive takes next, lowest first.</summary>
    public SortedSet<long> Available { get; } = [];

    public long SizeInBytes { get; set; }

    public void Add(StoredMessage message)
    {
        Messages[message.SequenceNumber] = message;
        Ordered.Add(message.SequenceNumber);
        SizeInBytes += message.PayloadSize;
    }

    public void Remove(StoredMessage message)
    {
        if (Messages.Remove(message.SequenceNumber))
        {
            Ordered.Remove(message.SequenceNumber);
            Available.Remove(message.SequenceNumber);
            SizeInBytes -= message.PayloadSize;
        }
    }

    /// <summary>A task that completes the next time messages become available.</summary>
    public Task WhenArrived => _arrived.Task;

    /// <summary>Wakes every waiting receiver; they race for what is there.</summary>
    public void SignalArrived()
    {
        var previous = Interlocked.Exchange(ref _arrived, NewSignal());
        previous.TrySetResult();
    }

    private static TaskCompletionSource NewSignal() => new(TaskCreationOptions.RunContinuationsAsynchronously);
}
