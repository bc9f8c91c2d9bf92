using System.Diagnostics;
using System.Globalization;
using Farm.Client;
using Farm.Perf.Failover;
using Farm.Perf.Load;

namespace Farm.Perf.ManyQueues;

/// <summary>
/// Issue 14's "15,000 queues at 1 msg/s each": its own farm (1 node, or 3 with 2 containers each),
/// <c>--queues</c> queues created through the administration SDK (the first ones one by one, the
/// rest concurrently), a <see cref="FarmProcessor"/> per queue (what an application with a handler
/// per queue writes; spread over a few FarmClients), and a few sender clients each pacing single
/// sends over its slice of the queues so each queue gets <c>--rate-per-queue</c> messages a second,
/// spread evenly over the second. Measures send-to-receive latency, node RSS at each phase and
/// node CPU over the window, and checks every acknowledged message was received exactly once.
/// </summary>
internal sealed class ManyQueuesScenario(PerfOptions options)
{
    /// <summary>Containers per node: one on one node (the farm's first), two on three, unless --containers-per-node says.</summary>
    private int ContainersPerNode => options.ContainersPerNode ?? (options.Nodes == 1 ? 1 : 2);

    /// <summary>Queues created one call at a time first: the rate one by one.</summary>
    private const int SerialQueues = 200;

    private static readonly TimeSpan SampleEvery = TimeSpan.FromSeconds(1);
    private static readonly TimeSpan SettleAfterReceiversOpen = TimeSpan.FromSeconds(5);
    private static readonly TimeSpan BalanceTimeout = TimeSpan.FromSeconds(120);
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    public async Task<ManyQueuesReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        var queues = options.Queues;
        var clock = Stopwatch.StartNew();
        Console.Error.WriteLine($"perf: many-queues: {queues} queues at {options.RatePerQueue.ToString(Inv)} msg/s each on {options.Nodes} node(s); starting the farm");
        await using var farm = await LocalFarm.StartAsync(options.Nodes, cancellationToken).ConfigureAwait(false);
        var nodes = farm.NodeIds.Select(id => (Id: id, Pid: farm.Node(id).ProcessId)).ToList();
        Console.Error.WriteLine($"perf: nodes {string.Join(", ", nodes.Select(n => $"{n.Id} (pid {n.Pid})"))}; data {farm.DataDirectory}");
        var connection = farm.ConnectionString(redirect: false);
        using var admin = new FarmAdministrationClient(connection);
        var containers = await PrepareContainersAsync(farm, admin, cancellationToken).ConfigureAwait(false);

        using var sampler = new MemorySampler(nodes.Select(n => n.Pid).ToList(), clock);
        sampler.Mark("start");
        var rssStart = sampler.Current();

        var names = Enumerable.Range(1, queues).Select(i => string.Create(Inv, $"mq-{i:D5}")).ToList();
        var creation = await CreateQueuesAsync(admin, names, cancellationToken).ConfigureAwait(false);
        sampler.Mark("queues created");
        var rssCreated = sampler.Current();
        double? restartSeconds = null;
        if (options.Restart)
        {
            restartSeconds = await RestartAsync(farm, cancellationToken).ConfigureAwait(false);
            nodes = farm.NodeIds.Select(id => (Id: id, Pid: farm.Node(id).ProcessId)).ToList();
            sampler.Follow(nodes.Select(n => n.Pid).ToList());
            sampler.Mark("restarted");
        }

        var state = new RunState();
        using var aborts = new ConnectionAbortCounter();
        var receiving = new ProcessorSet(connection, names, options.ReceiverClients, state);
        var startClock = Stopwatch.StartNew();
        await receiving.StartAsync(cancellationToken).ConfigureAwait(false);
        var receiversStart = startClock.Elapsed.TotalSeconds;
        Console.Error.WriteLine(string.Create(Inv, $"perf: {queues} processors started over {options.ReceiverClients} clients in {receiversStart:0.0} s; letting their streams open"));
        await Task.Delay(SettleAfterReceiversOpen, cancellationToken).ConfigureAwait(false);
        sampler.Mark("receivers open");
        var rssReceivers = sampler.Current();

        using var stopSending = new CancellationTokenSource();
        var senders = new PacedSenders(connection, names, options.Senders, options.RatePerQueue, options.Size, state);
        var sendStart = Stopwatch.GetTimestamp();
        var sending = senders.RunAsync(stopSending.Token);
        sampler.Mark("warm-up");

        var meters = nodes.Select(n => new CpuMeter(n.Pid)).ToList();
        await LoadRun.WatchAsync(state, options.Warmup, "many-queues warm-up", cancellationToken).ConfigureAwait(false);
        var firstDeliveryAll = receiving.AllDelivered ? Stopwatch.GetElapsedTime(sendStart, receiving.LastFirstDelivery).TotalSeconds : (double?)null;

        sampler.Mark("window");
        var ackedBefore = state.Acked.Count;
        var receivedBefore = state.Received.Count;
        var cpuBefore = meters.Select(m => m.Take()).ToList();
        var window = Stopwatch.StartNew();
        state.StartWindow();
        await LoadRun.WatchAsync(state, options.Duration, "many-queues measure", cancellationToken).ConfigureAwait(false);
        state.EndWindow();
        var seconds = window.Elapsed.TotalSeconds;
        // Counted now: what arrives in the drain is not the window's (until session 38 it was, and
        // an overloaded run's backlog drained after the window inflated msgs_per_sec).
        var received = state.Received.Count - receivedBefore;
        var sent = state.Acked.Count - ackedBefore;
        var cpu = meters.Select((m, i) => CpuMeter.Between(cpuBefore[i], m.Take())).ToList();
        var (windowMean, windowMax) = sampler.WindowStats("window");
        sampler.Mark("drain");

        await stopSending.CancelAsync().ConfigureAwait(false);
        await sending.ConfigureAwait(false);
        var drained = await LoadRun.DrainAsync(state, cancellationToken).ConfigureAwait(false);
        await receiving.StopAsync().ConfigureAwait(false);
        firstDeliveryAll ??= receiving.AllDelivered ? Stopwatch.GetElapsedTime(sendStart, receiving.LastFirstDelivery).TotalSeconds : null;
        var rssEnd = sampler.Current();
        var left = await LeftInQueuesAsync(admin, cancellationToken).ConfigureAwait(false);
        var verification = LoadRun.Verify(state, left, drained, entity: "queues");

        var memory = nodes.Select((n, i) => new NodeMemory(
            n.Id, n.Pid, rssStart[i], rssCreated[i], rssReceivers[i], windowMean[i], windowMax[i], rssEnd[i], ProcessMemory.PeakRssMib(n.Pid))).ToList();
        var cores = Environment.ProcessorCount;
        var nodeCores = cpu.All(c => c.NodeCores is not null) ? Math.Round(cpu.Sum(c => c.NodeCores!.Value), 2) : (double?)null;
        var self = cpu[0].LoadGeneratorCores;
        var machineBusy = cpu[0].MachineBusyCores;
        var cpuFigures = new ManyQueuesCpu(
            nodeCores, cpu.Select(c => c.NodeCores).ToList(), self, machineBusy,
            machineBusy is { } busy ? Math.Round(Math.Max(0, busy - self - (nodeCores ?? 0)), 2) : null,
            cores,
            nodeCores is { } nc ? Math.Round(nc / cores * 100, 1) : null,
            Math.Round(self / cores * 100, 1));

        var p99 = Math.Round(state.Latency.PercentileMs(0.99), 2);
        var peak = memory.Max(m => Math.Max(m.PeakRssMib ?? 0, m.RssWindowMaxMib ?? 0));
        // The latency target counts only when the farm kept the pace: a window that received next to nothing has no p99 to speak of.
        var keptPace = seconds > 0 && received / seconds >= 0.95 * queues * options.RatePerQueue;
        var p99Met = keptPace && state.Latency.Count > 0 && p99 < 100;
        var targets = new ManyQueuesTargets(peak < 1024, p99Met, keptPace, peak < 1024 && p99Met && verification.Passed);
        var figures = new ManyQueuesFarmFigures(
            MsgsPerSec: seconds > 0 ? Math.Round(received / seconds, 1) : 0,
            SentPerSec: seconds > 0 ? Math.Round(sent / seconds, 1) : 0,
            OfferedPerSec: Math.Round(queues * options.RatePerQueue, 1),
            P50Ms: Math.Round(state.Latency.PercentileMs(0.50), 2),
            P90Ms: Math.Round(state.Latency.PercentileMs(0.90), 2),
            P99Ms: p99,
            P999Ms: Math.Round(state.Latency.PercentileMs(0.999), 2),
            MaxMs: Math.Round(state.Latency.PercentileMs(1.0), 2),
            Messages: state.Latency.Count,
            DurationS: Math.Round(seconds, 3),
            SendsBehindSchedule: senders.BehindSchedule,
            Verification: verification);

        return new ManyQueuesReport(
            Scenario: "many-queues",
            Queues: queues,
            RatePerQueue: options.RatePerQueue,
            Nodes: options.Nodes,
            Farm: figures,
            Creation: creation,
            Receivers: new ManyQueuesReceivers(
                $"a FarmProcessor per queue (peek-lock, auto-complete, MaxConcurrentCalls 1, SDK default prefetch 3), spread round-robin over {options.ReceiverClients} FarmClients",
                options.ReceiverClients, queues, Math.Round(receiversStart, 2), firstDeliveryAll is { } f ? Math.Round(f, 2) : null,
                receiving.Redelivered, aborts.Aborts, restartSeconds),
            Memory: memory,
            Cpu: cpuFigures,
            Targets: targets,
            Charts: [CreationChart(creation), sampler.Chart($"{queues:#,0} queues at {options.RatePerQueue.ToString(Inv)} msg/s each, {options.Nodes} node(s): node RSS over the run")],
            Settings: new ManyQueuesSettings(
                options.Senders, options.ReceiverClients, options.CreateConcurrency, options.Size, options.Warmup.TotalSeconds, options.Duration.TotalSeconds,
                containers, "SDK defaults"),
            Machine: MachineInfo.Current(),
            Timestamp: DateTimeOffset.UtcNow,
            Command: command);
    }

    /// <summary>
    /// --restart: SIGKILLs every node and starts it again on the same data, then waits until the
    /// containers are served again; the queues are then all stored and none loaded. Returns the seconds taken.
    /// </summary>
    private async Task<double> RestartAsync(LocalFarm farm, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        foreach (var id in farm.NodeIds)
        {
            farm.Kill(id);
        }
        var ids = farm.NodeIds;
        await Task.WhenAll(ids.Select(id => farm.RestartAsync(id, cancellationToken))).ConfigureAwait(false);
        using var watch = new FarmWatch(farm);
        while (clock.Elapsed < BalanceTimeout)
        {
            var status = await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false);
            if (FarmWatch.IsBalanced(status, farm.NodeIds, ContainersPerNode))
            {
                Console.Error.WriteLine(string.Create(Inv, $"perf: every node SIGKILLed and started again; containers served after {clock.Elapsed.TotalSeconds:0.0} s: {FarmWatch.Describe(status)}; nodes {string.Join(", ", farm.NodeIds.Select(id => $"{id} (pid {farm.Node(id).ProcessId})"))}"));
                return Math.Round(clock.Elapsed.TotalSeconds, 2);
            }

            await Task.Delay(200, cancellationToken).ConfigureAwait(false);
        }

        throw new TimeoutException($"the restarted farm did not serve its containers within {BalanceTimeout.TotalSeconds:0} s");
    }

    /// <summary>One node: its one container. Three: 2 containers per node (or --containers-per-node), balanced, so the queues spread over them.</summary>
    private async Task<int> PrepareContainersAsync(LocalFarm farm, FarmAdministrationClient admin, CancellationToken cancellationToken)
    {
        var existing = (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false)).Count;
        if (options.Nodes == 1 && ContainersPerNode <= existing)
        {
            return existing;
        }

        var wanted = options.Nodes * ContainersPerNode;
        for (var i = existing; i < wanted; i++)
        {
            await admin.CreateContainerAsync(cancellationToken).ConfigureAwait(false);
        }

        using var watch = new FarmWatch(farm);
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < BalanceTimeout)
        {
            var status = await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false);
            if (FarmWatch.IsBalanced(status, farm.NodeIds, ContainersPerNode))
            {
                Console.Error.WriteLine($"perf: {wanted} containers, balanced: {FarmWatch.Describe(status)}");
                return wanted;
            }

            await Task.Delay(200, cancellationToken).ConfigureAwait(false);
        }

        throw new TimeoutException($"the {options.Nodes}-node farm did not balance its {wanted} containers within {BalanceTimeout.TotalSeconds:0} s");
    }

    /// <summary>The first <see cref="SerialQueues"/> one at a time, the rest with --create-concurrency calls in flight.</summary>
    private async Task<QueueCreation> CreateQueuesAsync(FarmAdministrationClient admin, IReadOnlyList<string> names, CancellationToken cancellationToken)
    {
        var serialCount = Math.Min(SerialQueues, names.Count);
        var serial = await CreatePhaseAsync(admin, names.Take(serialCount).ToList(), 1, 0, cancellationToken).ConfigureAwait(false);
        Console.Error.WriteLine(string.Create(Inv, $"perf: created {serial.Queues} queues one by one in {serial.Seconds:0.0} s ({serial.PerSec:0}/s, p50 {serial.P50Ms:0.0} ms, p99 {serial.P99Ms:0.0} ms)"));
        CreationPhase? concurrent = null;
        if (names.Count > serialCount)
        {
            concurrent = await CreatePhaseAsync(admin, names.Skip(serialCount).ToList(), options.CreateConcurrency, serialCount, cancellationToken).ConfigureAwait(false);
            Console.Error.WriteLine(string.Create(Inv, $"perf: created {concurrent.Queues} queues {concurrent.Concurrency} at a time in {concurrent.Seconds:0.0} s ({concurrent.PerSec:0}/s, p50 {concurrent.P50Ms:0.0} ms, p99 {concurrent.P99Ms:0.0} ms)"));
        }

        var total = serial.Seconds + (concurrent?.Seconds ?? 0);
        return new QueueCreation(names.Count, Math.Round(total, 2), total > 0 ? Math.Round(names.Count / total, 1) : 0, serial, concurrent);
    }

    /// <summary>Creates per second over each 1,000 queues, against the queues the farm had: whether creating gets slower as the farm fills.</summary>
    private static ResultChart CreationChart(QueueCreation creation) => new(
        "many-queues-create.png",
        $"Creating {creation.Queues:#,0} queues ({creation.Concurrent?.Concurrency ?? 1} calls in flight after the first {creation.Serial.Queues}): creates/s against queues already in the farm",
        "queues in the farm", "queues created per second (over each 1,000)", false, false,
        [new ResultChartSeries("CreateQueueAsync", [.. (creation.Concurrent?.Progress ?? [])])]);

    private static async Task<CreationPhase> CreatePhaseAsync(FarmAdministrationClient admin, IReadOnlyList<string> names, int concurrency, int existing, CancellationToken cancellationToken)
    {
        var points = new List<double[]>();
        var latency = new LatencyHistogram();
        var next = -1;
        var clock = Stopwatch.StartNew();
        var progress = Stopwatch.StartNew();
        var done = 0;

        async Task WorkerAsync()
        {
            int index;
            while ((index = Interlocked.Increment(ref next)) < names.Count)
            {
                var started = Stopwatch.GetTimestamp();
                await admin.CreateQueueAsync(new CreateQueueOptions(names[index]), cancellationToken).ConfigureAwait(false);
                latency.Record((long)Stopwatch.GetElapsedTime(started).TotalMicroseconds);
                var count = Interlocked.Increment(ref done);
                if (count % 1000 == 0)
                {
                    lock (progress)
                    {
                        Console.Error.WriteLine(string.Create(Inv, $"perf:   {count} of {names.Count} created ({count / clock.Elapsed.TotalSeconds:0}/s, the last 1,000 at {1000 / progress.Elapsed.TotalSeconds:0}/s)"));
                        points.Add([existing + count, Math.Round(1000 / progress.Elapsed.TotalSeconds, 1)]);
                        progress.Restart();
                    }
                }
            }
        }

        await Task.WhenAll(Enumerable.Range(0, concurrency).Select(_ => Task.Run(WorkerAsync, cancellationToken))).ConfigureAwait(false);
        var seconds = clock.Elapsed.TotalSeconds;
        return new CreationPhase(
            names.Count, concurrency, Math.Round(seconds, 2), seconds > 0 ? Math.Round(names.Count / seconds, 1) : 0,
            Math.Round(latency.PercentileMs(0.5), 2), Math.Round(latency.PercentileMs(0.99), 2), Math.Round(latency.PercentileMs(1.0), 2))
        {
            Progress = points,
        };
    }

    /// <summary>Messages left in this run's queues (every state); -1 when the counts could not be read.</summary>
    private static async Task<long> LeftInQueuesAsync(FarmAdministrationClient admin, CancellationToken cancellationToken)
    {
        try
        {
            var all = await admin.ListQueuesWithRuntimePropertiesAsync(cancellationToken).ConfigureAwait(false);
            return all.Where(q => q.Properties.Name.StartsWith("mq-", StringComparison.Ordinal)).Sum(q => q.Runtime.TotalMessageCount);
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not read the queues' message counts: {e.Message}");
            return -1;
        }
    }
}
