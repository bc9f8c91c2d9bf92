using System.Diagnostics;
using System.Globalization;
using Farm.Client;

namespace Farm.Perf.Load;

/// <summary>
/// Where each message should end up: in every one of <see cref="Count"/> subscriptions, or in those
/// <see cref="Matches"/> selects (the load generator's own copy of the subscriptions' filters, so
/// the run can check the broker's choice). A queue is a fan-out of one.
/// </summary>
internal sealed record Fanout(int Count, Func<long, int, bool>? Matches = null)
{
    public static readonly Fanout Queue = new(1);

    public bool Expects(long id, int subscription) => Matches is null || Matches(id, subscription);

    /// <summary>How many subscriptions message <paramref name="id"/> should reach.</summary>
    public int CountFor(long id)
    {
        if (Matches is null)
        {
            return Count;
        }

        var count = 0;
        for (var s = 0; s < Count; s++)
        {
            count += Matches(id, s) ? 1 : 0;
        }

        return count;
    }
}

/// <summary>
/// What senders and receivers share during a run: message ids handed out and acknowledged, the
/// deliveries received (one per message and subscription, to prove exactly-once delivery per
/// subscription at the end), the latency histogram, the measured window and error counts. For a
/// queue the fan-out is one and a delivery is a message.
/// </summary>
internal sealed class RunState
{
    /// <summary>The application property carrying the sender's Stopwatch timestamp.</summary>
    public const string SentAtProperty = "perf-sent-at";

    private const int ErrorsPrinted = 5;

    private readonly long[]? _lastSequence;
    private long _nextId;
    private long _expectedDeliveries;
    private long _owedDeliveries;
    private long _receivedTotal;
    private long _duplicates;
    private long _duplicatesRedelivered;
    private long _duplicatesPrinted;
    private long _foreign;
    private long _unexpected;
    private long _outOfOrder;
    private long _sendErrors;
    private long _sendsRefusedBusy;
    private long _receivesRefusedBusy;
    private long _settleErrors;
    private long _receiveErrors;
    private int _inWindow;

    /// <param name="fanout">Which subscriptions each message should reach (a queue: <see cref="Fanout.Queue"/>).</param>
    /// <param name="trackOrder">
    /// Count deliveries that arrive after a higher sequence number of the same subscription. Only
    /// meaningful with one receiver per subscription.
    /// </param>
    public RunState(Fanout? fanout = null, bool trackOrder = false)
    {
        Fanout = fanout ?? Fanout.Queue;
        if (trackOrder)
        {
            _lastSequence = new long[Fanout.Count];
        }
    }

    public Fanout Fanout { get; }

    public bool TracksOrder => _lastSequence is not null;

    /// <summary>Acknowledged message ids.</summary>
    public IdSet Acked { get; } = new();

    /// <summary>Deliveries received, by <see cref="DeliveryKey"/> (for a queue: the message id).</summary>
    public IdSet Received { get; } = new();

    public LatencyHistogram Latency { get; } = new();

    /// <summary>Ids handed out so far: every id below this was attempted.</summary>
    public long Attempted => Interlocked.Read(ref _nextId);

    /// <summary>Deliveries the acknowledged messages should make (each to every subscription it matches).</summary>
    public long ExpectedDeliveries => Interlocked.Read(ref _expectedDeliveries);

    /// <summary>
    /// Deliveries owed by the messages sent so far (acknowledged or still on their way: a topic
    /// starts delivering before the sender hears back) that were not received yet.
    /// </summary>
    public long Backlog => Interlocked.Read(ref _owedDeliveries) - Received.Count;

    /// <summary>Deliveries, counting duplicates.</summary>
    public long ReceivedTotal => Interlocked.Read(ref _receivedTotal);

    public long Duplicates => Interlocked.Read(ref _duplicates);

    /// <summary>
    /// Of <see cref="Duplicates"/>, those whose later delivery had a delivery count above 1: the
    /// broker gave the same message again (a lock released or run out). The others were stored
    /// twice (a send repeated) or handed out twice in one delivery, which tells where to look.
    /// </summary>
    public long DuplicatesRedelivered => Interlocked.Read(ref _duplicatesRedelivered);

    /// <summary>Messages received that this run never sent (or without a readable id).</summary>
    public long Foreign => Interlocked.Read(ref _foreign);

    /// <summary>Deliveries to a subscription whose filter should not have selected the message.</summary>
    public long Unexpected => Interlocked.Read(ref _unexpected);

    /// <summary>Deliveries that came after a higher sequence number of the same subscription (when tracked).</summary>
    public long OutOfOrder => Interlocked.Read(ref _outOfOrder);

    public long SendErrors => Interlocked.Read(ref _sendErrors);

    public long SettleErrors => Interlocked.Read(ref _settleErrors);

    public long ReceiveErrors => Interlocked.Read(ref _receiveErrors);

    public long DeliveryKey(long id, int subscription) => (id * Fanout.Count) + subscription;

    /// <summary>Reserves <paramref name="count"/> consecutive ids; returns the first.</summary>
    public long ReserveIds(int count) => Interlocked.Add(ref _nextId, count) - count;

    /// <summary>From now on, latencies are recorded (a run may measure several windows).</summary>
    public void StartWindow() => Volatile.Write(ref _inWindow, 1);

    public void EndWindow() => Volatile.Write(ref _inWindow, 0);

    /// <summary>A send of these ids is about to start: their deliveries count towards <see cref="Backlog"/>.</summary>
    public void OnSending(long firstId, int count) => Interlocked.Add(ref _owedDeliveries, DeliveriesOf(firstId, count));

    /// <summary>A send failed: its deliveries are no longer counted as owed (if it was stored after all, the check tells).</summary>
    public void OnSendFailed(long firstId, int count) => Interlocked.Add(ref _owedDeliveries, -DeliveriesOf(firstId, count));

    private long DeliveriesOf(long firstId, int count)
    {
        long deliveries = 0;
        for (var id = firstId; id < firstId + count; id++)
        {
            deliveries += Fanout.CountFor(id);
        }

        return deliveries;
    }

    public void OnAcked(long firstId, int count)
    {
        for (var id = firstId; id < firstId + count; id++)
        {
            Acked.Add(id);
        }

        Interlocked.Add(ref _expectedDeliveries, DeliveriesOf(firstId, count));
    }

    /// <summary>
    /// Records a delivery to <paramref name="subscription"/>: its id (duplicates show here), whether
    /// the subscription should have had it, its order and, inside the window, its latency.
    /// </summary>
    public void OnReceived(FarmReceivedMessage message, int subscription = 0)
    {
        var now = Stopwatch.GetTimestamp();
        var sentAt = message.ApplicationProperties.TryGetValue(SentAtProperty, out var value) && value is long stamp ? stamp : (long?)null;
        OnDelivered(message.MessageId, sentAt, now, subscription, message.SequenceNumber, message.DeliveryCount);
    }

    /// <summary>
    /// Records a delivery that did not come through Farm's SDK (a peer broker's): its message id and
    /// the sender's <see cref="Stopwatch"/> timestamp, when it carried one.
    /// </summary>
    public void OnDelivered(string? messageId, long? sentAt)
        => OnDelivered(messageId, sentAt, Stopwatch.GetTimestamp(), subscription: 0, sequenceNumber: 0, deliveryCount: 0);

    private void OnDelivered(string? messageId, long? sentAt, long now, int subscription, long sequenceNumber, int deliveryCount)
    {
        Interlocked.Increment(ref _receivedTotal);
        if (!long.TryParse(messageId, NumberStyles.None, CultureInfo.InvariantCulture, out var id) || id >= Attempted)
        {
            Interlocked.Increment(ref _foreign);
            return;
        }

        if (!Fanout.Expects(id, subscription))
        {
            Interlocked.Increment(ref _unexpected);
        }

        if (!Received.Add(DeliveryKey(id, subscription)))
        {
            Interlocked.Increment(ref _duplicates);
            if (deliveryCount > 1)
            {
                Interlocked.Increment(ref _duplicatesRedelivered);
            }
            if (Interlocked.Increment(ref _duplicatesPrinted) <= ErrorsPrinted)
            {
                var age = sentAt is { } sent ? $"{Stopwatch.GetElapsedTime(sent, now).TotalMilliseconds:0} ms after it was sent" : "no send time";
                Console.Error.WriteLine($"perf: message {id} delivered again: sequence {sequenceNumber}, delivery count {deliveryCount}, {age}");
            }
        }
        else if (_lastSequence is not null)
        {
            // One receiver per subscription: its deliveries come one batch after the other.
            ref var last = ref _lastSequence[subscription];
            var before = Interlocked.Read(ref last);
            if (sequenceNumber < before)
            {
                Interlocked.Increment(ref _outOfOrder);
            }
            else
            {
                Interlocked.CompareExchange(ref last, sequenceNumber, before);
            }
        }

        if (Volatile.Read(ref _inWindow) != 0 && sentAt is { } stamp)
        {
            Latency.Record((long)Stopwatch.GetElapsedTime(stamp, now).TotalMicroseconds);
        }
    }

    /// <summary>
    /// A send that failed. One an overloaded farm refused (SERVICE_BUSY as RESOURCE_EXHAUSTED, after
    /// the SDK's retries) is counted apart: nothing was stored and the sender was told so, which is
    /// how a broker sheds load, not a delivery problem. Any other failure is an error.
    /// </summary>
    public void OnSendError(Exception e) => ReportFailure(ref _sendErrors, ref _sendsRefusedBusy, "send", e);

    /// <summary>Sends an overloaded farm refused (see <see cref="OnSendError"/>).</summary>
    public long SendsRefusedBusy => Interlocked.Read(ref _sendsRefusedBusy);

    private static bool IsOverloadRefusal(Exception e) =>
        e is FarmException { Reason: FarmFailureReason.ServiceBusy, InnerException: Grpc.Core.RpcException { StatusCode: Grpc.Core.StatusCode.ResourceExhausted } };

    public void OnSettleError(Exception e) => Report(ref _settleErrors, "complete", e);

    /// <summary>A receive that failed; one an overloaded farm refused (a new receive link, SERVICE_BUSY) is counted apart, as for sends.</summary>
    public void OnReceiveError(Exception e) => ReportFailure(ref _receiveErrors, ref _receivesRefusedBusy, "receive", e);

    /// <summary>Receive links an overloaded farm refused, surfaced after the SDK's retries (see <see cref="OnReceiveError"/>).</summary>
    public long ReceivesRefusedBusy => Interlocked.Read(ref _receivesRefusedBusy);

    /// <summary>Counts a failure as an error, or apart when an overloaded farm refused it.</summary>
    private static void ReportFailure(ref long errors, ref long refused, string what, Exception e)
    {
        if (IsOverloadRefusal(e))
        {
            Report(ref refused, what + " refused (overloaded)", e);
        }
        else
        {
            Report(ref errors, what, e);
        }
    }

    private static void Report(ref long counter, string what, Exception e)
    {
        // The first few of each kind are printed; the counts go into the result either way.
        if (Interlocked.Increment(ref counter) <= ErrorsPrinted)
        {
            Console.Error.WriteLine($"perf: {what} failed: {e.GetType().Name}: {e.Message}");
        }
    }
}
