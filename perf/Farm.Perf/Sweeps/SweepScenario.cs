using System.Diagnostics;
using Farm.Client;
using Farm.Perf.Load;

namespace Farm.Perf.Sweeps;

/// <summary>
/// The single-node sweeps: settlement, batch-sizes, prefetch, concurrency, latency. One node
/// (its own unless --connection is given), one warm-up at the start (the node's JIT needs about
/// 20 s on 2 cores), then each point on a fresh queue with its own short warm-up, window, drain and
/// exactly-once check. The load is single-queue's (same options and defaults); a sweep varies one
/// thing. Senders wait while --max-backlog messages are sent but not received, so a slow point
/// (one complete at a time, batches of 1) drains within the drain's minute.
/// </summary>
internal sealed class SweepScenario(PerfOptions options)
{
    /// <summary>A send call carries at most 1 MiB (FarmMessageLimits); a 1 KB message takes about this much more on the wire.</summary>
    private const int WireOverheadPerMessage = 80;

    public async Task<SweepReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        LocalNode? node = null;
        try
        {
            var connection = options.Connection;
            if (connection is null)
            {
                node = await LocalNode.StartAsync(cancellationToken).ConfigureAwait(false);
                connection = node.ConnectionString;
                Console.Error.WriteLine($"perf: started a single node (pid {node.ProcessId}) at {node.Address}");
            }

            var run = new PointRun(connection, node?.ProcessId, options.Scenario);
            var sweep = Plan(connection);
            var warmup = await WarmUpAsync(run, sweep.Warmups, options.Warmup, cancellationToken).ConfigureAwait(false);
            var points = new List<SweepPoint>();
            foreach (var plan in sweep.Points)
            {
                points.Add(await run.MeasureAsync(plan, options.RunWarmup, options.Duration, cancellationToken).ConfigureAwait(false));
            }

            // settlement: one window each is a coin toss on a noisy disk (0.41x to 1.12x in an hour of the
            // same build), so the two compared points take turns for more rounds and the median counts.
            var rounds = new List<(SweepPoint ReceiveAndDelete, SweepPoint Batched)> { };
            if (options.Scenario == "settlement")
            {
                rounds.Add((points[0], points[2]));
                for (var round = 2; round <= options.Rounds; round++)
                {
                    var (first, second) = round % 2 == 0 ? (sweep.Points[2], sweep.Points[0]) : (sweep.Points[0], sweep.Points[2]);
                    var a = await run.MeasureAsync(first with { Name = $"{first.Name} (round {round})" }, options.RunWarmup, options.Duration, cancellationToken).ConfigureAwait(false);
                    var b = await run.MeasureAsync(second with { Name = $"{second.Name} (round {round})" }, options.RunWarmup, options.Duration, cancellationToken).ConfigureAwait(false);
                    rounds.Add(round % 2 == 0 ? (b, a) : (a, b));
                }
            }

            if (options.Scenario == "latency")
            {
                // Half of what the unpaced point received, unless --rate says otherwise.
                var rate = options.Rate > 0 ? options.Rate : Math.Round(points[0].MsgsPerSec / 2);
                var paced = sweep.Points[0] with { Name = $"paced to {rate:0} msg/s", X = rate, Send = sweep.Points[0].Send with { RatePerSec = rate } };
                points.Add(await run.MeasureAsync(paced, options.RunWarmup, options.Duration, cancellationToken).ConfigureAwait(false));
            }

            return Report(points, rounds, warmup, clock.Elapsed, command);
        }
        finally
        {
            if (node is not null)
            {
                await node.DisposeAsync().ConfigureAwait(false);
            }
        }
    }

    /// <summary>
    /// Runs each warm-up load in turn, each for --warmup: the code paths of the loads compared differ
    /// (a peek-lock's settle path, a proxy's forwarding), and each needs the JIT time a single-queue
    /// run gets. Split between them, the second load of `settlement` was still warming during its
    /// first measured rounds (its rate rose round after round while receive-and-delete stayed flat).
    /// </summary>
    public static async Task<SweepWarmup> WarmUpAsync(PointRun run, IReadOnlyList<PointPlan> plans, TimeSpan eachLoad, CancellationToken cancellationToken)
    {
        var verifications = new List<Verification>();
        foreach (var plan in plans)
        {
            verifications.Add(await run.WarmUpAsync(plan, eachLoad, cancellationToken).ConfigureAwait(false));
        }

        return new SweepWarmup(eachLoad.TotalSeconds * plans.Count, verifications);
    }

    private sealed record Sweep(IReadOnlyList<PointPlan> Warmups, IReadOnlyList<PointPlan> Points);

    /// <summary>The single-queue load (--senders, --batch, --receivers, --prefetch, --concurrency...), capped at --max-backlog.</summary>
    public static PointPlan BasePlan(PerfOptions options, string connection, string name = "single-queue load", double x = 0) => new(
        name,
        x,
        new SendSettings(options.Senders, options.InFlight, options.Batch, options.Size, 0, options.MaxBacklog),
        new ReceiveSettings(options.ReceiveStyle, options.Prefetch, options.ReceiverConcurrency, options.ReceiverConcurrency),
        options.Receivers,
        connection);

    private Sweep Plan(string connection)
    {
        var load = BasePlan(options, connection);
        switch (options.Scenario)
        {
            case "settlement":
            {
                // FarmReceiver loops whatever --receive-style says: a processor completes for itself.
                load = load with { Receive = load.Receive with { Style = ReceiveStyle.Receiver } };
                var receiveAndDelete = load with { Name = "receive-and-delete", X = 1, Receive = load.Receive with { Mode = FarmReceiveMode.ReceiveAndDelete } };
                var oneByOne = load with { Name = "peek-lock, one complete at a time", X = 2, Receive = load.Receive with { CompleteOneByOne = true } };
                var coalesced = load with { Name = "peek-lock, batched settlement (SDK)", X = 3 };
                return new Sweep([receiveAndDelete, coalesced], [receiveAndDelete, oneByOne, coalesced]);
            }

            case "batch-sizes":
            {
                var sizes = options.Points ?? [1, 10, 100, 900];
                foreach (var size in sizes)
                {
                    if (size < 1 || size > FarmMessageLimits.MaxMessagesPerBatch || (long)size * (options.Size + WireOverheadPerMessage) > FarmMessageLimits.MaxBatchSizeInBytes)
                    {
                        throw new InvalidOperationException($"a batch of {size} messages of {options.Size} bytes does not fit one send call (at most {FarmMessageLimits.MaxMessagesPerBatch} messages and {FarmMessageLimits.MaxBatchSizeInBytes} bytes with their headers); lower --points or --size");
                    }
                }

                return new Sweep([load], [.. sizes.Select(b => load with { Name = $"batch {b}", X = b, Send = load.Send with { Batch = b } })]);
            }

            case "prefetch":
            {
                // The SDK's default prefetch is a FarmProcessor's: 3 x MaxConcurrentCalls. Swept around it.
                var processor = load with { Receive = load.Receive with { Style = ReceiveStyle.Processor } };
                var multiples = options.Points ?? [0, 1, 3, 10, 30];
                return new Sweep([processor with { Receive = processor.Receive with { Prefetch = 3 * options.Concurrency } }], [.. multiples.Select(m => processor with
                {
                    Name = $"prefetch {m * options.Concurrency} ({m}x)",
                    X = m,
                    Receive = processor.Receive with { Prefetch = m * options.Concurrency },
                })]);
            }

            case "concurrency":
            {
                var counts = options.Points ?? [1, 2, 4, 8];
                if (counts.Any(n => n < 1))
                {
                    throw new InvalidOperationException("concurrency points must be at least 1 (senders = receivers = the point)");
                }

                return new Sweep([load], [.. counts.Select(n => load with { Name = $"{n} senders x {n} receivers", X = n, Send = load.Send with { Senders = n }, Receivers = n })]);
            }

            case "latency":
                // The unpaced point first; RunAsync adds the paced one once the maximum is known.
                return new Sweep([load], [load with { Name = "unpaced (the maximum)", X = 0 }]);

            default:
                throw new InvalidOperationException($"no sweep named {options.Scenario}");
        }
    }

    private SweepReport Report(List<SweepPoint> points, IReadOnlyList<(SweepPoint ReceiveAndDelete, SweepPoint Batched)> rounds, SweepWarmup warmup, TimeSpan total, string command)
    {
        var passed = points.All(p => p.Verification.Passed) && warmup.Verifications.All(v => v.Passed)
            && rounds.All(r => r.ReceiveAndDelete.Verification.Passed && r.Batched.Verification.Passed);
        var best = points.MaxBy(p => p.MsgsPerSec)!;
        SweepPoint farm = best;
        SweepPoint? peer = null;
        double? ratio = null;
        var figures = new Dictionary<string, object?>();
        var charts = new List<ChartSpec>();
        var scenario = options.Scenario;
        switch (scenario)
        {
            case "settlement":
            {
                // The median round's pair (the lower middle of an even count) is the one reported.
                var byRatio = rounds.OrderBy(r => Ratio(r.Batched, r.ReceiveAndDelete)).ToList();
                var median = byRatio[(byRatio.Count - 1) / 2];
                farm = median.Batched;
                peer = median.ReceiveAndDelete;
                ratio = Ratio(median.Batched, median.ReceiveAndDelete);
                figures["rounds"] = rounds.Count;
                figures["round_ratios"] = rounds.Select(r => Ratio(r.Batched, r.ReceiveAndDelete)).ToList();
                figures["round_msgs_per_sec"] = rounds.Select(r => new[] { r.ReceiveAndDelete.MsgsPerSec, r.Batched.MsgsPerSec }).ToList();
                figures["ratio_one_by_one"] = Ratio(points[1], points[0]);
                figures["target"] = "peek-lock with batched settlement at least 0.8x receive-and-delete";
                figures["met_target"] = ratio >= 0.8;
                charts.Add(new ChartSpec("settlement-throughput.png", "Settlement: msg/s received and settled", "settlement", "msg/s", false, false,
                    [Series("received", points, p => p.MsgsPerSec)])
                { XTicks = [.. points.Select(p => new ChartTick(p.X, p.Name))], Kind = "bar" });
                break;
            }
            case "batch-sizes":
                charts.Add(new ChartSpec("batch-sizes-throughput.png", "Throughput against batch size", "messages per send call", "msg/s", true, false,
                    [Series("received", points, p => p.MsgsPerSec), Series("sent", points, p => p.SentPerSec)]));
                charts.Add(LatencyChart("batch-sizes-latency.png", "Latency against batch size", "messages per send call", true, points));
                break;
            case "prefetch":
                charts.Add(new ChartSpec("prefetch-throughput.png", $"Throughput against prefetch (processor, MaxConcurrentCalls {options.Concurrency})", "prefetch, multiple of MaxConcurrentCalls (SDK default 3)", "msg/s", false, false,
                    [Series("received", points, p => p.MsgsPerSec)]));
                charts.Add(LatencyChart("prefetch-latency.png", "Latency against prefetch", "prefetch, multiple of MaxConcurrentCalls", false, points));
                break;
            case "concurrency":
                charts.Add(new ChartSpec("concurrency-throughput.png", "Throughput against concurrency", "senders = receivers (each its own client)", "msg/s", true, false,
                    [Series("received", points, p => p.MsgsPerSec), Series("sent", points, p => p.SentPerSec)]));
                charts.Add(LatencyChart("concurrency-latency.png", "Latency against concurrency", "senders = receivers", true, points));
                break;
            case "latency":
                farm = points[^1];
                figures["max_rate_msgs_per_sec"] = points[0].MsgsPerSec;
                figures["paced_rate_msgs_per_sec"] = points[^1].Settings.RatePerSec;
                figures["target"] = "p99 send-to-receive under 10 ms at half the maximum rate";
                figures["met_target"] = points[^1].P99Ms < 10;
                charts.Add(new ChartSpec("latency-percentiles.png", "Send-to-receive latency percentiles, single queue", "percentile", "ms", false, true,
                    [.. points.Select(p => new ChartSeries($"{p.Name}: {p.MsgsPerSec:0} msg/s", [[0, p.P50Ms], [1, p.P90Ms], [2, p.P99Ms], [3, p.P999Ms]]))])
                { XTicks = [new(0, "p50"), new(1, "p90"), new(2, "p99"), new(3, "p99.9")] });
                break;
        }

        return new SweepReport(scenario, farm, peer, ratio, points, charts, warmup, passed, Math.Round(total.TotalSeconds, 1), MachineInfo.Current(), DateTimeOffset.UtcNow, command)
        {
            Figures = figures.Count == 0 ? null : figures,
        };
    }

    public static double Ratio(SweepPoint a, SweepPoint b) => b.MsgsPerSec > 0 ? Math.Round(a.MsgsPerSec / b.MsgsPerSec, 3) : 0;

    public static ChartSeries Series(string name, IEnumerable<SweepPoint> points, Func<SweepPoint, double> y)
        => new(name, [.. points.Select(p => new[] { p.X, y(p) })]);

    public static ChartSpec LatencyChart(string file, string title, string xLabel, bool xLog, IReadOnlyList<SweepPoint> points)
        => new(file, title, xLabel, "send-to-receive latency, ms", xLog, true,
            [Series("p50", points, p => p.P50Ms), Series("p99", points, p => p.P99Ms)]);
}
