using System.Diagnostics;
using System.Globalization;
using Farm.Client;
using Farm.Perf.Load;

namespace Farm.Perf.ManyQueues;

/// <summary>
/// Sender clients, each covering every <c>senders</c>-th queue, sending one message per call to
/// each of its queues <c>rate</c> times a second, the sends spread evenly over the second (send k
/// of a sender is due at k / (its queues x rate) s, the senders offset from each other). Sends are
/// not awaited one by one; up to a few thousand per client are in flight. A sender that falls more
/// than a second behind its schedule drops the missed slots and counts them.
/// </summary>
internal sealed class PacedSenders(string connectionString, IReadOnlyList<string> queues, int senders, double rate, int size, RunState state)
{
    private const int MaxSendsInFlight = 4000;

    private static readonly TimeSpan MaxBehind = TimeSpan.FromSeconds(1);

    private readonly ReadOnlyMemory<byte> _body = new byte[size];
    private long _behindSchedule;

    /// <summary>Send slots dropped because the sender was more than a second late.</summary>
    public long BehindSchedule => Interlocked.Read(ref _behindSchedule);

    public Task RunAsync(CancellationToken stop)
        => Task.WhenAll(Enumerable.Range(0, senders).Select(s => Task.Run(() => SendLoopAsync(s, stop), CancellationToken.None)));

    private async Task SendLoopAsync(int index, CancellationToken stop)
    {
        var slice = queues.Where((_, i) => i % senders == index).ToList();
        if (slice.Count == 0)
        {
            return;
        }

        await using var client = new FarmClient(connectionString);
        var targets = slice.Select(client.CreateSender).ToList();
        using var slots = new SemaphoreSlim(MaxSendsInFlight, MaxSendsInFlight);
        var ticksPerSend = Stopwatch.Frequency / (slice.Count * rate);
        var start = Stopwatch.GetTimestamp() + (long)(ticksPerSend * index / senders);
        var maxBehindTicks = (long)(MaxBehind.TotalSeconds * Stopwatch.Frequency);
        long k = 0;
        try
        {
            while (!stop.IsCancellationRequested)
            {
                var due = start + (long)(k * ticksPerSend);
                var now = Stopwatch.GetTimestamp();
                if (due - now > Stopwatch.Frequency / 1000)
                {
                    await Task.Delay(TimeSpan.FromSeconds((double)(due - now) / Stopwatch.Frequency), stop).ConfigureAwait(false);
                    continue;
                }

                if (now - due > maxBehindTicks)
                {
                    var skipped = (long)((now - due) / ticksPerSend);
                    Interlocked.Add(ref _behindSchedule, skipped);
                    k += skipped;
                    continue;
                }

                await slots.WaitAsync(stop).ConfigureAwait(false);
                _ = SendOneAsync(targets[(int)(k % targets.Count)], slots);
                k++;
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // Stopping: the sends in flight are awaited below, so every id's fate is known.
        }

        for (var i = 0; i < MaxSendsInFlight; i++)
        {
            await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        }
    }

    private async Task SendOneAsync(FarmSender sender, SemaphoreSlim slots)
    {
        var id = state.ReserveIds(1);
        try
        {
            var message = new FarmMessage(_body) { MessageId = id.ToString(CultureInfo.InvariantCulture) };
            message.ApplicationProperties[RunState.SentAtProperty] = Stopwatch.GetTimestamp();
            state.OnSending(id, 1);
            try
            {
                await sender.SendMessageAsync(message, CancellationToken.None).ConfigureAwait(false);
                state.OnAcked(id, 1);
            }
            catch (FarmException e)
            {
                state.OnSendFailed(id, 1);
                state.OnSendError(e);
            }
        }
        finally
        {
            slots.Release();
        }
    }
}
