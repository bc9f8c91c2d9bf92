namespace Farm.Perf.Chain;

/// <summary>The JSON result of chain (snake_case names; see perf/README.md).</summary>
/// <param name="Farm">The figures of the highest rate, the target's point (all points are in <see cref="Points"/>).</param>
internal sealed record ChainReport(
    string Scenario,
    int Queues,
    ChainFarmFigures Farm,
    IReadOnlyList<ChainPoint> Points,
    ChainTarget Target,
    IReadOnlyList<ResultChart> Charts,
    ChainSettings Settings,
    MachineInfo Machine,
    DateTimeOffset Timestamp,
    string Command);

/// <param name="MsgsPerSec">Messages handled per second by all the chain's handlers together (each hop counts: rate x queues), the figure NServiceBus's 1,875 msg/s compares with.</param>
/// <param name="EndMsgsPerSec">Messages out of the end of the chain per second.</param>
internal sealed record ChainFarmFigures(
    double RatePerQueue,
    double MsgsPerSec,
    double EndMsgsPerSec,
    double P50Ms,
    double P90Ms,
    double P99Ms,
    double MaxMs,
    double TotalPercentOfMachine,
    Verification Verification);

/// <summary>One rate: latency through the chain (injection send to the last handler), CPU, and its own exactly-once check.</summary>
/// <param name="InjectedPerSec">Sends into the first queue acknowledged per second in the window.</param>
/// <param name="HopsPerSec">Handler calls per second over all queues in the window.</param>
/// <param name="NodePercentOfMachine">The node process, as a share of all the machine's cores.</param>
/// <param name="LoadGeneratorPercentOfMachine">This process: the injector and the 15 handlers (the application).</param>
/// <param name="TotalPercentOfMachine">Node plus load generator: what the chain costs.</param>
internal sealed record ChainPoint(
    double RatePerQueue,
    double InjectedPerSec,
    double HopsPerSec,
    double EndMsgsPerSec,
    double P50Ms,
    double P90Ms,
    double P99Ms,
    double MaxMs,
    long Messages,
    double DurationS,
    long SendsBehindSchedule,
    CpuFigures Cpu,
    double? NodePercentOfMachine,
    double LoadGeneratorPercentOfMachine,
    double TotalPercentOfMachine,
    double? MachineBusyPercent,
    long HandlerErrors,
    Verification Verification);

/// <summary>Issue 14: the 15-queue chain at 125 msg/s per queue under 25% of the machine's CPU (node + load generator).</summary>
internal sealed record ChainTarget(double RatePerQueue, double MaxPercentOfMachine, double? MeasuredPercent, bool? Met, string Reference);

internal sealed record ChainSettings(
    int HandlerConcurrency,
    int Size,
    double WarmupS,
    double RunWarmupS,
    double DurationS,
    string Handlers);
