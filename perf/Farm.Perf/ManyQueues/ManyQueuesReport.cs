namespace Farm.Perf.ManyQueues;

/// <summary>The JSON result of many-queues (snake_case names; see perf/README.md).</summary>
internal sealed record ManyQueuesReport(
    string Scenario,
    int Queues,
    double RatePerQueue,
    int Nodes,
    ManyQueuesFarmFigures Farm,
    QueueCreation Creation,
    ManyQueuesReceivers Receivers,
    IReadOnlyList<NodeMemory> Memory,
    ManyQueuesCpu Cpu,
    ManyQueuesTargets Targets,
    IReadOnlyList<ResultChart> Charts,
    ManyQueuesSettings Settings,
    MachineInfo Machine,
    DateTimeOffset Timestamp,
    string Command);

/// <summary>The measured window: rates, send-to-receive latency, and the exactly-once check over the whole run.</summary>
/// <param name="OfferedPerSec">What the senders were asked to send: queues x rate per queue.</param>
/// <param name="SendsBehindSchedule">Sends started more than a second late (the senders could not keep the pace); their slots were dropped.</param>
internal sealed record ManyQueuesFarmFigures(
    double MsgsPerSec,
    double SentPerSec,
    double OfferedPerSec,
    double P50Ms,
    double P90Ms,
    double P99Ms,
    double P999Ms,
    double MaxMs,
    long Messages,
    double DurationS,
    long SendsBehindSchedule,
    Verification Verification);

/// <summary>
/// How the queues were made: the first <see cref="Serial"/> one call at a time (the rate one by one),
/// the rest with <c>concurrency</c> calls in flight. The SDK has no bulk create.
/// </summary>
internal sealed record QueueCreation(int Queues, double Seconds, double PerSec, CreationPhase Serial, CreationPhase? Concurrent);

internal sealed record CreationPhase(int Queues, int Concurrency, double Seconds, double PerSec, double P50Ms, double P99Ms, double MaxMs)
{
    /// <summary>[queues in the farm, creates/s over the last 1,000] after each 1,000.</summary>
    public IReadOnlyList<double[]>? Progress { get; init; }
}

/// <param name="Style">What each queue's receiving side is.</param>
/// <param name="Clients">FarmClients the processors are spread over (each holds their receive streams).</param>
/// <param name="StartS">From the first StartProcessingAsync to the last returning.</param>
/// <param name="FirstDeliveryAllS">From the first send to every queue having delivered a message (null: some never did).</param>
/// <param name="Redelivered">Messages handed to a handler with DeliveryCount above 1 over the whole run (the handlers never fail: each waited out a lock).</param>
/// <param name="ConnectionAborts">Connections the SDK's liveness probe cut over the whole run (farm.client.connection.aborts), taking the node for frozen.</param>
/// <param name="RestartS">--restart: seconds from SIGKILLing the nodes to every container served again, before the receivers opened (null: no restart; every queue then starts loaded, created on its node).</param>
internal sealed record ManyQueuesReceivers(string Style, int Clients, int Processors, double StartS, double? FirstDeliveryAllS, long Redelivered, long ConnectionAborts, double? RestartS);

/// <summary>A node's resident memory (VmRSS) at each phase, and its peak (VmHWM), in MiB.</summary>
internal sealed record NodeMemory(
    long Node,
    int Pid,
    double? RssStartMib,
    double? RssQueuesCreatedMib,
    double? RssReceiversOpenMib,
    double? RssWindowMeanMib,
    double? RssWindowMaxMib,
    double? RssEndMib,
    double? PeakRssMib);

/// <summary>CPU in the window, in cores, and the nodes' share of the machine in percent.</summary>
internal sealed record ManyQueuesCpu(
    double? NodeCores,
    IReadOnlyList<double?> PerNodeCores,
    double LoadGeneratorCores,
    double? MachineBusyCores,
    double? OtherCores,
    int Cores,
    double? NodePercentOfMachine,
    double? LoadGeneratorPercentOfMachine);

/// <summary>Issue 14: under 1 GiB RSS per node (peak over the run) and p99 under 100 ms, at the offered rate (at least 95% of it received in the window).</summary>
internal sealed record ManyQueuesTargets(bool RssUnder1Gib, bool P99Under100Ms, bool KeptPace, bool Met);

internal sealed record ManyQueuesSettings(
    int Senders,
    int ReceiverClients,
    int CreateConcurrency,
    int Size,
    double WarmupS,
    double DurationS,
    int Containers,
    string ClientRetry);
