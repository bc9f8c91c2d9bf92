using System.Text.Json.Serialization;
using Farm.Perf.Load;

namespace Farm.Perf.Sweeps;

/// <summary>
/// perf/results/&lt;sweep&gt;.json: the shape of single-queue.json (<c>farm</c> with msgs_per_sec and
/// latency percentiles, <c>peer</c> and <c>ratio</c> where a sweep compares two points, <c>machine</c>)
/// plus every point measured and the charts the report draws from them.
/// </summary>
internal sealed record SweepReport(
    string Scenario,
    SweepPoint Farm,
    SweepPoint? Peer,
    double? Ratio,
    IReadOnlyList<SweepPoint> Points,
    IReadOnlyList<ChartSpec> Charts,
    SweepWarmup Warmup,
    bool Passed,
    double TotalS,
    MachineInfo Machine,
    DateTimeOffset Timestamp,
    string Command)
{
    /// <summary>What the scenario adds (a target and whether it was met, a second ratio): snake_case keys, written as top-level fields.</summary>
    [JsonExtensionData]
    public Dictionary<string, object?>? Figures { get; init; }
}

/// <summary>One configuration measured: its own queue, its own warm-up, window, drain and exactly-once check.</summary>
/// <param name="Name">What distinguishes the point ("batch 100", "receive-and-delete").</param>
/// <param name="X">The swept value, as charts plot it.</param>
/// <param name="MsgsPerSec">Received (and settled) per second in the window.</param>
/// <param name="SentPerSec">Acknowledged sends per second in the window.</param>
internal sealed record SweepPoint(
    string Name,
    double X,
    double MsgsPerSec,
    double SentPerSec,
    double P50Ms,
    double P90Ms,
    double P99Ms,
    double P999Ms,
    long Messages,
    double DurationS,
    PointSettings Settings,
    Verification Verification,
    CpuFigures? Cpu);

/// <summary>The load of a point.</summary>
/// <param name="Settlement">sdk-coalesced (concurrent CompleteMessageAsync calls, which the SDK sends as one Settle call), one-by-one, or none (receive-and-delete).</param>
/// <param name="Route">How the clients reach the queue's owner.</param>
internal sealed record PointSettings(
    int Senders,
    int Inflight,
    int Batch,
    int Size,
    double RatePerSec,
    long MaxBacklog,
    int Receivers,
    string ReceiveStyle,
    string ReceiveMode,
    string Settlement,
    int Prefetch,
    int Concurrency,
    double WarmupS,
    string Route);

/// <summary>The warm-up at the start: its length and the exactly-once check of each load it ran.</summary>
internal sealed record SweepWarmup(double Seconds, IReadOnlyList<Verification> Verifications);

/// <summary>
/// A chart of a result (the report renders every chart of every results/*.json to
/// results/charts/&lt;file&gt;): x/y series, optionally logarithmic axes, optionally named x ticks.
/// </summary>
internal sealed record ChartSpec(string File, string Title, string XLabel, string YLabel, bool XLog, bool YLog, IReadOnlyList<ChartSeries> Series)
{
    /// <summary>Ticks at these x values with these labels instead of numbers (for categories).</summary>
    public IReadOnlyList<ChartTick>? XTicks { get; init; }

    /// <summary>"bar" for categories; null: lines.</summary>
    public string? Kind { get; init; }
}

/// <summary>One line of a chart; each point is [x, y].</summary>
internal sealed record ChartSeries(string Name, IReadOnlyList<double[]> Points);

internal sealed record ChartTick(double X, string Label);
