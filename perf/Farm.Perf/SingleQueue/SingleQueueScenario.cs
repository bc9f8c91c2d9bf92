using Farm.Client;
using Farm.Perf.Load;

namespace Farm.Perf.SingleQueue;

/// <summary>
/// One queue, concurrent senders and peek-lock receivers: a warm-up, the measured window, then a
/// drain in which senders stop and receivers take what is left, so the run can prove every
/// acknowledged message was received exactly once.
/// </summary>
internal sealed class SingleQueueScenario(PerfOptions options, string connectionString, bool externalFarm)
{
    public async Task<FarmFigures> RunAsync(CancellationToken cancellationToken)
    {
        var queue = $"perf-single-{Guid.NewGuid():N}"[..24];
        using var admin = new FarmAdministrationClient(connectionString);
        await admin.CreateQueueAsync(queue, cancellationToken).ConfigureAwait(false);

        var state = new RunState();
        using var stopSending = new CancellationTokenSource();
        using var stopReceiving = new CancellationTokenSource();
        var receiving = ReceiveLoad.OnePath(ReceiveSettingsOf(options), connectionString, queue, options.Receivers, state).RunAsync(stopReceiving.Token);
        var sending = new SendLoad(SendSettingsOf(options), connectionString, queue, state).RunAsync(stopSending.Token);

        Console.Error.WriteLine($"perf: single-queue on {connectionString}, queue {queue}: warm-up {options.Warmup.TotalSeconds:0.#} s, measuring {options.Duration.TotalSeconds:0.#} s");
        var window = await LoadRun.MeasureAsync(state, "single-queue", options.Warmup, options.Duration, cancellationToken).ConfigureAwait(false);

        await stopSending.CancelAsync().ConfigureAwait(false);
        await sending.ConfigureAwait(false);
        var drained = await LoadRun.DrainAsync(state, cancellationToken).ConfigureAwait(false);
        await stopReceiving.CancelAsync().ConfigureAwait(false);
        await receiving.ConfigureAwait(false);

        var left = await LoadRun.LeftInQueueAsync(admin, queue, cancellationToken).ConfigureAwait(false);
        var verification = LoadRun.Verify(state, left, drained);
        await LoadRun.DeleteQueueQuietlyAsync(admin, queue).ConfigureAwait(false);

        return new FarmFigures(
            MsgsPerSec: window.DeliveredPerSec,
            SentPerSec: window.AckedPerSec,
            P50Ms: Math.Round(state.Latency.PercentileMs(0.50), 2),
            P90Ms: Math.Round(state.Latency.PercentileMs(0.90), 2),
            P99Ms: Math.Round(state.Latency.PercentileMs(0.99), 2),
            P999Ms: Math.Round(state.Latency.PercentileMs(0.999), 2),
            Messages: window.Delivered,
            DurationS: Math.Round(window.Seconds, 3),
            Settings: new RunSettings(
                options.Senders, options.Receivers, options.Batch, options.Prefetch, options.Size, options.InFlight,
                options.ReceiveStyle.ToString().ToLowerInvariant(), options.ReceiverConcurrency, options.Warmup.TotalSeconds, externalFarm),
            Verification: verification);
    }

    /// <summary>The single-queue senders: --senders, --inflight, --batch, --size, paced to --rate when given.</summary>
    public static SendSettings SendSettingsOf(PerfOptions options)
        => new(options.Senders, options.InFlight, options.Batch, options.Size, options.Rate);

    /// <summary>The single-queue receivers: --receive-style, --prefetch, --concurrency (default for a receiver: the prefetch; also the batch taken per receive), --complete.</summary>
    public static ReceiveSettings ReceiveSettingsOf(PerfOptions options)
        => new(options.ReceiveStyle, options.Prefetch, options.ReceiverConcurrency, options.ReceiverConcurrency, options.CompleteWithSdk,
            options.ReceiveAndDelete ? FarmReceiveMode.ReceiveAndDelete : FarmReceiveMode.PeekLock);
}
