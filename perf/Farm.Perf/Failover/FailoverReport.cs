namespace Farm.Perf.Failover;

/// <summary>The JSON result of a failover run (snake_case names; see perf/README.md).</summary>
internal sealed record FailoverReport(
    string Scenario,
    string Mode,
    int Kills,
    double MedianS,
    double MaxS,
    double P90S,
    IReadOnlyList<double> PerKillS,
    long Lost,
    MachineInfo Machine,
    DateTimeOffset Timestamp,
    double TakeoverMedianS,
    double TakeoverMaxS,
    IReadOnlyList<KillRecord> Details,
    FailoverSettings Settings,
    FailoverVerification Verification,
    string Command)
{
    /// <summary>"stop" for --signal stop (SIGSTOP, then SIGCONT); null for SIGKILL.</summary>
    public string? Signal { get; init; }

    /// <summary>The farm's store: "sqlite", or "postgres" with --farm-connection.</summary>
    public string Store { get; init; } = "sqlite";

    /// <summary>--signal stop: stops that froze the owner while it held a SQLite write lock (left out of the median, p90 and max).</summary>
    public int? StopsInsideWrite { get; init; }

    /// <summary>--signal stop: the unavailability of each stop inside a write (the takeover waited for the resume).</summary>
    public IReadOnlyList<double>? InsideWritePerStopS { get; init; }
}

/// <summary>One kill.</summary>
/// <param name="Node">The node SIGKILLed.</param>
/// <param name="Containers">The containers it owned, which moved.</param>
/// <param name="NewOwners">Container id -> the node that took it.</param>
/// <param name="UnavailableS">Worst over the moved containers' queues: kill to first acknowledged send.</param>
/// <param name="PerQueueS">Each moved container's queue: kill to its first acknowledged send (started after the kill).</param>
/// <param name="FirstSuccessStartedS">For each moved queue: when the send that succeeded first had been started, after the kill.</param>
/// <param name="TakeoverS">Kill to the moment the farm's status showed every moved container with a live new owner (polled every 100 ms).</param>
/// <param name="OtherQueuesMaxS">Worst over the queues whose container did not move (their clients may still have used the dead node's gateway).</param>
/// <param name="SendFailures">Sends that failed after the SDK's retries, between this kill and the next.</param>
/// <param name="RebalancedS">Restart of the node to the farm balanced again (2 containers per node).</param>
/// <param name="ReceiversStalled">Queues whose receiver had delivered nothing for 15 s when the farm was balanced again (replaced).</param>
internal sealed record KillRecord(
    int Kill,
    long Node,
    IReadOnlyList<long> Containers,
    IReadOnlyDictionary<string, long> NewOwners,
    double UnavailableS,
    IReadOnlyList<double> PerQueueS,
    IReadOnlyList<double?> FirstSuccessStartedS,
    double? TakeoverS,
    double? OtherQueuesMaxS,
    long SendFailures,
    double RebalancedS,
    IReadOnlyList<string> ReceiversStalled)
{
    /// <summary>--signal stop: the owner was frozen holding a POSIX write lock (a SQLite write), so nobody could take its containers until it resumed.</summary>
    public bool? InsideWrite { get; init; }

    /// <summary>--signal stop: the write locks /proc/locks showed the frozen owner holding.</summary>
    public IReadOnlyList<string>? WriteLocks { get; init; }

    /// <summary>--signal stop: SIGSTOP to SIGCONT.</summary>
    public double? ResumedAfterS { get; init; }

    /// <summary>--signal stop: SIGCONT to the farm's status showing the resumed node live again (it rejoined; its lost containers stay with their new owners until rebalancing).</summary>
    public double? RejoinedS { get; init; }
}

internal sealed record FailoverSettings(
    int Nodes,
    int Containers,
    int Queues,
    double SendIntervalMs,
    int MessageSize,
    bool Redirect,
    int Seed,
    string ClientRetry);

/// <summary>The delivery check over the whole run.</summary>
internal sealed record FailoverVerification(
    bool Passed,
    long Attempted,
    long Acknowledged,
    long ReceivedUnique,
    long Deliveries,
    long Lost,
    long Duplicates,
    long StoredTwice,
    long RedeliveredAfterComplete,
    long LockedAfterComplete,
    long CompletedTwice,
    long UnacknowledgedButDelivered,
    long Foreign,
    long SendFailures,
    long ReceiveErrors,
    long CompleteErrors,
    long LeftInQueues,
    IReadOnlyList<string> Problems);
