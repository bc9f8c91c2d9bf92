using System.Diagnostics;
using System.Diagnostics.Metrics;
using Farm.Broker.Entities;

namespace Farm.Broker.Telemetry;

/// <summary>
/// The broker's message counters, on the "Farm.Broker" meter, with OpenTelemetry messaging
/// attributes (messaging.system = farm, messaging.destination.name = the entity's path). Each
/// counts what this node durably did: a message is "sent" once its batch committed. Adding to a
/// counter nobody listens to costs a branch.
/// </summary>
public static class BrokerMetrics
{
    public const string MeterName = "Farm.Broker";

    /// <summary>Shared with the node's gauges (<see cref="NodeMetrics"/>) so one AddMeter picks up everything.</summary>
    internal static readonly Meter Meter = new(MeterName);

    private static readonly Counter<long> Sent = Meter.CreateCounter<long>("farm.messages.sent", "{message}", "Messages stored by sends (after commit).");
    private static readonly Counter<long> Received = Meter.CreateCounter<long>("farm.messages.received", "{message}", "Messages delivered to receivers (peek-lock or receive-and-delete).");
    private static readonly Counter<long> Completed = Meter.CreateCounter<long>("farm.messages.completed", "{message}", "Messages completed by receivers.");
    private static readonly Counter<long> Abandoned = Meter.CreateCounter<long>("farm.messages.abandoned", "{message}", "Messages abandoned by receivers (made available again).");
    private static readonly Counter<long> DeadLettered = Meter.CreateCounter<long>("farm.messages.dead_lettered", "{message}", "Messages moved to the dead-letter queue, by reason.");
    private static readonly Counter<long> Expired = Meter.CreateCounter<long>("farm.messages.expired", "{message}", "Messages whose time to live ran out.");

    private static readonly Counter<long> CountedAtSend = Meter.CreateCounter<long>("farm.messages.delivered_counted_at_send", "{message}", "Peek-lock deliveries whose delivery count the send already stored (a receiver was waiting): no write of their own.");

    private static readonly Counter<long> CreditGrants = Meter.CreateCounter<long>("farm.receive.credit_grants", "{grant}", "Credit frames received on receive streams (a receiver's prefetch refills; the SDK sends one per half a prefetch taken).");

    private static readonly Histogram<int> CommitBatchSize = Meter.CreateHistogram<int>("farm.container.commit.batch_size", "{change}", "Changes written per container commit.");
    private static readonly Histogram<double> CommitDuration = Meter.CreateHistogram<double>("farm.container.commit.duration", "s", "Time to write one commit batch to the container's database.");
    private static readonly Counter<long> Moves = Meter.CreateCounter<long>("farm.container.takes", "{take}", "Containers this node took over (start, failover, planned move).");

    internal static void RecordSent(string entity, int count) => Add(Sent, entity, count);

    internal static void RecordReceived(string entity, int count) => Add(Received, entity, count);

    internal static void RecordCreditGrant(string entity) => Add(CreditGrants, entity, 1);

    internal static void RecordCountedAtSend(string entity, int count) => Add(CountedAtSend, entity, count);

    internal static void RecordCompleted(string entity) => Add(Completed, entity, 1);

    internal static void RecordAbandoned(string entity) => Add(Abandoned, entity, 1);

    internal static void RecordExpired(string entity) => Add(Expired, entity, 1);

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

    private static void Add(Counter<long> counter, string entity, int count)
    {
        if (counter.Enabled && count > 0)
        {
            counter.Add(count, new TagList { { "messaging.system", "farm" }, { "messaging.destination.name", entity } });
        }
    }
}
