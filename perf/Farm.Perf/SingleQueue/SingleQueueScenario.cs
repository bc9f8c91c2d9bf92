using System.Diagnostics;
using Farm.Client;

namespace Farm.Perf.SingleQueue;

/// <summary>
/// One queue, concurrent senders and peek-lock receivers: a warm-up, the measured window, then a
/// drain in which senders stop and receivers take what is left, so the run can prove every
/// acknowledged message was received exactly once.
/// </summary>
internal sealed class SingleQueueScenario(PerfOptions options, string connectionString, bool externalFarm)
{
    private static readonly TimeSpan ProgressEvery = TimeSpan.FromSeconds(5);
    private static readonly TimeSpan DrainTimeout = TimeSpan.FromSeconds(60);

    public async Task<FarmFigures> RunAsync(CancellationToken cancellationToken)
    {
        var queue = $"perf-single-{Guid.NewGuid():N}"[..24];
        using var admin = new FarmAdministrationClient(connectionString);
        await admin.CreateQueueAsync(queue, cancellationToken).ConfigureAwait(false);

        var state = new RunState();
        using var stopSending = new CancellationTokenSource();
        using var stopReceiving = new CancellationTokenSource();
        var receiving = new ReceiveLoad(options, connectionString, queue, state).RunAsync(stopReceiving.Token);
        var sending = new SendLoad(options, connectionString, queue, state).RunAsync(stopSending.Token);

        Console.Error.WriteLine($"perf: single-queue on {connectionString}, queue {queue}: warm-up {options.Warmup.TotalSeconds:0.#} s, measuring {options.Duration.TotalSeconds:0.#} s");
        await WatchAsync(state, options.Warmup, "warm-up", cancellationToken).ConfigureAwait(false);

        var ackedBefore = state.Acked.Count;
        var receivedBefore = state.Received.Count;
        var window = Stopwatch.StartNew();
        state.StartWindow();
        await WatchAsync(state, options.Duration, "measure", cancellationToken).ConfigureAwait(false);
        state.EndWindow();
        var seconds = window.Elapsed.TotalSeconds;
        var acked = state.Acked.Count - ackedBefore;
        var received = state.Received.Count - receivedBefore;

        await stopSending.CancelAsync().ConfigureAwait(false);
        await sending.ConfigureAwait(false);
        var drained = await DrainAsync(state, cancellationToken).ConfigureAwait(false);
        await stopReceiving.CancelAsync().ConfigureAwait(false);
        await receiving.ConfigureAwait(false);

        var left = await LeftInQueueAsync(admin, queue, cancellationToken).ConfigureAwait(false);
        var verification = Verify(state, left, drained);
        await DeleteQuietlyAsync(admin, queue).ConfigureAwait(false);

        return new FarmFigures(
            MsgsPerSec: Math.Round(received / seconds, 1),
            SentPerSec: Math.Round(acked / seconds, 1),
            P50Ms: Math.Round(state.Latency.PercentileMs(0.50), 2),
            P90Ms: Math.Round(state.Latency.PercentileMs(0.90), 2),
            P99Ms: Math.Round(state.Latency.PercentileMs(0.99), 2),
            P999Ms: Math.Round(state.Latency.PercentileMs(0.999), 2),
            Messages: received,
            DurationS: Math.Round(seconds, 3),
            Settings: new RunSettings(
                options.Senders, options.Receivers, options.Batch, options.Prefetch, options.Size, options.InFlight,
                options.ReceiveStyle.ToString().ToLowerInvariant(), options.Concurrency, options.Warmup.TotalSeconds, externalFarm),
            Verification: verification);
    }

    /// <summary>Waits <paramref name="duration"/>, printing throughput every few seconds (stderr).</summary>
    private static async Task WatchAsync(RunState state, TimeSpan duration, string phase, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        var lastAcked = state.Acked.Count;
        var lastReceived = state.Received.Count;
        var lastAt = TimeSpan.Zero;
        while (clock.Elapsed < duration)
        {
            var step = duration - clock.Elapsed;
            await Task.Delay(step < ProgressEvery ? step : ProgressEvery, cancellationToken).ConfigureAwait(false);
            var now = clock.Elapsed;
            var acked = state.Acked.Count;
            var received = state.Received.Count;
            var span = (now - lastAt).TotalSeconds;
            if (span > 0.5)
            {
                Console.Error.WriteLine($"perf: {phase} {now.TotalSeconds,5:0.0} s: sent {(acked - lastAcked) / span,8:0}/s, received {(received - lastReceived) / span,8:0}/s, backlog {acked - received}");
            }

            (lastAcked, lastReceived, lastAt) = (acked, received, now);
        }
    }

    /// <summary>Waits until every acknowledged message was received; false on timeout.</summary>
    private static async Task<bool> DrainAsync(RunState state, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < DrainTimeout)
        {
            if (state.Received.Count >= state.Acked.Count && AllAckedReceived(state))
            {
                return true;
            }

            await Task.Delay(50, cancellationToken).ConfigureAwait(false);
        }

        return false;
    }

    private static bool AllAckedReceived(RunState state)
    {
        var attempted = state.Attempted;
        for (long id = 0; id < attempted; id++)
        {
            if (state.Acked.Contains(id) && !state.Received.Contains(id))
            {
                return false;
            }
        }

        return true;
    }

    private static Verification Verify(RunState state, long leftInQueue, bool drained)
    {
        long lost = 0, unacknowledgedButDelivered = 0;
        var attempted = state.Attempted;
        for (long id = 0; id < attempted; id++)
        {
            var acked = state.Acked.Contains(id);
            var received = state.Received.Contains(id);
            if (acked && !received)
            {
                lost++;
            }
            else if (!acked && received)
            {
                unacknowledgedButDelivered++;
            }
        }

        var problems = new List<string>();
        if (lost > 0)
        {
            problems.Add($"{lost} acknowledged messages were never received{(drained ? string.Empty : $" within {DrainTimeout.TotalSeconds:0} s of the end")}");
        }

        if (state.Duplicates > 0)
        {
            problems.Add($"{state.Duplicates} messages were delivered more than once");
        }

        if (state.Foreign > 0)
        {
            problems.Add($"{state.Foreign} messages received that this run did not send");
        }

        if (state.SendErrors > 0 || state.SettleErrors > 0 || state.ReceiveErrors > 0)
        {
            problems.Add($"errors: {state.SendErrors} sends, {state.SettleErrors} completes, {state.ReceiveErrors} receives failed");
        }

        if (leftInQueue != 0)
        {
            problems.Add(leftInQueue < 0 ? "the queue's message count could not be read" : $"{leftInQueue} messages are still in the queue after every message was completed");
        }

        return new Verification(
            Passed: problems.Count == 0,
            Attempted: attempted,
            Acknowledged: state.Acked.Count,
            ReceivedUnique: state.Received.Count,
            Deliveries: state.ReceivedTotal,
            Lost: lost,
            Duplicates: state.Duplicates,
            Foreign: state.Foreign,
            UnacknowledgedButDelivered: unacknowledgedButDelivered,
            SendErrors: state.SendErrors,
            CompleteErrors: state.SettleErrors,
            ReceiveErrors: state.ReceiveErrors,
            LeftInQueue: leftInQueue,
            Problems: problems);
    }

    /// <summary>Messages still in the queue (active, locked, deferred, scheduled, dead-lettered); -1 when unknown.</summary>
    private static async Task<long> LeftInQueueAsync(FarmAdministrationClient admin, string queue, CancellationToken cancellationToken)
    {
        try
        {
            var runtime = await admin.GetQueueRuntimePropertiesAsync(queue, cancellationToken).ConfigureAwait(false);
            return runtime.TotalMessageCount;
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not read the queue's message count: {e.Message}");
            return -1;
        }
    }

    private static async Task DeleteQuietlyAsync(FarmAdministrationClient admin, string queue)
    {
        try
        {
            await admin.DeleteQueueAsync(queue, CancellationToken.None).ConfigureAwait(false);
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not delete queue {queue}: {e.Message}");
        }
    }
}
