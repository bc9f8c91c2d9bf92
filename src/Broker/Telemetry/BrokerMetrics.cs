using System.Diagnostics;
using System.Diagnostics.Metrics;

namespace Farm.Broker.Telemetry;

/// <summary>
/// The broker's meter, "Farm.Broker", and the instruments recorded where something happens: dead
/// letters by reason, commits, container takes. The per-entity message counts (sent, received,
/// completed, ...) are kept by each entity (<see cref="EntityCounters"/>) and read as observable
/// counters by <see cref="NodeMetrics"/>. Entity attributes follow OpenTelemetry's messaging
/// conventions (messaging.system = farm, messaging.destination.name = the entity's path). Adding
/// to an instrument nobody listens to costs a branch.
/// </summary>
public static class BrokerMetrics
{
    public const string MeterName = "Farm.Broker";

    /// <summary>Shared with the node's gauges (<see cref="NodeMetrics"/>) so one AddMeter picks up everything.</summary>
    internal static readonly Meter Meter = new(MeterName);

    private static readonly Counter<long> DeadLettered = Meter.CreateCounter<long>("farm.messages.dead_lettered", "{message}", "Messages moved to the dead-letter queue, by reason.");
    private static readonly Histogram<int> CommitBatchSize = Meter.CreateHistogram<int>(
        "farm.container.commit.batch_size", "{operation}", "Operations (a send, a settlement, ...) written per container commit.",
        tags: null, advice: new InstrumentAdvice<int> { HistogramBucketBoundaries = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2000, 4096] });

    /// <summary>
    /// Seconds, with buckets from 0.1 ms (an fsync on a fast disk) to 10 s: OpenTelemetry's default
    /// buckets (0, 5, 10, 25, ... 10,000) are meant for milliseconds and would put every commit in one.
    /// </summary>
    private static readonly Histogram<double> CommitDuration = Meter.CreateHistogram<double>(
        "farm.container.commit.duration", "s", "Time to write one commit batch to the container's database (the group commit's own time: on SQLite without the fsync, see farm.container.commit.flush.duration).",
        tags: null, advice: new InstrumentAdvice<double> { HistogramBucketBoundaries = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] });
    private static readonly Histogram<double> CommitFlushDuration = Meter.CreateHistogram<double>(
        "farm.container.commit.flush.duration", "s",
        "Time from the end of a commit batch until it is on disk and its operations are acknowledged (SQLite: the WAL's fsync, which the group commit does not wait for; PostgreSQL: its commits are durable already).",
        tags: null, advice: new InstrumentAdvice<double> { HistogramBucketBoundaries = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] });
    private static readonly Counter<long> Moves = Meter.CreateCounter<long>("farm.container.takes", "{take}", "Containers this node took over (start, failover, planned move).");

    internal static void RecordDeadLettered(string entity, string reason)
    {
        if (DeadLettered.Enabled)
        {
            DeadLettered.Add(1, new TagList
            {
                { "messaging.system", "farm" },
                { "messaging.destination.name", entity },
                { "farm.dead_letter.reason", reason },
            });
        }
    }

    internal static void RecordCommit(long containerId, int changes, long startTimestamp)
    {
        if (CommitBatchSize.Enabled || CommitDuration.Enabled)
        {
            var tags = new TagList { { "farm.container.id", containerId } };
            CommitBatchSize.Record(changes, tags);
            CommitDuration.Record(Stopwatch.GetElapsedTime(startTimestamp).TotalSeconds, tags);
        }
    }

    internal static void RecordCommitFlush(long containerId, long committedTimestamp)
    {
        if (CommitFlushDuration.Enabled)
        {
            CommitFlushDuration.Record(Stopwatch.GetElapsedTime(committedTimestamp).TotalSeconds, new TagList { { "farm.container.id", containerId } });
        }
    }

    internal static void RecordTake(long containerId, long nodeId)
    {
        if (Moves.Enabled)
        {
            Moves.Add(1, new TagList { { "farm.container.id", containerId }, { "farm.node.id", nodeId } });
        }
    }
}
