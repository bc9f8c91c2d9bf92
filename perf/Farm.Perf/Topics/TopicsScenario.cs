using System.Diagnostics;
using System.Globalization;
using Farm.Client;
using Farm.Perf.Load;
using Farm.Perf.SingleQueue;

namespace Farm.Perf.Topics;

/// <summary>
/// The topic figures of issue 4, side by side from one run against one farm:
/// <list type="number">
/// <item>queue vs topic-1-sub: the single-queue load on a queue and on a topic with one <c>$Default</c>
/// subscription, back to back (target: the topic at least 0.95 x the queue).</item>
/// <item>fan-out: a topic with 1,000 <c>$Default</c> subscriptions, a modest rate in, every
/// subscription received and completed (issue 14's target: 100,000 deliveries/s, p99 under 200 ms).</item>
/// <item>ordering on vs off: 8 concurrent senders into a topic of 64 subscriptions with SQL filters,
/// SupportOrdering switched on the live topic (issue 14's target: on at least 0.8 x off).</item>
/// </list>
/// A shared warm-up comes first (the node tiers its hot code up under load). Every load ends with
/// a drain and the exactly-once check per subscription; one failed check fails the run.
/// </summary>
internal sealed class TopicsScenario(PerfOptions options, string connectionString, int? nodeProcessId)
{
    public const double QueueRatioTarget = 0.95;
    public const double SbwsQueueRatio = 0.71;   // 14,200 / 20,000 msg/s (ANCHORS.md)
    public const double FanoutTarget = 100_000;
    public const double FanoutP99TargetMs = 200;

    /// <summary>How much of the target rate the run paced at it must deliver to count (a paced run delivers a little under its pace).</summary>
    public const double TargetRateShare = 0.98;
    public const double SbwsFanout = 26_000;

    /// <summary>
    /// The paced fan-out's load before its window: 1,000 receivers take seconds to open their links,
    /// and a message sent before they all have waits for that, not for the farm (with the usual
    /// 3 s its p99 at 2 msg/s was 3.2 s; with 12 s, 150 ms).
    /// </summary>
    private static readonly TimeSpan PacedFanoutWarmup = TimeSpan.FromSeconds(15);
    public const double OrderingRatioTarget = 0.8;
    public const double SbwsOrderingRatio = 0.33; // "a factor of three"

    private const int CreateParallelism = 8;
    private const int OrderingClients = 4;
    private const int OrderingPrefetch = 100;
    private const long OrderingBacklog = 50_000;
    private const string OrderingFilterDescription =
        "kind IN ('order', 'invoice') AND (region = 'r<i % 8>' OR amount < <10 + (7i) % 40>) AND customer LIKE 'c%' (message n: kind by n % 3, region r<n % 8>, amount n % 100, customer c<n % 1000>)";

    private static readonly string[] Kinds = ["refund", "order", "invoice"];

    private readonly string _suffix = Guid.NewGuid().ToString("N")[..8];
    private readonly CpuMeter _cpu = new(nodeProcessId);

    private string QueueName => $"perf-q-{_suffix}";

    private string Topic1Name => $"perf-t1-{_suffix}";

    private string FanoutName => $"perf-fan-{_suffix}";

    private string OrderingName => $"perf-ord-{_suffix}";

    private bool Runs(string part) => options.Only.Contains(part);

    public async Task<TopicsReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        var total = Stopwatch.StartNew();
        using var admin = new FarmAdministrationClient(connectionString);
        Console.Error.WriteLine($"perf: topics on {connectionString}: shared warm-up {Seconds(options.Warmup)} s, then {Seconds(options.Duration)} s measured per side in {options.Rounds} rounds, {Seconds(options.RunWarmup)} s of load before each window ({string.Join(", ", PerfOptions.TopicsParts.Where(Runs))})");

        var created = new List<(string Name, bool Topic)>();
        try
        {
            if (Runs("queue-vs-topic"))
            {
                await admin.CreateQueueAsync(QueueName, cancellationToken).ConfigureAwait(false);
                created.Add((QueueName, false));
                await admin.CreateTopicAsync(new CreateTopicOptions(Topic1Name), cancellationToken).ConfigureAwait(false);
                created.Add((Topic1Name, true));
                await admin.CreateSubscriptionAsync(Topic1Name, "s0", cancellationToken).ConfigureAwait(false);
            }

            if (Runs("ordering"))
            {
                await admin.CreateTopicAsync(new CreateTopicOptions(OrderingName) { SupportOrdering = true }, cancellationToken).ConfigureAwait(false);
                created.Add((OrderingName, true));
                await ForEachAsync(options.OrderingSubscriptions, i => admin.CreateSubscriptionAsync(
                    new CreateSubscriptionOptions(OrderingName, OrderingSubscription(i)),
                    new CreateRuleOptions("filter", new SqlRuleFilter(OrderingFilter(i))),
                    cancellationToken), cancellationToken).ConfigureAwait(false);
            }

            var warmup = await WarmUpAsync(admin, cancellationToken).ConfigureAwait(false);

            QueueVsTopicFigures? queueVsTopic = null;
            if (Runs("queue-vs-topic"))
            {
                // Rounds in ABBA order (topic, queue, queue, topic, ...), so a machine that gets busier
                // or quieter during the run, and whatever warming up is left, weigh on both alike.
                var topicSide = new Side(Topic1Spec(admin));
                var queueSide = new Side(QueueSpec(admin));
                await RunPairAsync(topicSide, queueSide, before: null, cancellationToken).ConfigureAwait(false);
                var topic = await FiguresAsync(topicSide, cancellationToken).ConfigureAwait(false);
                var queue = await FiguresAsync(queueSide, cancellationToken).ConfigureAwait(false);
                var ratio = Ratio(topic.DeliveriesPerSec, queue.DeliveriesPerSec);
                queueVsTopic = new QueueVsTopicFigures(
                    queue, topic, ratio, RatioPerNodeCpu(topic, queue), QueueRatioTarget, SbwsQueueRatio, ratio >= QueueRatioTarget, PairOrder("topic-1-sub", "queue"));
                Console.Error.WriteLine(QueueVsTopicLine(queueVsTopic));
            }

            FanoutFigures? fanout = null;
            if (Runs("fanout"))
            {
                fanout = await RunFanoutAsync(admin, created, cancellationToken).ConfigureAwait(false);
                Console.Error.WriteLine(FanoutLine(fanout));
            }

            OrderingFigures? ordering = null;
            if (Runs("ordering"))
            {
                // One topic, switched with UpdateTopicAsync before each run (it is drained in between).
                var onSide = new Side(OrderingSpec(admin, orderRequired: true) with { Label = "ordering-on" });
                var offSide = new Side(OrderingSpec(admin, orderRequired: false) with { Label = "ordering-off" });
                await RunPairAsync(onSide, offSide, (side, ct) => SetOrderingAsync(admin, OrderingName, side == onSide, ct), cancellationToken).ConfigureAwait(false);
                var on = await FiguresAsync(onSide, cancellationToken).ConfigureAwait(false);
                var off = await FiguresAsync(offSide, cancellationToken).ConfigureAwait(false);
                var ratio = Ratio(on.DeliveriesPerSec, off.DeliveriesPerSec);
                var averageMatches = Math.Round(Enumerable.Range(0, 3000).Average(n => OrderingFanout().CountFor(n)), 2);
                ordering = new OrderingFigures(
                    options.OrderingSubscriptions, averageMatches, on, off, ratio, Ratio(on.InPerSec, off.InPerSec), RatioPerNodeCpu(on, off),
                    OrderingRatioTarget, SbwsOrderingRatio, ratio >= OrderingRatioTarget, OrderingFilterDescription,
                    PairOrder("ordering-on", "ordering-off") + "; SupportOrdering switched with UpdateTopicAsync on the live topic before each");
                Console.Error.WriteLine(OrderingLine(ordering));
            }

            var passed = (warmup?.Loads ?? []).Concat(new[] { queueVsTopic?.Queue, queueVsTopic?.Topic1Sub, fanout?.Run, fanout?.Paced, fanout?.AtTarget, ordering?.On, ordering?.Off }.OfType<LoadFigures>())
                .All(l => l.Verification.Passed);
            return new TopicsReport(
                "topics", passed, warmup, queueVsTopic, fanout, ordering, Settings(), MachineInfo.Current(), DateTimeOffset.UtcNow, command,
                Math.Round(total.Elapsed.TotalSeconds, 1));
        }
        finally
        {
            foreach (var (name, topic) in created)
            {
                await DeleteQuietlyAsync(admin, name, topic).ConfigureAwait(false);
            }
        }
    }

    public static string QueueVsTopicLine(QueueVsTopicFigures f) => string.Create(CultureInfo.InvariantCulture,
        $"topics: queue vs topic-1-sub: queue {f.Queue.DeliveriesPerSec:0} msg/s (p50 {f.Queue.P50Ms:0.0} ms), topic with 1 subscription {f.Topic1Sub.DeliveriesPerSec:0} msg/s (p50 {f.Topic1Sub.P50Ms:0.0} ms); ratio {f.Ratio:0.00}{PerCpu(f.RatioPerNodeCpu)} (target >= {f.Target:0.00}, SBWS {f.SbwsRatio:0.00}) -> {Met(f.MetTarget)}");

    public static string FanoutLine(FanoutFigures f) => string.Create(CultureInfo.InvariantCulture,
        $"topics: topic-{f.Subscriptions}-subs: {f.DeliveriesPerSec:0} deliveries/s ({f.InPerSec:0} msg/s in, p50 {f.Run.P50Ms:0} ms, p99 {f.Run.P99Ms:0} ms{NodeCpu(f.Run)}); {f.RatioToTarget:0.00} x the {f.Target:0} target, p99 under {FanoutP99TargetMs:0} ms (SBWS three nodes {f.SbwsDeliveriesPerSec:0}){AtTargetText(f.AtTarget)} -> {Met(f.MetTarget)}{PacedText(f.Paced)}");

    private static string AtTargetText(LoadFigures? atTarget) => atTarget is null ? string.Empty : string.Create(CultureInfo.InvariantCulture,
        $"; paced at the target rate: {atTarget.DeliveriesPerSec:0} deliveries/s ({atTarget.InPerSec:0} msg/s in), p50 {atTarget.P50Ms:0} ms, p99 {atTarget.P99Ms:0} ms{NodeCpu(atTarget)}");

    private static string PacedText(LoadFigures? paced) => paced is null ? string.Empty : string.Create(CultureInfo.InvariantCulture,
        $"; paced at half that rate, one message a send: {paced.DeliveriesPerSec:0} deliveries/s ({paced.InPerSec:0} msg/s in), p50 {paced.P50Ms:0} ms, p99 {paced.P99Ms:0} ms");

    public static string OrderingLine(OrderingFigures f) => string.Create(CultureInfo.InvariantCulture,
        $"topics: ordering on vs off ({f.Subscriptions} SQL-filtered subscriptions, {f.AverageMatches:0.#} matches a message): on {f.On.DeliveriesPerSec:0} deliveries/s ({f.On.InPerSec:0} msg/s in), off {f.Off.DeliveriesPerSec:0} deliveries/s ({f.Off.InPerSec:0} msg/s in); ratio on/off {f.Ratio:0.00}{PerCpu(f.RatioPerNodeCpu)} (target >= {f.Target:0.0}, SBWS {f.SbwsRatio:0.00}) -> {Met(f.MetTarget)}; out of order: on {f.On.Verification.OutOfOrder}, off {f.Off.Verification.OutOfOrder}");

    private static string PerCpu(double? ratio) => ratio is { } r ? string.Create(CultureInfo.InvariantCulture, $", per node CPU-second {r:0.00}") : string.Empty;

    private static string NodeCpu(LoadFigures f) => f.Cpu is { NodeCores: { } node } cpu
        ? string.Create(CultureInfo.InvariantCulture, $"; node {node:0.00} cores, load generator {cpu.LoadGeneratorCores:0.00}, other work {cpu.OtherCores:0.00}")
        : string.Empty;

    private static string Met(bool met) => met ? "target met" : "TARGET MISSED";

    // --- the shared warm-up -------------------------------------------------------------------

    /// <summary>
    /// Loads the queue, the one-subscription topic and the filtered topic (ordering on) at once, so
    /// the node's queue, topic, rule-evaluation and ordered-commit code is hot before anything is
    /// measured. Checked like every other load.
    /// </summary>
    private async Task<WarmupFigures?> WarmUpAsync(FarmAdministrationClient admin, CancellationToken cancellationToken)
    {
        if (options.Warmup <= TimeSpan.Zero)
        {
            return null;
        }

        // Phases rather than everything at once: the filtered topic's fan-out would hold up the
        // queue's group commits (one container, one commit loop) and leave its code cold.
        var phases = new List<List<LoadSpec>>();
        if (Runs("queue-vs-topic"))
        {
            phases.Add([QueueSpec(admin) with { Label = "warm-up queue" }, Topic1Spec(admin) with { Label = "warm-up topic-1-sub" }]);
        }

        if (Runs("ordering"))
        {
            phases.Add([OrderingSpec(admin, orderRequired: true) with { Label = "warm-up ordering-on" }]);
        }

        if (phases.Count == 0)
        {
            return null;
        }

        var results = new List<LoadFigures>();
        var phaseLength = options.Warmup / phases.Count;
        var clock = Stopwatch.StartNew();
        foreach (var phase in phases)
        {
            var sides = phase.Select(spec => new Side(spec)).ToList();
            var loads = sides.Select(side => RunningLoad.Start(side.Spec, connectionString)).ToList();
            var phaseClock = Stopwatch.StartNew();
            await Task.WhenAll(sides.Select(side => LoadRun.WatchAsync(side.Spec.State, phaseLength, side.Spec.Label, cancellationToken))).ConfigureAwait(false);
            var seconds = phaseClock.Elapsed.TotalSeconds;
            for (var i = 0; i < sides.Count; i++)
            {
                var state = sides[i].Spec.State;
                sides[i].Windows.Add(new Window(seconds, state.Acked.Count, state.Received.Count));
                sides[i].Drained = await loads[i].StopAsync(cancellationToken).ConfigureAwait(false);
                results.Add(await FiguresAsync(sides[i], cancellationToken).ConfigureAwait(false));
            }
        }

        return new WarmupFigures(Math.Round(clock.Elapsed.TotalSeconds, 3), results);
    }

    // --- the loads ------------------------------------------------------------------------------

    private LoadSpec QueueSpec(FarmAdministrationClient admin)
    {
        var state = new RunState();
        return new LoadSpec(
            "queue", QueueName, state,
            SingleQueueScenario.SendSettingsOf(options),
            ReceiveLoad.OnePath(SingleQueueScenario.ReceiveSettingsOf(options), connectionString, QueueName, options.Receivers, state),
            Decorate: null,
            LeftAsync: ct => LoadRun.LeftInQueueAsync(admin, QueueName, ct),
            OrderRequired: false,
            Entity: "queue");
    }

    private LoadSpec Topic1Spec(FarmAdministrationClient admin)
    {
        var state = new RunState();
        return new LoadSpec(
            "topic-1-sub", Topic1Name, state,
            SingleQueueScenario.SendSettingsOf(options),
            ReceiveLoad.OnePath(SingleQueueScenario.ReceiveSettingsOf(options), connectionString, FarmEntityPath.FormatSubscriptionPath(Topic1Name, "s0"), options.Receivers, state),
            Decorate: null,
            LeftAsync: ct => LeftInTopicAsync(admin, Topic1Name, ct),
            OrderRequired: false,
            Entity: "topic");
    }

    /// <param name="orderRequired">SupportOrdering is on for the whole load: a delivery out of sequence order fails the check.</param>
    private LoadSpec OrderingSpec(FarmAdministrationClient admin, bool orderRequired)
    {
        var state = new RunState(OrderingFanout(), trackOrder: true);
        var receivers = Enumerable.Range(0, options.OrderingSubscriptions)
            .Select(i => new ReceiverPlan(FarmEntityPath.FormatSubscriptionPath(OrderingName, OrderingSubscription(i)), i))
            .ToList();
        return new LoadSpec(
            "ordering", OrderingName, state,
            new SendSettings(options.OrderingSenders, 1, options.OrderingBatch, options.Size, MaxBacklog: OrderingBacklog),
            new ReceiveLoad(new ReceiveSettings(ReceiveStyle.Receiver, OrderingPrefetch, OrderingPrefetch, OrderingPrefetch), connectionString, receivers, OrderingClients, state),
            Decorate: DecorateForFilters,
            LeftAsync: ct => LeftInTopicAsync(admin, OrderingName, ct),
            OrderRequired: orderRequired,
            Entity: "topic");
    }

    private async Task<FanoutFigures> RunFanoutAsync(FarmAdministrationClient admin, List<(string Name, bool Topic)> created, CancellationToken cancellationToken)
    {
        var subscriptions = options.Subscriptions;
        await admin.CreateTopicAsync(new CreateTopicOptions(FanoutName), cancellationToken).ConfigureAwait(false);
        created.Add((FanoutName, true));
        var clock = Stopwatch.StartNew();
        await ForEachAsync(subscriptions, i => admin.CreateSubscriptionAsync(FanoutName, FanoutSubscription(i), cancellationToken), cancellationToken).ConfigureAwait(false);
        var createSeconds = Math.Round(clock.Elapsed.TotalSeconds, 1);
        Console.Error.WriteLine($"perf: created {subscriptions} subscriptions of {FanoutName} in {createSeconds} s");

        var receivers = Enumerable.Range(0, subscriptions)
            .Select(i => new ReceiverPlan(FarmEntityPath.FormatSubscriptionPath(FanoutName, FanoutSubscription(i)), i))
            .ToList();
        LoadSpec Spec(string label, int rate, int batch, int inFlight)
        {
            var state = new RunState(new Fanout(subscriptions), trackOrder: true);
            return new LoadSpec(
                label, FanoutName, state,
                new SendSettings(options.FanoutSenders, inFlight, batch, options.Size, rate, options.FanoutBacklog),
                new ReceiveLoad(FanoutReceiveSettings(), connectionString, receivers, options.FanoutClients, state),
                Decorate: null,
                LeftAsync: ct => LeftInTopicAsync(admin, FanoutName, ct),
                OrderRequired: false,
                Entity: "topic");
        }
        var side = new Side(Spec($"topic-{subscriptions}-subs", options.FanoutRate, options.FanoutBatch, inFlight: 1));
        await RunRoundAsync(side, side.Spec.Label, options.Duration, cancellationToken).ConfigureAwait(false);
        var run = await FiguresAsync(side, cancellationToken).ConfigureAwait(false);
        LoadFigures? paced = null;
        if (options.FanoutRate == 0 && run.InPerSec >= 2)
        {
            // Unpaced, the senders run as far ahead as the backlog cap lets them, so the p99 above is
            // that backlog's age. Half the rate it reached, sent one message at a time (a batch of 20
            // is 20,000 deliveries at once, whose last waits for the rest) with sends overlapping (so
            // the pace holds while one waits for its commit), shows the latency of a load the farm
            // keeps up with.
            var pacedSide = new Side(Spec($"topic-{subscriptions}-subs-paced", (int)(run.InPerSec / 2), batch: 1, inFlight: 8));
            await RunRoundAsync(pacedSide, pacedSide.Spec.Label, options.Duration, cancellationToken, PacedFanoutWarmup).ConfigureAwait(false);
            paced = await FiguresAsync(pacedSide, cancellationToken).ConfigureAwait(false);
        }
        LoadFigures? atTarget = null;
        var targetRate = (int)Math.Ceiling(FanoutTarget / subscriptions);
        if (options.FanoutRate == 0)
        {
            // The target asks for 100,000 deliveries/s with p99 under 200 ms: the unpaced run's p99
            // is its backlog cap's age, and an overloaded node spends more a delivery (the backlog's
            // messages in memory and in flight), so the target is judged on the same load (the same
            // batches) paced at its rate, sends overlapping so the pace holds while one commits.
            var targetSide = new Side(Spec($"topic-{subscriptions}-subs-at-target", targetRate, options.FanoutBatch, inFlight: 8));
            await RunRoundAsync(targetSide, targetSide.Spec.Label, options.Duration, cancellationToken, PacedFanoutWarmup).ConfigureAwait(false);
            atTarget = await FiguresAsync(targetSide, cancellationToken).ConfigureAwait(false);
        }
        var met = options.FanoutRate == 0
            ? atTarget is not null && atTarget.DeliveriesPerSec >= FanoutTarget * TargetRateShare && atTarget.P99Ms < FanoutP99TargetMs
            : run.DeliveriesPerSec >= FanoutTarget && run.P99Ms < FanoutP99TargetMs;
        return new FanoutFigures(
            subscriptions, run.DeliveriesPerSec, run.InPerSec, run, FanoutTarget, SbwsFanout,
            Ratio(run.DeliveriesPerSec, FanoutTarget), met, createSeconds,
            options.FanoutStyle.ToString().ToLowerInvariant(),
            run.Cpu?.NodeCores is > 0 and var node ? Math.Round(run.DeliveriesPerSec / node) : null,
            run.Cpu?.NodeCores is > 0 and var both ? Math.Round(run.DeliveriesPerSec / (both + run.Cpu.LoadGeneratorCores)) : null,
            paced,
            atTarget);
    }

    private ReceiveSettings FanoutReceiveSettings()
        => new(options.FanoutStyle, options.FanoutPrefetch,
            options.FanoutConcurrency ?? (options.FanoutStyle == ReceiveStyle.Processor ? 1 : Math.Max(1, options.FanoutPrefetch)),
            Math.Max(1, options.FanoutPrefetch));

    /// <summary>
    /// <paramref name="a"/> and <paramref name="b"/> in <see cref="PerfOptions.Rounds"/> rounds of
    /// <c>--duration / rounds</c> each, in ABBA order; <paramref name="before"/> runs before each run.
    /// </summary>
    private async Task RunPairAsync(Side a, Side b, Func<Side, CancellationToken, Task>? before, CancellationToken cancellationToken)
    {
        var window = options.Duration / options.Rounds;
        for (var round = 0; round < options.Rounds; round++)
        {
            foreach (var side in round % 2 == 0 ? new[] { a, b } : [b, a])
            {
                if (before is not null)
                {
                    await before(side, cancellationToken).ConfigureAwait(false);
                }

                await RunRoundAsync(side, $"{side.Spec.Label} (round {round + 1}/{options.Rounds})", window, cancellationToken).ConfigureAwait(false);
            }
        }
    }

    private string PairOrder(string a, string b)
        => options.Rounds == 1 ? $"{a}, then {b}" : $"{options.Rounds} rounds in ABBA order: {a}, {b}, {b}, {a}, ...";

    /// <summary>Starts the side's load, warms up, measures one window, then stops it and drains (checked at the end).</summary>
    /// <param name="warmup">Load before the window; <c>--run-warmup</c> when null.</param>
    private async Task RunRoundAsync(Side side, string label, TimeSpan duration, CancellationToken cancellationToken, TimeSpan? warmup = null)
    {
        var load = RunningLoad.Start(side.Spec, connectionString);
        var window = await LoadRun.MeasureAsync(side.Spec.State, label, warmup ?? options.RunWarmup, duration, cancellationToken, _cpu).ConfigureAwait(false);
        side.Windows.Add(window);
        side.Drained &= await load.StopAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>The side's figures over all its windows, and the exactly-once check over all its rounds.</summary>
    private static async Task<LoadFigures> FiguresAsync(Side side, CancellationToken cancellationToken)
    {
        var spec = side.Spec;
        var state = spec.State;
        var left = await spec.LeftAsync(cancellationToken).ConfigureAwait(false);
        var verification = LoadRun.Verify(state, left, side.Drained, spec.OrderRequired, spec.Entity);
        var seconds = side.Windows.Sum(w => w.Seconds);
        var delivered = side.Windows.Sum(w => w.Delivered);
        var acked = side.Windows.Sum(w => w.Acked);
        return new LoadFigures(
            spec.Label,
            seconds > 0 ? Math.Round(delivered / seconds, 1) : 0,
            seconds > 0 ? Math.Round(acked / seconds, 1) : 0,
            Percentile(state, 0.50),
            Percentile(state, 0.90),
            Percentile(state, 0.99),
            Percentile(state, 0.999),
            delivered,
            acked,
            Math.Round(seconds, 3),
            side.Windows.Count > 1 ? side.Windows.Select(w => w.DeliveredPerSec).ToList() : null,
            CpuOf(side.Windows),
            verification);
    }

    private static double? Percentile(RunState state, double quantile)
        => state.Latency.Count == 0 ? null : Math.Round(state.Latency.PercentileMs(quantile), 2);

    /// <summary>CPU use over several windows, weighted by their length.</summary>
    private static CpuFigures? CpuOf(IReadOnlyList<Window> windows)
    {
        var measured = windows.Where(w => w.Cpu is not null).ToList();
        var seconds = measured.Sum(w => w.Seconds);
        if (measured.Count == 0 || seconds <= 0)
        {
            return null;
        }

        double? Weighted(Func<CpuFigures, double?> pick)
            => measured.All(w => pick(w.Cpu!) is not null) ? Math.Round(measured.Sum(w => pick(w.Cpu!)!.Value * w.Seconds) / seconds, 2) : null;

        return new CpuFigures(
            Weighted(c => c.NodeCores), Weighted(c => c.LoadGeneratorCores) ?? 0, Weighted(c => c.MachineBusyCores), Weighted(c => c.OtherCores),
            measured[0].Cpu!.Cores);
    }

    /// <summary>a's deliveries per node CPU-second over b's: the ratio with the machine's other work taken out, roughly.</summary>
    private static double? RatioPerNodeCpu(LoadFigures a, LoadFigures b)
        => a.Cpu?.NodeCores is > 0 and var na && b.Cpu?.NodeCores is > 0 and var nb
            ? Ratio(a.DeliveriesPerSec / na, b.DeliveriesPerSec / nb)
            : null;

    /// <summary>What one load sends where, and how it is received and checked.</summary>
    private sealed record LoadSpec(
        string Label,
        string SendPath,
        RunState State,
        SendSettings Send,
        ReceiveLoad Receive,
        Action<FarmMessage, long>? Decorate,
        Func<CancellationToken, Task<long>> LeftAsync,
        bool OrderRequired,
        string Entity);

    /// <summary>One load measured in one or more rounds: one run state (so one exactly-once check) across them.</summary>
    private sealed class Side(LoadSpec spec)
    {
        public LoadSpec Spec { get; } = spec;

        public List<Window> Windows { get; } = [];

        /// <summary>Every round's drain ended with everything received.</summary>
        public bool Drained { get; set; } = true;
    }

    private sealed class RunningLoad
    {
        private readonly CancellationTokenSource _stopSending = new();
        private readonly CancellationTokenSource _stopReceiving = new();
        private readonly LoadSpec _spec;
        private Task _sending = Task.CompletedTask;
        private Task _receiving = Task.CompletedTask;

        private RunningLoad(LoadSpec spec) => _spec = spec;

        public static RunningLoad Start(LoadSpec spec, string connectionString)
        {
            var load = new RunningLoad(spec);
            load._receiving = spec.Receive.RunAsync(load._stopReceiving.Token);
            load._sending = new SendLoad(spec.Send, connectionString, spec.SendPath, spec.State, spec.Decorate).RunAsync(load._stopSending.Token);
            return load;
        }

        /// <summary>Stops the senders, lets the receivers take what is left, stops them; false when the drain timed out.</summary>
        public async Task<bool> StopAsync(CancellationToken cancellationToken)
        {
            try
            {
                await _stopSending.CancelAsync().ConfigureAwait(false);
                await _sending.ConfigureAwait(false);
                var drained = await LoadRun.DrainAsync(_spec.State, cancellationToken).ConfigureAwait(false);
                await _stopReceiving.CancelAsync().ConfigureAwait(false);
                await _receiving.ConfigureAwait(false);
                return drained;
            }
            finally
            {
                _stopSending.Dispose();
                _stopReceiving.Dispose();
            }
        }
    }

    // --- the ordering topic's filters -----------------------------------------------------------

    private static string OrderingSubscription(int i) => $"f{i:00}";

    private static string FanoutSubscription(int i) => $"s{i:0000}";

    /// <summary>Subscription i's SQL filter; <see cref="OrderingMatches"/> is the same condition in C#.</summary>
    private static string OrderingFilter(int i) => string.Create(CultureInfo.InvariantCulture,
        $"kind IN ('order', 'invoice') AND (region = 'r{i % 8}' OR amount < {AmountThreshold(i)}) AND customer LIKE 'c%'");

    private static int AmountThreshold(int i) => 10 + (7 * i % 40);

    private static bool OrderingMatches(long n, int i)
        => n % 3 != 0 && (n % 8 == i % 8 || n % 100 < AmountThreshold(i));

    private Fanout OrderingFanout() => new(options.OrderingSubscriptions, OrderingMatches);

    /// <summary>The application properties the filters read, from the message number.</summary>
    private static void DecorateForFilters(FarmMessage message, long n)
    {
        message.ApplicationProperties["kind"] = Kinds[n % 3];
        message.ApplicationProperties["region"] = string.Create(CultureInfo.InvariantCulture, $"r{n % 8}");
        message.ApplicationProperties["amount"] = n % 100;
        message.ApplicationProperties["customer"] = string.Create(CultureInfo.InvariantCulture, $"c{n % 1000}");
    }

    // --- helpers --------------------------------------------------------------------------------

    private TopicsSettings Settings() => new(
        options.Warmup.TotalSeconds,
        options.RunWarmup.TotalSeconds,
        options.Duration.TotalSeconds,
        options.Rounds,
        options.Size,
        new QueueVsTopicSettings(options.Senders, options.InFlight, options.Batch, options.Receivers, options.Prefetch, options.ReceiverConcurrency, SupportOrdering: false),
        new FanoutSettings(options.Subscriptions, options.FanoutSenders, options.FanoutBatch, options.FanoutRate, options.FanoutBacklog, options.FanoutClients,
            options.FanoutPrefetch, options.FanoutStyle.ToString().ToLowerInvariant(), FanoutReceiveSettings().Concurrency, SupportOrdering: false),
        new OrderingSettings(options.OrderingSubscriptions, options.OrderingSenders, 1, options.OrderingBatch, OrderingClients, OrderingPrefetch, OrderingBacklog),
        ExternalFarm: nodeProcessId is null);

    private static double Ratio(double a, double b) => b > 0 ? Math.Round(a / b, 3) : 0;

    private static string Seconds(TimeSpan t) => t.TotalSeconds.ToString("0.#", CultureInfo.InvariantCulture);

    /// <summary>Runs <paramref name="action"/> for 0..count-1, a few at a time.</summary>
    private static async Task ForEachAsync(int count, Func<int, Task> action, CancellationToken cancellationToken)
        => await Parallel.ForEachAsync(
            Enumerable.Range(0, count),
            new ParallelOptions { MaxDegreeOfParallelism = CreateParallelism, CancellationToken = cancellationToken },
            async (i, _) => await action(i).ConfigureAwait(false)).ConfigureAwait(false);

    private static async Task SetOrderingAsync(FarmAdministrationClient admin, string topic, bool on, CancellationToken cancellationToken)
    {
        var properties = await admin.GetTopicAsync(topic, cancellationToken).ConfigureAwait(false);
        properties.SupportOrdering = on;
        await admin.UpdateTopicAsync(properties, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>How long the topic may take to collect the copies its subscriptions no longer point at.</summary>
    private static readonly TimeSpan CopyCollectionWait = TimeSpan.FromSeconds(10);

    /// <summary>
    /// Messages still in the topic's subscriptions, plus copies the topic still stores; -1 when unknown.
    /// A copy goes in the sweep after its last pointer's delete committed (up to a few hundred ms after
    /// the last complete), so a non-zero count is read again until it is zero or
    /// <see cref="CopyCollectionWait"/> has passed: what is left then was never collected.
    /// </summary>
    private static async Task<long> LeftInTopicAsync(FarmAdministrationClient admin, string topic, CancellationToken cancellationToken)
    {
        try
        {
            var waited = Stopwatch.StartNew();
            while (true)
            {
                var subscriptions = await admin.ListSubscriptionsWithRuntimePropertiesAsync(topic, cancellationToken).ConfigureAwait(false);
                var stored = await admin.GetTopicRuntimePropertiesAsync(topic, cancellationToken).ConfigureAwait(false);
                var left = subscriptions.Sum(s => s.Runtime.TotalMessageCount) + stored.MessageCount;
                if (left == 0 || waited.Elapsed > CopyCollectionWait)
                {
                    if (left == 0 && waited.Elapsed > TimeSpan.FromSeconds(1))
                    {
                        Console.Error.WriteLine($"perf: {topic}: its stored copies were all collected {waited.Elapsed.TotalSeconds:0.0} s after the drain");
                    }
                    return left;
                }
                await Task.Delay(TimeSpan.FromMilliseconds(200), cancellationToken).ConfigureAwait(false);
            }
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not read the message counts of {topic}: {e.Message}");
            return -1;
        }
    }

    private static async Task DeleteQuietlyAsync(FarmAdministrationClient admin, string name, bool topic)
    {
        try
        {
            if (topic)
            {
                await admin.DeleteTopicAsync(name, CancellationToken.None).ConfigureAwait(false);
            }
            else
            {
                await admin.DeleteQueueAsync(name, CancellationToken.None).ConfigureAwait(false);
            }
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not delete {name}: {e.Message}");
        }
    }
}
