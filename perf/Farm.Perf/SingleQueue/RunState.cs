using System.Diagnostics;
using System.Globalization;
using Farm.Client;

namespace Farm.Perf.SingleQueue;

/// <summary>
/// What senders and receivers share during a run: message ids handed out, acknowledged and
/// received (to prove exactly-once delivery at the end), the latency histogram, the measured
/// window and error counts.
/// </summary>
internal sealed class RunState
{
    /// <summary>The application property carrying the sender's Stopwatch timestamp.</summary>
    public const string SentAtProperty = "perf-sent-at";

    private const int ErrorsPrinted = 5;

    private long _nextId;
    private long _receivedTotal;
    private long _duplicates;
    private long _foreign;
    private long _sendErrors;
    private long _settleErrors;
    private long _receiveErrors;
    private long _windowStart;
    private long _windowEnd;

    public IdSet Acked { get; } = new();

    public IdSet Received { get; } = new();

    public LatencyHistogram Latency { get; } = new();

    /// <summary>Ids handed out so far: every id below this was attempted.</summary>
    public long Attempted => Interlocked.Read(ref _nextId);

    /// <summary>Deliveries, counting duplicates.</summary>
    public long ReceivedTotal => Interlocked.Read(ref _receivedTotal);

    public long Duplicates => Interlocked.Read(ref _duplicates);

    /// <summary>Messages received that this run never sent (or without a readable id).</summary>
    public long Foreign => Interlocked.Read(ref _foreign);

    public long SendErrors => Interlocked.Read(ref _sendErrors);

    public long SettleErrors => Interlocked.Read(ref _settleErrors);

    public long ReceiveErrors => Interlocked.Read(ref _receiveErrors);

    /// <summary>Reserves <paramref name="count"/> consecutive ids; returns the first.</summary>
    public long ReserveIds(int count) => Interlocked.Add(ref _nextId, count) - count;

    public void StartWindow() => Interlocked.Exchange(ref _windowStart, Stopwatch.GetTimestamp());

    public void EndWindow() => Interlocked.Exchange(ref _windowEnd, Stopwatch.GetTimestamp());

    public void OnAcked(long firstId, int count)
    {
        for (var id = firstId; id < firstId + count; id++)
        {
            Acked.Add(id);
        }
    }

    /// <summary>Records a delivery: its id (duplicates show here) and, inside the window, its latency.</summary>
    public void OnReceived(FarmReceivedMessage message)
    {
        var now = Stopwatch.GetTimestamp();
        Interlocked.Increment(ref _receivedTotal);
        if (!long.TryParse(message.MessageId, NumberStyles.None, CultureInfo.InvariantCulture, out var id) || id >= Attempted)
        {
            Interlocked.Increment(ref _foreign);
            return;
        }

        if (!Received.Add(id))
        {
            Interlocked.Increment(ref _duplicates);
        }

        var start = Interlocked.Read(ref _windowStart);
        var end = Interlocked.Read(ref _windowEnd);
        if (start != 0 && now >= start && (end == 0 || now < end)
            && message.ApplicationProperties.TryGetValue(SentAtProperty, out var value) && value is long sentAt)
        {
            Latency.Record((long)Stopwatch.GetElapsedTime(sentAt, now).TotalMicroseconds);
        }
    }

    public void OnSendError(Exception e) => Report(ref _sendErrors, "send", e);

    public void OnSettleError(Exception e) => Report(ref _settleErrors, "complete", e);

    public void OnReceiveError(Exception e) => Report(ref _receiveErrors, "receive", e);

    private static void Report(ref long counter, string what, Exception e)
    {
        // The first few of each kind are printed; the counts go into the result either way.
        if (Interlocked.Increment(ref counter) <= ErrorsPrinted)
        {
            Console.Error.WriteLine($"perf: {what} failed: {e.GetType().Name}: {e.Message}");
        }
    }
}
