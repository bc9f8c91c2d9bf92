using System.Globalization;

namespace Farm.Cli.Hosting;

/// <summary>
/// What `farm status --watch` says happened between two looks at the farm: nodes that joined,
/// changed state, stopped or started heartbeating, paused or resumed; containers created, released,
/// taken, moved on purpose or failed over, with how long each was without a live owner. It only
/// compares what the farm database showed at each look, so a change that came and went between
/// two looks is not seen.
/// </summary>
public sealed class StatusWatch
{
    /// <summary>The node timeout the farm uses by default (NodeOptions.NodeTimeout): past it a node is taken for dead.</summary>
    public static readonly TimeSpan NodeTimeout = TimeSpan.FromSeconds(3);

    private StatusView? _last;

    /// <summary>Containers whose owner stopped being live, and since when (by this watch's clock).</summary>
    private readonly Dictionary<long, DateTimeOffset> _ownerLostAt = [];

    /// <summary>Containers let go on behalf of an owner that was not live (its process gone), and that owner: their next take is a failover.</summary>
    private readonly Dictionary<long, long> _abandonedBy = [];

    /// <summary>One change, as printed: when it was seen and what it was.</summary>
    public sealed record Change(DateTimeOffset SeenAt, string Text)
    {
        public override string ToString() => SeenAt.ToString("HH:mm:ss.fff", CultureInfo.InvariantCulture) + "  " + Text;
    }

    /// <summary>Compares this look with the last one; the first look reports nothing.</summary>
    public IReadOnlyList<Change> Next(StatusView now, DateTimeOffset seenAt)
    {
        var changes = new List<string>();
        if (_last is { } before)
        {
            CompareNodes(before, now, changes);
            CompareContainers(before, now, seenAt, changes);
        }
        TrackOwnersLost(now, seenAt);
        _last = now;
        return [.. changes.Select(text => new Change(seenAt, text))];
    }

    private static bool IsLive(NodeView node) => StatusView.IsLive(node);

    private static string Seconds(double milliseconds) => (milliseconds / 1000).ToString("0.0", CultureInfo.InvariantCulture) + " s";

    private static void CompareNodes(StatusView before, StatusView now, List<string> changes)
    {
        foreach (var node in now.Nodes)
        {
            var was = before.Nodes.FirstOrDefault(n => n.Id == node.Id);
            if (was is null)
            {
                changes.Add($"node {node.Id} joined at {node.Address}");
                continue;
            }
            if (was.State != node.State)
            {
                changes.Add($"node {node.Id}: {was.State} -> {node.State}");
            }
            if (was.ProcessState is { } p && node.ProcessState is { } q && p != q)
            {
                changes.Add($"node {node.Id} process: {p} -> {q}");
            }
            var wasSilent = was.HeartbeatAgeMs >= NodeTimeout.TotalMilliseconds;
            var isSilent = node.HeartbeatAgeMs >= NodeTimeout.TotalMilliseconds;
            if (!wasSilent && isSilent && node.State != "stopped")
            {
                changes.Add($"node {node.Id} stopped heartbeating (last {Seconds(node.HeartbeatAgeMs!.Value)} ago)");
            }
            else if (wasSilent && !isSilent)
            {
                changes.Add($"node {node.Id} heartbeats again");
            }
        }
        foreach (var gone in before.Nodes.Where(n => now.Nodes.All(m => m.Id != n.Id)))
        {
            changes.Add($"node {gone.Id} left the farm");
        }
    }

    private void CompareContainers(StatusView before, StatusView now, DateTimeOffset seenAt, List<string> changes)
    {
        foreach (var container in now.Containers)
        {
            var was = before.Containers.FirstOrDefault(c => c.Id == container.Id);
            if (was is null)
            {
                changes.Add($"container {container.Id} created" + (container.OwnerNode is { } o ? $", owned by node {o}" : ""));
                continue;
            }
            if (was.OwnerNode == container.OwnerNode && was.Epoch == container.Epoch)
            {
                continue;
            }
            var from = was.OwnerNode is { } a ? $"node {a}" : "no owner";
            if (container.OwnerNode is not { } owner)
            {
                var left = was.OwnerNode is { } leaving ? now.Nodes.FirstOrDefault(n => n.Id == leaving) : null;
                if (left is not null && !IsLive(left))
                {
                    // A survivor let go of a crashed node's container (SQLite farms tell a killed node by its process lock).
                    _abandonedBy[container.Id] = left.Id;
                    changes.Add($"container {container.Id}: {from} -> no owner (released: node {left.Id} is not live)");
                }
                else
                {
                    changes.Add($"container {container.Id}: {from} -> no owner (released)");
                }
                continue;
            }
            if (was.OwnerNode is null && _abandonedBy.Remove(container.Id, out var crashed) && crashed != owner)
            {
                was = was with { OwnerNode = crashed };
                from = $"node {crashed}";
            }
            var previous = was.OwnerNode is { } p ? now.Nodes.FirstOrDefault(n => n.Id == p) : null;
            var kind = was.OwnerNode is null ? "taken"
                : was.OwnerNode == owner ? "taken again"
                : previous is not null && IsLive(previous) ? "moved (the old owner is live: a planned move)"
                : "failed over";
            // Since its owner went silent: seen by an earlier look, or else told by the old owner's last heartbeat.
            var withoutOwner = _ownerLostAt.TryGetValue(container.Id, out var lostAt)
                ? $"; without a live owner for about {Seconds((seenAt - lostAt).TotalMilliseconds)}"
                : kind == "failed over" && previous?.HeartbeatAgeMs is { } silence
                    ? $"; without a live owner for about {Seconds(silence)}"
                    : "";
            changes.Add($"container {container.Id}: {from} -> node {owner} at epoch {container.Epoch}, {kind}{withoutOwner}");
        }
    }

    /// <summary>Notes when each container's owner stopped being live (or it lost its owner), so a takeover can say how long it was without one.</summary>
    private void TrackOwnersLost(StatusView now, DateTimeOffset seenAt)
    {
        foreach (var container in now.Containers)
        {
            var owner = container.OwnerNode is { } o ? now.Nodes.FirstOrDefault(n => n.Id == o) : null;
            if (owner is not null && IsLive(owner))
            {
                _ownerLostAt.Remove(container.Id);
            }
            else if (!_ownerLostAt.ContainsKey(container.Id))
            {
                // The owner's last heartbeat says when it went silent better than this look does.
                var silentFor = owner?.HeartbeatAgeMs is { } age && age >= NodeTimeout.TotalMilliseconds ? TimeSpan.FromMilliseconds(age) : TimeSpan.Zero;
                _ownerLostAt[container.Id] = seenAt - silentFor;
            }
        }
    }
}
