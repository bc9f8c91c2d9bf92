using System.Diagnostics;
using System.Diagnostics.Metrics;
using Farm.Broker.Node;

namespace Farm.Broker.Telemetry;

/// <summary>
/// The instruments of one node read when a collector asks (a Prometheus scrape, an OTLP export):
/// per entity it serves, the message counters its entities keep (<see cref="EntityCounters"/>:
/// sent, received, completed, ...) and gauges (messages by state, age of the oldest); per
/// container it owns (epoch); and for the node (containers owned, heartbeat age). A meter of its
/// own, named like <see cref="BrokerMetrics.Meter"/>, so they go away with the node.
/// </summary>
internal sealed class NodeMetrics : IDisposable
{
    private readonly Meter _meter = new(BrokerMetrics.MeterName);

    public NodeMetrics(BrokerNode node)
    {
        EntityCounter(node, "farm.messages.sent", c => c.Sent, "Messages stored by sends (after commit).");
        EntityCounter(node, "farm.messages.received", c => c.Received, "Messages delivered to receivers (peek-lock or receive-and-delete).");
        EntityCounter(node, "farm.messages.completed", c => c.Completed, "Messages completed by receivers.");
        EntityCounter(node, "farm.messages.abandoned", c => c.Abandoned, "Messages abandoned by receivers (made available again).");
        EntityCounter(node, "farm.messages.expired", c => c.Expired, "Messages whose time to live ran out.");
        EntityCounter(node, "farm.messages.delivered_counted_at_send", c => c.CountedAtSend,
            "Peek-lock deliveries whose delivery count the send already stored (a receiver was waiting): no write of their own.", "{message}");
        EntityCounter(node, "farm.messages.delivered_counted_by_mark", c => c.CountedByMark,
            "Peek-lock first deliveries counted by the entity's delivery mark (one write per receive) instead of a write of their own.", "{message}");
        EntityCounter(node, "farm.receive.credit_grants", c => c.CreditGrants,
            "Credit frames received on receive streams (a receiver's prefetch refills; the SDK sends one per half a prefetch taken).", "{grant}");
        _meter.CreateObservableGauge("farm.entity.messages", () => EntityMessages(node), "{message}",
            "Messages in an entity by state: active, scheduled, deferred, dead_letter.");
        _meter.CreateObservableGauge("farm.entity.receivers", () => EntityReceivers(node), "{receiver}",
            "Receive links open on an entity at this node (its consumers): Receive calls and links of receive sessions.");
        _meter.CreateObservableGauge("farm.entity.oldest_message.age", () => OldestMessageAges(node), "s",
            "Age of the oldest message in an entity's main queue.");
        _meter.CreateObservableGauge("farm.container.epoch", () => ContainerEpochs(node), "{epoch}",
            "Epoch of each container this node owns (it rises on every change of owner).");
        _meter.CreateObservableGauge("farm.node.containers.owned", () => ContainersOwned(node), "{container}",
            "Containers this node owns and serves.");
        _meter.CreateObservableGauge("farm.node.heartbeat.age", () => HeartbeatAge(node), "s",
            "Time since this node last wrote its heartbeat.");
        _meter.CreateObservableGauge("farm.node.threadpool.lag", () => node.SendShedding.Lag.TotalSeconds, "s",
            "How long work queued on this node's thread pool waits before it runs: how far behind its work the node is.");
        _meter.CreateObservableCounter("farm.node.sends.shed", () => node.SendShedding.Shed, "{send}",
            "Sends refused with SERVICE_BUSY, nothing stored, because the node was further behind its work than ShedSendsAfter.");
        _meter.CreateObservableCounter("farm.node.receive_links.shed", () => node.SendShedding.ReceiveLinksShed, "{link}",
            "New receive links refused with SERVICE_BUSY because the node was further behind its work than ShedSendsAfter.");
    }

    private void EntityCounter(BrokerNode node, string name, Func<EntityCounters, long> read, string description, string unit = "{message}") =>
        _meter.CreateObservableCounter(name, () => EntityTotals(node, read), unit, description);

    /// <summary>Every entity path this node serves with a non-zero total (a dead-letter queue nothing reached stays out).</summary>
    private static IEnumerable<Measurement<long>> EntityTotals(BrokerNode node, Func<EntityCounters, long> read)
    {
        foreach (var counters in AllCounters(node))
        {
            if (read(counters) is var total and > 0)
            {
                yield return new Measurement<long>(total, DestinationTags(counters.Path));
            }
        }
    }

    private static IEnumerable<EntityCounters> AllCounters(BrokerNode node)
    {
        foreach (var container in node.ServedContainers)
        {
            foreach (var entity in container.Entities)
            {
                yield return entity.Counters;
                yield return entity.DeadLetterCounters;
            }
            foreach (var topic in container.Topics)
            {
                yield return topic.Counters;
            }
        }
    }

    /// <summary>Each queue and subscription served here (0 when none); a dead-letter queue only while something receives from it.</summary>
    private static IEnumerable<Measurement<long>> EntityReceivers(BrokerNode node)
    {
        foreach (var container in node.ServedContainers)
        {
            foreach (var entity in container.Entities)
            {
                yield return new Measurement<long>(entity.Counters.Receivers, DestinationTags(entity.Counters.Path));
                if (entity.DeadLetterCounters.Receivers is var deadLetter and > 0)
                {
                    yield return new Measurement<long>(deadLetter, DestinationTags(entity.DeadLetterCounters.Path));
                }
            }
        }
    }

    private static TagList DestinationTags(string entity) => new() { { "messaging.system", "farm" }, { "messaging.destination.name", entity } };

    private static TagList NodeTags(BrokerNode node) => new() { { "farm.node.id", node.NodeId } };

    private static IEnumerable<Measurement<long>> EntityMessages(BrokerNode node)
    {
        foreach (var container in node.ServedContainers)
        {
            foreach (var entity in container.Entities)
            {
                var counts = entity.GetCounts();
                yield return new Measurement<long>(counts.Active, EntityTags(entity.Name, "active"));
                yield return new Measurement<long>(counts.Scheduled, EntityTags(entity.Name, "scheduled"));
                yield return new Measurement<long>(counts.Deferred, EntityTags(entity.Name, "deferred"));
                yield return new Measurement<long>(counts.DeadLetter, EntityTags(entity.Name, "dead_letter"));
            }
        }
    }

    private static TagList EntityTags(string entity, string state) => new()
    {
        { "messaging.system", "farm" },
        { "messaging.destination.name", entity },
        { "farm.message.state", state },
    };

    private static IEnumerable<Measurement<double>> OldestMessageAges(BrokerNode node)
    {
        var nowMs = node.Time.GetUtcNow().ToUnixTimeMilliseconds();
        foreach (var container in node.ServedContainers)
        {
            foreach (var entity in container.Entities)
            {
                var oldest = entity.OldestEnqueuedAtMs();
                var ageSeconds = oldest is { } enqueued ? Math.Max(0, nowMs - enqueued) / 1000.0 : 0;
                yield return new Measurement<double>(ageSeconds, DestinationTags(entity.Name));
            }
        }
    }

    private static IEnumerable<Measurement<long>> ContainerEpochs(BrokerNode node)
    {
        foreach (var container in node.ServedContainers)
        {
            yield return new Measurement<long>(container.Epoch,
                new TagList { { "farm.container.id", container.Id }, { "farm.node.id", node.NodeId } });
        }
    }

    private static Measurement<int> ContainersOwned(BrokerNode node) =>
        new(node.ServedContainers.Count(c => !c.IsLost), NodeTags(node));

    private static IEnumerable<Measurement<double>> HeartbeatAge(BrokerNode node)
    {
        if (node.LastHeartbeatAt is { } last)
        {
            yield return new Measurement<double>((node.LeaseClock.GetUtcNow() - last).TotalSeconds, NodeTags(node));
        }
    }

    public void Dispose() => _meter.Dispose();
}
