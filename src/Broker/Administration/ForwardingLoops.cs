
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.ContainerStore.FarmDatabase;

namespace Farm.Broker.Administration;

/// <summary>
/// Refuses forwarding that would bring a message back where it came from: A → B → A, or A → topic T
/// whose subscription forwards to A. Such a chain used to be accepted, and its messages went round
/// until the hop limit dead-lettered them (or, before the limit was enforced, sat in the wrong queue).
/// </summary>
internal static class ForwardingLoops
{
    /// <summary>Longest chain followed; the broker's hop limit stops any longer one anyway.</summary>
    private const int MaxDepth = 32;

    /// <param name="self">The queue or subscription being created or updated.</param>
    /// <param name="feedingTopic">For a subscription, its topic: forwarding back into it is a loop too.</param>
    /// <param name="targets">Its new ForwardTo and ForwardDeadLetteredMessagesTo (either may be null).</param>
    public static async Task EnsureNoneAsync(IFarmStore farm, string self, string? feedingTopic, IEnumerable<string?> targets, CancellationToken ct)
    {
        var loopsBackAt = new HashSet<string>(StringComparer.OrdinalIgnoreCase) { self };
        if (feedingTopic is not null)
        {
            loopsBackAt.Add(feedingTopic);
        }
        foreach (var target in targets.OfType<string>())
        {
            var path = new List<string> { self };
            var visited = new HashSet<string>(StringComparer.OrdinalIgnoreCase);
            if (await LeadsBackAsync(farm, target, loopsBackAt, path, visited, ct))
            {
                throw FarmErrors.Invalid($"Forwarding '{self}' to '{target}' would make a loop: {string.Join(" -> ", path)}.");
            }
        }
    }

    /// <summary>Depth-first along ForwardTo (through a topic: each of its subscriptions'); on a loop, <paramref name="path"/> holds it.</summary>
    private static async Task<bool> LeadsBackAsync(
        IFarmStore farm, string name, HashSet<string> loopsBackAt, List<string> path, HashSet<string> visited, CancellationToken ct)
    {
        path.Add(name);
        if (loopsBackAt.Contains(name))
        {
            return true;
        }
        if (path.Count <= MaxDepth && visited.Add(name) && await farm.GetEntityAsync(name, ct) is { } record)
        {
            foreach (var next in await NextAsync(farm, record, ct))
            {
                if (await LeadsBackAsync(farm, next, loopsBackAt, path, visited, ct))
                {
                    return true;
                }
            }
        }
        path.RemoveAt(path.Count - 1);
        return false;
    }

    private static async Task<IEnumerable<string>> NextAsync(IFarmStore farm, EntityRecord record, CancellationToken ct)
    {
        switch (record.Kind)
        {
            case EntityKinds.Queue:
                return QueueSettings.FromJson(record.PropertiesJson).ForwardTo is { } to ? [to] : [];
            case EntityKinds.Topic:
                var forwards = new List<string>();
                foreach (var subscription in await farm.ListChildEntitiesAsync(record.Id, ct))
                {
                    if (SubscriptionSettings.FromJson(subscription.PropertiesJson).ForwardTo is { } target)
                    {
                        forwards.Add(target);
                    }
                }
                return forwards;
            default:
                return [];
        }
    }
}
