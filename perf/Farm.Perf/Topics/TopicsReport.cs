namespace Farm.Perf.Topics;

/// <summary>perf/results/topics.json: every figure of one run, side by side (snake_case; see perf/README.md).</summary>
internal sealed record TopicsReport(
    string Scenario,
    bool Passed,
    WarmupFigures? Warmup,
    QueueVsTopicFigures? QueueVsTopic,
    FanoutFigures? Fanout,
    OrderingFigures? Ordering,
    TopicsSettings Settings,
    MachineInfo Machine,
    DateTimeOffset Timestamp,
    string Command,
    double TotalS);

/// <summary>One load on one entity: its window and the exactly-once check of the whole run.</summary>
/// <param name="DeliveriesPerSec">Deliveries received and completed per second in the window (a queue: messages).</param>
/// <param name="InPerSec">Messages acknowledged to senders per second in the window.</param>
/// <param name="P50Ms">Send-to-receive latency over the windows; null when nothing was measured (the warm-up).</param>
internal sealed record LoadFigures(
    string Entity,
    double DeliveriesPerSec,
    double InPerSec,
    double? P50Ms,
    double? P90Ms,
    double? P99Ms,
    double? P999Ms,
    long Deliveries,
    long MessagesIn,
    double DurationS,
    IReadOnlyList<double>? WindowsDeliveriesPerSec,
    CpuFigures? Cpu,
    Verification Verification);

/// <summary>The shared warm-up: not measured, but checked like the rest.</summary>
internal sealed record WarmupFigures(double DurationS, IReadOnlyList<LoadFigures> Loads);

internal sealed record QueueVsTopicFigures(
    LoadFigures Queue,
    LoadFigures Topic1Sub,
    double Ratio,
    double? RatioPerNodeCpu,
    double Target,
    double SbwsRatio,
    bool MetTarget,
    string Order);

internal sealed record FanoutFigures(
    int Subscriptions,
    double DeliveriesPerSec,
    double InPerSec,
    LoadFigures Run,
    double Target,
    double SbwsDeliveriesPerSec,
    double RatioToTarget,
    bool MetTarget,
    double CreateSubscriptionsS,
    string ReceiveStyle,
    double? DeliveriesPerNodeCpuS,
    double? DeliveriesPerCpuS,
    // The same load paced at half the messages/s the unpaced run reached (its p99 is the backlog
    // cap's age): the latency of a rate the farm keeps up with. Null when --fanout-rate was given.
    LoadFigures? Paced = null,
    // The same load (its batches) paced at the target's rate: what the target judges (its rate
    // delivered, its p99). Null when --fanout-rate was given.
    LoadFigures? AtTarget = null);

internal sealed record OrderingFigures(
    int Subscriptions,
    double AverageMatches,
    LoadFigures On,
    LoadFigures Off,
    double Ratio,
    double RatioIn,
    double? RatioPerNodeCpu,
    double Target,
    double SbwsRatio,
    bool MetTarget,
    string Filter,
    string Order);

internal sealed record TopicsSettings(
    double WarmupS,
    double RunWarmupS,
    double DurationS,
    int Rounds,
    int Size,
    QueueVsTopicSettings QueueVsTopic,
    FanoutSettings Fanout,
    OrderingSettings Ordering,
    bool ExternalFarm);

internal sealed record QueueVsTopicSettings(int Senders, int Inflight, int Batch, int Receivers, int Prefetch, int Concurrency, bool SupportOrdering);

internal sealed record FanoutSettings(int Subscriptions, int Senders, int Batch, int RatePerSec, long MaxBacklog, int Clients, int Prefetch, string ReceiveStyle, int Concurrency, bool SupportOrdering);

internal sealed record OrderingSettings(int Subscriptions, int Senders, int Inflight, int Batch, int Clients, int Prefetch, long MaxBacklog);
