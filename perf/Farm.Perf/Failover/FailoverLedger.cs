using System.Globalization;
using Farm.Client;

namespace Farm.Perf.Failover;

/// <summary>
/// What every queue's sender and receiver record, to prove at the end that no acknowledged
/// message was lost: ids acknowledged, received and completed, over all queues (ids are unique
/// across the run). Failures are counted, not fatal: during a failover some are expected.
/// </summary>
internal sealed class FailoverLedger(TimeSpan lockDuration)
{
    private const int ErrorsPrinted = 3;

    /// <summary>Client and broker share the machine's clock; this covers rounding and scheduling.</summary>
    private static readonly TimeSpan ClockSlack = TimeSpan.FromMilliseconds(100);

    // The sequence number is kept with the time: the same id under another sequence number is a
    // second copy of the message (a send retried after a lost reply, on queues without duplicate
    // detection), which at-least-once sending allows; the same sequence number again is not.
    private readonly System.Collections.Concurrent.ConcurrentDictionary<long, (DateTimeOffset At, long Sequence)> _completedAt = new();

    // The sequence number each id was first delivered under: another one is a second stored copy,
    // whenever it comes (before or after the first copy's Complete).
    private readonly System.Collections.Concurrent.ConcurrentDictionary<long, long> _firstSequence = new();
    private readonly System.Collections.Concurrent.ConcurrentDictionary<long, byte> _storedTwiceIds = new();
    private long _completedTwice;
    private long _lockedAfterComplete;

    private long _nextId;
    private long _deliveries;
    private long _duplicates;
    private long _redeliveredAfterComplete;
    private long _foreign;
    private long _sendFailures;
    private long _receiveErrors;
    private long _completeErrors;

    public IdSet Acked { get; } = new();

    public IdSet Received { get; } = new();

    /// <summary>Ids whose Complete call succeeded.</summary>
    public IdSet Completed { get; } = new();

    public long Attempted => Interlocked.Read(ref _nextId);

    public long Deliveries => Interlocked.Read(ref _deliveries);

    /// <summary>Deliveries of an id received before (peek-lock is at-least-once: a failover may hand a locked message out again).</summary>
    public long Duplicates => Interlocked.Read(ref _duplicates);

    /// <summary>
    /// Deliveries handed to the application after the id's Complete had succeeded. Includes a
    /// redelivery the broker made before the Complete (a lock dropped by a failover) that was still
    /// in the client's prefetch buffer; see <see cref="LockedAfterComplete"/> for the strict count.
    /// </summary>
    public long RedeliveredAfterComplete => Interlocked.Read(ref _redeliveredAfterComplete);

    /// <summary>Deliveries whose lock the broker issued after it had acknowledged the message's Complete: must be 0.</summary>
    public long LockedAfterComplete => Interlocked.Read(ref _lockedAfterComplete);

    /// <summary>Ids the broker acknowledged a Complete for twice (two deliveries, both completed): must be 0.</summary>
    public long CompletedTwice => Interlocked.Read(ref _completedTwice);

    /// <summary>Ids delivered under two sequence numbers: sends stored twice (a retry after a lost reply the broker did not recognise).</summary>
    public long StoredTwice => _storedTwiceIds.Count;

    public long Foreign => Interlocked.Read(ref _foreign);

    /// <summary>Sends that failed after the SDK's own retries.</summary>
    public long SendFailures => Interlocked.Read(ref _sendFailures);

    public long ReceiveErrors => Interlocked.Read(ref _receiveErrors);

    public long CompleteErrors => Interlocked.Read(ref _completeErrors);

    public long NextId() => Interlocked.Increment(ref _nextId) - 1;

    public void OnReceived(FarmReceivedMessage message)
    {
        Interlocked.Increment(ref _deliveries);
        if (!long.TryParse(message.MessageId, NumberStyles.None, CultureInfo.InvariantCulture, out var id) || id >= Attempted)
        {
            Interlocked.Increment(ref _foreign);
            return;
        }

        if (_firstSequence.GetOrAdd(id, message.SequenceNumber) != message.SequenceNumber)
        {
            _storedTwiceIds.TryAdd(id, 0);
        }
        else if (_completedAt.TryGetValue(id, out var completed) && completed.Sequence == message.SequenceNumber)
        {
            var completedAt = completed.At;
            Interlocked.Increment(ref _redeliveredAfterComplete);
            var lockIssued = message.LockedUntil - lockDuration;
            if (lockIssued > completedAt + ClockSlack && Interlocked.Increment(ref _lockedAfterComplete) <= ErrorsPrinted)
            {
                Console.Error.WriteLine($"perf:   (message {id} (sequence {message.SequenceNumber}, delivery {message.DeliveryCount}) was locked again at {lockIssued:HH:mm:ss.fff}, after its Complete was acknowledged at {completedAt:HH:mm:ss.fff})");
            }
        }

        if (!Received.Add(id))
        {
            Interlocked.Increment(ref _duplicates);
        }
    }

    public void OnCompleted(FarmReceivedMessage message)
    {
        if (long.TryParse(message.MessageId, NumberStyles.None, CultureInfo.InvariantCulture, out var id))
        {
            Completed.Add(id);
            if (!_completedAt.TryAdd(id, (DateTimeOffset.UtcNow, message.SequenceNumber))
                && _completedAt[id].Sequence == message.SequenceNumber
                && Interlocked.Increment(ref _completedTwice) <= ErrorsPrinted)
            {
                Console.Error.WriteLine($"perf:   (message {id} (sequence {message.SequenceNumber}, delivery {message.DeliveryCount}) was completed a second time)");
            }
        }
    }

    public void OnSendFailed(string queue, Exception e) => Count(ref _sendFailures, "send", queue, e);

    public void OnReceiveError(string queue, Exception e) => Count(ref _receiveErrors, "receive", queue, e);

    public void OnCompleteError(string queue, Exception e) => Count(ref _completeErrors, "complete", queue, e);

    /// <summary>Acknowledged ids never received.</summary>
    public long CountLost()
    {
        long lost = 0;
        var attempted = Attempted;
        for (long id = 0; id < attempted; id++)
        {
            if (Acked.Contains(id) && !Received.Contains(id))
            {
                lost++;
            }
        }

        return lost;
    }

    /// <summary>Ids whose send failed (not acknowledged) but that were stored and delivered anyway.</summary>
    public long CountUnacknowledgedButDelivered()
    {
        long count = 0;
        var attempted = Attempted;
        for (long id = 0; id < attempted; id++)
        {
            if (!Acked.Contains(id) && Received.Contains(id))
            {
                count++;
            }
        }

        return count;
    }

    private static void Count(ref long counter, string what, string queue, Exception e)
    {
        // A few of each kind are printed; the counts go into the result.
        if (Interlocked.Increment(ref counter) <= ErrorsPrinted)
        {
            Console.Error.WriteLine($"perf:   ({what} on {queue} failed: {e.GetType().Name}: {e.Message})");
        }
    }
}
