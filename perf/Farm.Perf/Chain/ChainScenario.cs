using System.Diagnostics;
using System.Globalization;
using Farm.Client;
using Farm.Perf.Load;
using Farm.Perf.ManyQueues;

namespace Farm.Perf.Chain;

/// <summary>
/// Issue 14's chain: <c>--queues</c> (15) queues on one node, a handler per queue that sends each
/// message on to the next queue, as an application writes it with the SDK: a
/// <see cref="FarmProcessor"/> per queue (peek-lock, auto-complete, <c>--concurrency</c> calls at
/// once) whose handler forwards <c>new FarmMessage(received)</c> to the next queue: by default with
/// the completion in the send's own transaction (<c>--forward with-send</c>, as NServiceBus's SQL
/// transport forwards in one database transaction), or by a send after which the processor
/// completes (<c>--forward then-complete</c>); the last handler only completes. All
/// handlers share one FarmClient, as one process hosting the endpoints would. An injector sends
/// into the first queue at each rate of <c>--rates</c> in turn; each rate gets a warm-up, a measured
/// window (CPU of the node and of this process, end-to-end latency), a drain and its own
/// exactly-once check at the end of the chain.
/// </summary>
internal sealed class ChainScenario(PerfOptions options)
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    /// <summary>Issue 14's reference: NServiceBus on the SQL Server transport, 15 queues at 125 msg/s (1,875 msg/s in all), took 80% of 8 vCores.</summary>
    private const string Reference = "NServiceBus SQL Server transport: 15 queues x 125 msg/s = 1,875 msg/s in all took 80% of 8 vCores";

    private RunState? _current;
    private long _hops;
    private long _handlerErrors;

    public async Task<ChainReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        await using var node = await LocalNode.StartAsync(cancellationToken).ConfigureAwait(false);
        Console.Error.WriteLine($"perf: chain: {options.Queues} queues on a single node (pid {node.ProcessId}) at {node.Address}; rates {string.Join(", ", options.Rates.Select(r => r.ToString(Inv)))} msg/s per queue");
        using var admin = new FarmAdministrationClient(node.ConnectionString);
        var names = Enumerable.Range(1, options.Queues).Select(i => string.Create(Inv, $"chain-{i:D2}")).ToList();
        foreach (var name in names)
        {
            await admin.CreateQueueAsync(name, cancellationToken).ConfigureAwait(false);
        }

        await using var handlers = new FarmClient(node.ConnectionString);
        var processors = new List<FarmProcessor>();
        for (var i = 0; i < names.Count; i++)
        {
            processors.Add(await StartHandlerAsync(handlers, names[i], i + 1 < names.Count ? handlers.CreateSender(names[i + 1]) : null, cancellationToken).ConfigureAwait(false));
        }

        var cpu = new CpuMeter(node.ProcessId);
        var points = new List<ChainPoint>();
        try
        {
            for (var p = 0; p < options.Rates.Count; p++)
            {
                var warmup = p == 0 ? options.Warmup : options.RunWarmup;
                points.Add(await RunPointAsync(node.ConnectionString, admin, names, options.Rates[p], warmup, cpu, cancellationToken).ConfigureAwait(false));
            }
        }
        finally
        {
            await Task.WhenAll(processors.Select(p => p.StopProcessingAsync())).ConfigureAwait(false);
        }

        var top = points.MaxBy(p => p.RatePerQueue)!;
        var targetPoint = points.FirstOrDefault(p => p.RatePerQueue == 125);
        var target = new ChainTarget(
            125, 25, targetPoint?.TotalPercentOfMachine,
            targetPoint is null ? null : targetPoint.TotalPercentOfMachine < 25 && targetPoint.Verification.Passed,
            Reference);
        var chart = new ResultChart(
            "chain-cpu.png",
            $"{options.Queues}-queue chain: CPU against rate per queue ({Environment.ProcessorCount} cores)",
            "messages/s per queue", "% of the machine's CPU", false, false,
            [
                new ResultChartSeries("Farm node", [.. points.Select(p => new[] { p.RatePerQueue, p.NodePercentOfMachine ?? 0 })]),
                new ResultChartSeries("load generator (injector + handlers)", [.. points.Select(p => new[] { p.RatePerQueue, p.LoadGeneratorPercentOfMachine })]),
                new ResultChartSeries("node + load generator", [.. points.Select(p => new[] { p.RatePerQueue, p.TotalPercentOfMachine })]),
                new ResultChartSeries("target (125 msg/s per queue)", [[125, 25]]),
                new ResultChartSeries("NServiceBus SQL transport, 8 vCores (issue 14)", [[125, 80]]),
            ]);
        return new ChainReport(
            Scenario: "chain",
            Queues: options.Queues,
            Farm: new ChainFarmFigures(top.RatePerQueue, top.HopsPerSec, top.EndMsgsPerSec, top.P50Ms, top.P90Ms, top.P99Ms, top.MaxMs, top.TotalPercentOfMachine, top.Verification),
            Points: points,
            Target: target,
            Charts: [chart],
            Settings: new ChainSettings(
                options.Concurrency, options.Size, options.Warmup.TotalSeconds, options.RunWarmup.TotalSeconds, options.Duration.TotalSeconds,
                $"a FarmProcessor per queue (peek-lock, auto-complete, MaxConcurrentCalls {options.Concurrency}, SDK default prefetch), handler: "
                + (options.ForwardWithSend
                    ? "args.SendMessageAndCompleteAsync(next, new FarmMessage(received)): the send and the completion in one transaction (--forward with-send)"
                    : "SendMessageAsync(new FarmMessage(received)) to the next queue, then the processor's auto-complete (--forward then-complete)")
                + "; one shared FarmClient; injector: one FarmClient, single-message sends paced evenly"),
            Machine: MachineInfo.Current(),
            Timestamp: DateTimeOffset.UtcNow,
            Command: command);
    }

    private async Task<FarmProcessor> StartHandlerAsync(FarmClient client, string queue, FarmSender? next, CancellationToken cancellationToken)
    {
        var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = options.Concurrency });
        processor.ProcessMessageAsync += async args =>
        {
            Interlocked.Increment(ref _hops);
            if (next is null)
            {
                Volatile.Read(ref _current)?.OnReceived(args.Message);
                return;
            }

            if (options.ForwardWithSend)
            {
                await args.SendMessageAndCompleteAsync(next, new FarmMessage(args.Message), args.CancellationToken).ConfigureAwait(false);
            }
            else
            {
                await next.SendMessageAsync(new FarmMessage(args.Message), args.CancellationToken).ConfigureAwait(false);
            }
        };
        processor.ProcessErrorAsync += args =>
        {
            Interlocked.Increment(ref _handlerErrors);
            var state = Volatile.Read(ref _current);
            switch (args.ErrorSource)
            {
                case FarmErrorSource.Receive:
                    state?.OnReceiveError(args.Exception);
                    break;
                case FarmErrorSource.ProcessMessageCallback:
                    // The forward failed: the message is abandoned and handled again (a second copy downstream would show as a duplicate).
                    state?.OnSendError(args.Exception);
                    break;
                default:
                    state?.OnSettleError(args.Exception);
                    break;
            }

            return Task.CompletedTask;
        };
        await processor.StartProcessingAsync(cancellationToken).ConfigureAwait(false);
        return processor;
    }

    private async Task<ChainPoint> RunPointAsync(
        string connection, FarmAdministrationClient admin, IReadOnlyList<string> names, double rate, TimeSpan warmup, CpuMeter cpu, CancellationToken cancellationToken)
    {
        var state = new RunState();
        Volatile.Write(ref _current, state);
        var errorsBefore = Interlocked.Read(ref _handlerErrors);
        var injector = new PacedSenders(connection, [names[0]], 1, rate, options.Size, state);
        using var stop = new CancellationTokenSource();
        var sending = injector.RunAsync(stop.Token);
        var label = string.Create(Inv, $"chain {rate:0.#}/s");
        Console.Error.WriteLine(string.Create(Inv, $"perf: {label}: warm-up {warmup.TotalSeconds:0.#} s, measuring {options.Duration.TotalSeconds:0.#} s"));
        await LoadRun.WatchAsync(state, warmup, $"{label} warm-up", cancellationToken).ConfigureAwait(false);

        var ackedBefore = state.Acked.Count;
        var receivedBefore = state.Received.Count;
        var hopsBefore = Interlocked.Read(ref _hops);
        var cpuBefore = cpu.Take();
        var clock = Stopwatch.StartNew();
        state.StartWindow();
        await LoadRun.WatchAsync(state, options.Duration, $"{label} measure", cancellationToken).ConfigureAwait(false);
        state.EndWindow();
        var seconds = clock.Elapsed.TotalSeconds;
        var usage = CpuMeter.Between(cpuBefore, cpu.Take());
        var hops = Interlocked.Read(ref _hops) - hopsBefore;
        var acked = state.Acked.Count - ackedBefore;
        var received = state.Received.Count - receivedBefore;

        await stop.CancelAsync().ConfigureAwait(false);
        await sending.ConfigureAwait(false);
        var drained = await LoadRun.DrainAsync(state, cancellationToken).ConfigureAwait(false);
        var left = await LeftInChainAsync(admin, cancellationToken).ConfigureAwait(false);
        var verification = LoadRun.Verify(state, left, drained, entity: "chain's queues");

        var cores = usage.Cores;
        double? node = usage.NodeCores is { } n ? Math.Round(n / cores * 100, 1) : null;
        var self = Math.Round(usage.LoadGeneratorCores / cores * 100, 1);
        var point = new ChainPoint(
            rate,
            Per(acked, seconds),
            Per(hops, seconds),
            Per(received, seconds),
            Math.Round(state.Latency.PercentileMs(0.50), 2),
            Math.Round(state.Latency.PercentileMs(0.90), 2),
            Math.Round(state.Latency.PercentileMs(0.99), 2),
            Math.Round(state.Latency.PercentileMs(1.0), 2),
            state.Latency.Count,
            Math.Round(seconds, 3),
            injector.BehindSchedule,
            usage,
            node,
            self,
            Math.Round((node ?? 0) + self, 1),
            usage.MachineBusyCores is { } busy ? Math.Round(busy / cores * 100, 1) : null,
            Interlocked.Read(ref _handlerErrors) - errorsBefore,
            verification);
        Console.Error.WriteLine(string.Create(Inv,
            $"perf: {label}: {point.HopsPerSec:0} handler calls/s, end {point.EndMsgsPerSec:0} msg/s, p50 {point.P50Ms:0.0} ms, p99 {point.P99Ms:0.0} ms; CPU node {point.NodePercentOfMachine:0.0}% + load generator {point.LoadGeneratorPercentOfMachine:0.0}% = {point.TotalPercentOfMachine:0.0}% of the machine (machine busy {point.MachineBusyPercent:0.0}%); {(verification.Passed ? "exactly once" : "CHECK FAILED")}"));
        return point;
    }

    private static double Per(long count, double seconds) => seconds > 0 ? Math.Round(count / seconds, 1) : 0;

    /// <summary>Messages left in the chain's queues (every state); -1 when unknown.</summary>
    /// <summary>
    /// How long the count of what is left may take to reach zero once the end of the chain received
    /// everything: the handlers before it complete their message after sending it on, so a complete
    /// may still be on its way then (seen once: 2 left, read at once, at 75 msg/s).
    /// </summary>
    private static readonly TimeSpan CompletesInFlight = TimeSpan.FromSeconds(10);

    /// <summary>Messages left in the chain's queues (every state) once in-flight completes had their time; -1 when unreadable.</summary>
    private static async Task<long> LeftInChainAsync(FarmAdministrationClient admin, CancellationToken cancellationToken)
    {
        try
        {
            var clock = Stopwatch.StartNew();
            long? first = null;
            while (true)
            {
                var all = await admin.ListQueuesWithRuntimePropertiesAsync(cancellationToken).ConfigureAwait(false);
                var left = all.Where(q => q.Properties.Name.StartsWith("chain-", StringComparison.Ordinal)).Sum(q => q.Runtime.TotalMessageCount);
                first ??= left;
                if (left == 0 || clock.Elapsed > CompletesInFlight)
                {
                    if (first > 0)
                    {
                        Console.Error.WriteLine(string.Create(Inv, $"perf: {first} message(s) in the chain's queues when the end had everything, {left} after {clock.Elapsed.TotalSeconds:0.0} s"));
                    }
                    return left;
                }
                await Task.Delay(100, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not read the chain's message counts: {e.Message}");
            return -1;
        }
    }
}
