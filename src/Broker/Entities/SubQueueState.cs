using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

/// <summary>
/// The messages of one sub-queue (the queue itself, or its dead-letter queue) that the broker keeps
/// in memory, by sequence number, and the ones a receiver may take now. A paged queue keeps only
/// its head: every active message with a sequence number above <see cref="Frontier"/> is in the
/// container database only (<see cref="StoredCount"/> of them), and every other message is here.
/// Guarded by the entity lock.
/// </summary>
internal sealed class SubQueueState(SubQueue kind, MessageCacheBudget nodeCache)
{
    /// <summary>The node's budget these messages count against; null once the entity was unloaded (its memory is going).</summary>
    private MessageCacheBudget? _nodeCache = nodeCache;

    public SubQueue Kind { get; } = kind;

    /// <summary>The highest sequence number read into memory in order; active messages after it are stored only.</summary>
    public long Frontier { get; set; }

    /// <summary>Active messages only in the database (all above <see cref="Frontier"/>), and their bytes.</summary>
    public long StoredCount { get; set; }

    public long StoredBytes { get; set; }

    /// <summary>
    /// Taken over with a tail not counted yet (the count runs while the queue serves): stored
    /// messages may follow the frontier though <see cref="StoredCount"/> does not show them yet.
    /// </summary>
    public bool TailPending { get; set; }

    /// <summary>
    /// While <see cref="TailPending"/>: the tail is counted in order, a chunk at a time, and the
    /// stored messages in (<see cref="CountedThrough"/>, <see cref="PendingThrough"/>] are not in
    /// <see cref="StoredCount"/> yet (the sequence numbers handed out before the load).
    /// </summary>
    public long CountedThrough { get; set; }

    public long PendingThrough { get; set; }

    /// <summary>
    /// Messages peek-lock receivers waiting on this sub-queue right now would take at once (the sum
    /// of what each asked for): a send may store that many already counted as delivered.
    /// </summary>
    public int WaitingPeekLockCredit { get; set; }

    /// <summary>
    /// The entity's durable delivery mark (the main queue's; 0 on the dead-letter queue, which has
    /// none): every message at or below it that was never scheduled was delivered at least once, so
    /// a row read back from the database with a count of 0 there reads as 1
    /// (<see cref="MessageRecord.DeliveryCountUnder"/>). Raised once a receive's mark committed.
    /// </summary>
    public long DeliveredThrough { get; set; }

    /// <summary>
    /// Whether a stored-only message with this sequence number is one <see cref="StoredCount"/>
    /// holds: not in the part of a taken-over tail still to count (that count will find it).
    /// </summary>
    public bool IsCounted(long sequence) => !TailPending || sequence <= CountedThrough || sequence > PendingThrough;

    /// <summary>Counts a message as stored only (in the database, after the frontier), unless the tail count will.</summary>
    public void CountStored(long sequence, long bytes)
    {
        if (IsCounted(sequence))
        {
            StoredCount++;
            StoredBytes += bytes;
        }
    }

    /// <summary>A stored-only message came into memory or left the database: off the count, if it was on it.</summary>
    public void UncountStored(long sequence, long bytes)
    {
        if (IsCounted(sequence))
        {
            StoredCount--;
            StoredBytes -= bytes;
        }
    }

    /// <summary>A read-back of stored messages is queued or running.</summary>
    public bool Refilling { get; set; }

    /// <summary>The signal <see cref="WhenArrived"/> handed out, made only when asked for: stream receivers wait on <see cref="ReceiveWaiter"/>s instead.</summary>
    private TaskCompletionSource? _arrived;

    /// <summary>Guards the list of registered <see cref="ReceiveWaiter"/>s (woken outside the entity lock).</summary>
    private readonly object _waitersGate = new();

    private ReceiveWaiter? _firstWaiter;

    public Dictionary<long, StoredMessage> Messages { get; } = [];

    /// <summary>All sequence numbers, for peek.</summary>
    public SortedSet<long> Ordered { get; } = [];

    /// <summary>Active, unlocked, visible messages: what a receive takes next, lowest first.</summary>
    public SortedSet<long> Available { get; } = [];

    /// <summary>Bytes of the messages in memory.</summary>
    public long SizeInBytes { get; private set; }

    public void Add(StoredMessage message)
    {
        Messages[message.SequenceNumber] = message;
        Ordered.Add(message.SequenceNumber);
        Resize(message.PayloadSize);
    }

    public void Remove(StoredMessage message)
    {
        if (Messages.Remove(message.SequenceNumber))
        {
            Ordered.Remove(message.SequenceNumber);
            Available.Remove(message.SequenceNumber);
            Resize(-message.PayloadSize);
        }
    }

    /// <summary>A message in memory grew or shrank by <paramref name="bytes"/> (a settlement replaced its payload).</summary>
    public void Resize(long bytes)
    {
        SizeInBytes += bytes;
        _nodeCache?.Add(bytes);
    }

    /// <summary>The entity is unloaded: its messages no longer count against the node's budget.</summary>
    public void Detach()
    {
        _nodeCache?.Add(-SizeInBytes);
        _nodeCache = null;
    }

    /// <summary>A task that completes the next time messages become available.</summary>
    public Task WhenArrived
    {
        get
        {
            var signal = Volatile.Read(ref _arrived);
            if (signal is null)
            {
                var made = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                signal = Interlocked.CompareExchange(ref _arrived, made, null) ?? made;
            }
            return signal.Task;
        }
    }

    /// <summary>Wakes every waiting receiver; they race for what is there.</summary>
    public void SignalArrived()
    {
        Interlocked.Exchange(ref _arrived, null)?.TrySetResult();
        lock (_waitersGate)
        {
            var waiter = _firstWaiter;
            _firstWaiter = null;
            while (waiter is not null)
            {
                var next = waiter.Next;
                Unlink(waiter);
                waiter.Wake();
                waiter = next;
            }
        }
    }

    /// <summary>Registers a waiter armed for its next wait: an arrival from now on wakes it.</summary>
    public void Register(ReceiveWaiter waiter)
    {
        lock (_waitersGate)
        {
            if (waiter.RegisteredWith is not null)
            {
                throw new InvalidOperationException("A receive waiter is registered with one sub-queue at a time.");
            }
            waiter.RegisteredWith = this;
            waiter.Next = _firstWaiter;
            if (_firstWaiter is not null)
            {
                _firstWaiter.Previous = waiter;
            }
            _firstWaiter = waiter;
        }
    }

    /// <summary>Takes a waiter off the list, if an arrival did not already.</summary>
    public void Unregister(ReceiveWaiter waiter)
    {
        lock (_waitersGate)
        {
            if (waiter.RegisteredWith == this)
            {
                if (waiter.Previous is null)
                {
                    _firstWaiter = waiter.Next;
                }
                else
                {
                    waiter.Previous.Next = waiter.Next;
                }
                if (waiter.Next is not null)
                {
                    waiter.Next.Previous = waiter.Previous;
                }
                Unlink(waiter);
            }
        }
    }

    /// <summary>The sweep's part: wakes the waiters whose deadline passed (they return empty and look again).</summary>
    public void WakeExpired(long nowMs)
    {
        lock (_waitersGate)
        {
            var waiter = _firstWaiter;
            while (waiter is not null)
            {
                var next = waiter.Next;
                if (waiter.DeadlineMs <= nowMs)
                {
                    Unregister(waiter);
                    waiter.Wake();
                }
                waiter = next;
            }
        }
    }

    /// <summary>Registered receive waiters (for tests).</summary>
    public int WaiterCount
    {
        get
        {
            lock (_waitersGate)
            {
                var count = 0;
                for (var waiter = _firstWaiter; waiter is not null; waiter = waiter.Next)
                {
                    count++;
                }
                return count;
            }
        }
    }

    private static void Unlink(ReceiveWaiter waiter)
    {
        waiter.RegisteredWith = null;
        waiter.Previous = null;
        waiter.Next = null;
    }
}
