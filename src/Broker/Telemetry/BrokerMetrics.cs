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
    private static readonly Histogram<int> CommitBatchSize = Meter.CreateHistogram<int>("farm.container.commit.batch_size", "{change}", "Changes written per container commit.");
    private static readonly Histogram<double> CommitDuration = Meter.CreateHistogram<double>("farm.container.commit.duration", "s", "Time to write one commit batch to the container's database.");
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

    internal static void RecordTake(long containerId, long nodeId)
    {
        if (Moves.Enabled)
        {
            Moves.Add(1, new TagList { { "farm.container.id", containerId }, { "farm.node.id", nodeId } });
        }
    }
}
