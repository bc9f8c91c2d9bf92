using System.Diagnostics;
using System.Diagnostics.Metrics;
using Farm.Broker.Node;

namespace Farm.Broker.Telemetry;

/// <summary>
/// The gauges of one node, read when a collector asks (a Prometheus scrape, an OTLP export):
/// per entity it serves (messages by state, age of the oldest), per container it owns (epoch),
/// and for the node (containers owned, heartbeat age). A meter of its own, named like
/// <see cref="BrokerMetrics.Meter"/>, so the gauges go away with the node.
/// </summary>
internal sealed class NodeMetrics : IDisposable
{
    private readonly Meter _meter = new(BrokerMetrics.MeterName);

    public NodeMetrics(BrokerNode node)
    {
        _meter.CreateObservableGauge("farm.entity.messages", () => EntityMessages(node), "{message}",
            "Messages in an entity by state: active, scheduled, deferred, dead_letter.");
        _meter.CreateObservableGauge("farm.entity.oldest_message.age", () => OldestMessageAges(node), "s",
            "Age of the oldest message in an entity's main queue.");
        _meter.CreateObservableGauge("farm.container.epoch", () => ContainerEpochs(node), "{epoch}",
            "Epoch of each container this node owns (it rises on every change of owner).");
        _meter.CreateObservableGauge("farm.node.containers.owned", () => ContainersOwned(node), "{container}",
            "Containers this node owns and serves.");
        _meter.CreateObservableGauge("farm.node.heartbeat.age", () => HeartbeatAge(node), "s",
            "Time since this node last wrote its heartbeat.");
    }

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
                yield return new Measurement<double>(ageSeconds,
                    new TagList { { "messaging.system", "farm" }, { "messaging.destination.name", entity.Name } });
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
