using Farm.Client;
using Farm.Perf.Load;

namespace Farm.Perf.Sweeps;

/// <summary>One configuration of a sweep: who sends, who receives, through which connection.</summary>
/// <param name="Name">Names the point in the JSON and the progress lines.</param>
/// <param name="X">The swept value.</param>
/// <param name="Connection">The clients' connection string (forward or redirect, which gateways).</param>
/// <param name="Route">Says how that connection reaches the owner, for the JSON.</param>
/// <param name="ContainerId">The container the queue is created in (null: the farm chooses).</param>
internal sealed record PointPlan(string Name, double X, SendSettings Send, ReceiveSettings Receive, int Receivers, string Connection, string Route = "direct", long? ContainerId = null)
{
    public string Settlement => Receive.Mode == FarmReceiveMode.ReceiveAndDelete ? "none" : Receive.CompleteOneByOne ? "one-by-one" : Receive.CompleteWithSdk ? "sdk-coalesced" : "raw-batch";
}

/// <summary>
/// Runs a point on a fresh queue: the load (the single-queue machinery: <see cref="SendLoad"/>,
/// <see cref="ReceiveLoad"/>, <see cref="LoadRun"/>), its warm-up, the window, the drain, the
/// exactly-once check; then deletes the queue. Points run one after the other on the same farm,
/// so a point never shares the 2 cores with another.
/// </summary>
internal sealed class PointRun(string adminConnection, int? nodeProcessId, string scenario)
{
    /// <summary>Measures <paramref name="plan"/> for <paramref name="duration"/> after <paramref name="warmup"/> of load.</summary>
    public async Task<SweepPoint> MeasureAsync(PointPlan plan, TimeSpan warmup, TimeSpan duration, CancellationToken cancellationToken)
    {
        var (state, verification, window) = await RunAsync(plan, warmup, duration, cancellationToken).ConfigureAwait(false);
        var point = new SweepPoint(
            plan.Name,
            plan.X,
            window.DeliveredPerSec,
            window.AckedPerSec,
            Math.Round(state.Latency.PercentileMs(0.50), 2),
            Math.Round(state.Latency.PercentileMs(0.90), 2),
            Math.Round(state.Latency.PercentileMs(0.99), 2),
            Math.Round(state.Latency.PercentileMs(0.999), 2),
            window.Delivered,
            Math.Round(window.Seconds, 3),
            SettingsOf(plan, warmup),
            verification,
            window.Cpu);
        Console.Error.WriteLine($"perf: {scenario} {plan.Name}: {point.MsgsPerSec:0} msg/s received ({point.SentPerSec:0} sent), p50 {point.P50Ms:0.0} ms, p99 {point.P99Ms:0.0} ms; check {(verification.Passed ? "passed" : "FAILED")}");
        return point;
    }

    /// <summary>Loads <paramref name="plan"/> for <paramref name="duration"/>, unmeasured (the node's JIT warms up); returns its check.</summary>
    public async Task<Verification> WarmUpAsync(PointPlan plan, TimeSpan duration, CancellationToken cancellationToken)
    {
        var (_, verification, _) = await RunAsync(plan with { Name = "warm-up " + plan.Name }, duration, TimeSpan.Zero, cancellationToken).ConfigureAwait(false);
        return verification;
    }

    public static PointSettings SettingsOf(PointPlan plan, TimeSpan warmup) => new(
        plan.Send.Senders, plan.Send.InFlight, plan.Send.Batch, plan.Send.Size, Math.Round(plan.Send.RatePerSec, 1), plan.Send.MaxBacklog,
        plan.Receivers, plan.Receive.Style.ToString().ToLowerInvariant(),
        plan.Receive.Mode == FarmReceiveMode.ReceiveAndDelete ? "receive-and-delete" : "peek-lock",
        plan.Settlement, plan.Receive.Prefetch, plan.Receive.Concurrency, warmup.TotalSeconds, plan.Route);

    private async Task<(RunState State, Verification Verification, Window Window)> RunAsync(PointPlan plan, TimeSpan warmup, TimeSpan duration, CancellationToken cancellationToken)
    {
        var queue = $"perf-{scenario}-{Guid.NewGuid():N}"[..Math.Min(40, scenario.Length + 17)];
        using var admin = new FarmAdministrationClient(adminConnection);
        var created = await admin.CreateQueueAsync(new CreateQueueOptions(queue) { ContainerId = plan.ContainerId }, cancellationToken).ConfigureAwait(false);
        if (plan.ContainerId is { } container && created.ContainerId != container)
        {
            throw new InvalidOperationException($"queue {queue} landed in container {created.ContainerId}, not {container}");
        }

        var state = new RunState();
        using var stopSending = new CancellationTokenSource();
        using var stopReceiving = new CancellationTokenSource();
        var receiving = ReceiveLoad.OnePath(plan.Receive, plan.Connection, queue, plan.Receivers, state).RunAsync(stopReceiving.Token);
        var sending = new SendLoad(plan.Send, plan.Connection, queue, state).RunAsync(stopSending.Token);
        Window window;
        bool drained;
        try
        {
            window = await LoadRun.MeasureAsync(state, $"{scenario} {plan.Name}", warmup, duration, cancellationToken, new CpuMeter(nodeProcessId)).ConfigureAwait(false);
        }
        finally
        {
            await stopSending.CancelAsync().ConfigureAwait(false);
            await sending.ConfigureAwait(false);
            drained = !cancellationToken.IsCancellationRequested && await LoadRun.DrainAsync(state, cancellationToken).ConfigureAwait(false);
            await stopReceiving.CancelAsync().ConfigureAwait(false);
            await receiving.ConfigureAwait(false);
        }

        var left = await LoadRun.LeftInQueueAsync(admin, queue, cancellationToken).ConfigureAwait(false);
        var verification = LoadRun.Verify(state, left, drained);
        await LoadRun.DeleteQueueQuietlyAsync(admin, queue).ConfigureAwait(false);
        return (state, verification, window);
    }
}
