using Farm.ContainerStore.FarmDatabase;

namespace Farm.Broker.Node;

/// <summary>What one node knows when it decides what to take and what to hand back.</summary>
/// <param name="Served">Containers this node serves now, with when it took each.</param>
/// <param name="OrphanSeen">When this node first saw each container without a live owner.</param>
/// <param name="ReleasedAt">Containers this node handed over on purpose (moves, rebalancing): when, and at which epoch.</param>
/// <param name="Releasing">Containers this node is handing over right now.</param>
/// <param name="LastRelease">When this node last started a rebalancing hand-over.</param>
public sealed record OwnershipView(
    long NodeId,
    IReadOnlyList<NodeRecord> Nodes,
    IReadOnlyList<ContainerRecord> Containers,
    IReadOnlyDictionary<long, DateTimeOffset> Served,
    IReadOnlyDictionary<long, DateTimeOffset> OrphanSeen,
    IReadOnlyDictionary<long, HandOver> ReleasedAt,
    IReadOnlyCollection<long> Releasing,
    DateTimeOffset LastRelease,
    DateTimeOffset Now)
{
    /// <summary>Nodes whose process is known gone (their lock is free), whatever their heartbeat says: not live.</summary>
    public IReadOnlySet<long> Crashed { get; init; } = new HashSet<long>();
}

/// <summary>A container this node handed over on purpose: when, and its epoch then (the next owner's take raises it).</summary>
public readonly record struct HandOver(DateTimeOffset At, long Epoch);

/// <summary>A container this node may take: an orphan, in id order.</summary>
/// <param name="ReleaseFirst">The farm database still names this node (a take that failed half way, or a lost lease): let go first, so the take raises the epoch.</param>
/// <param name="GraceExpired">Nobody took it for <see cref="NodeOptions.OrphanGrace"/>: take it even past this node's share.</param>
public readonly record struct TakeCandidate(long ContainerId, bool ReleaseFirst, bool GraceExpired);

/// <summary>The route to a container's owner, for the gateway: the owner (0: none), its epoch, and the address while it is live.</summary>
public readonly record struct ContainerRoute(long Owner, long Epoch, string? Address);

/// <summary>What one ownership pass should do, before it does it.</summary>
/// <param name="Share">How many containers this node should own: an even split over the live nodes, the first ones in id order taking the remainder.</param>
/// <param name="Takes">Orphans to try, in order: up to <see cref="Share"/>, and any whose grace expired.</param>
/// <param name="OrphanSeen">The orphan first-seen times to keep after this pass.</param>
public sealed record OwnershipPlan(
    IReadOnlyDictionary<long, ContainerRoute> Routes,
    int Share,
    IReadOnlyList<TakeCandidate> Takes,
    IReadOnlyDictionary<long, DateTimeOffset> OrphanSeen);

/// <summary>
/// The ownership decision as a pure function of the farm database, this node's state and the
/// time: who serves what, what this node takes, and what it hands back to even the load. The
/// node (<see cref="BrokerNode"/>) carries the plan out; the planner touches nothing.
/// </summary>
public static class OwnershipPlanner
{
    public static OwnershipPlan Plan(OwnershipView view, NodeOptions options)
    {
        var live = LiveNodes(view, options);
        var liveIds = live.Select(n => n.Id).ToHashSet();

        // Routing names every owner that still heartbeats, a draining one too: it serves its
        // containers until it hands each over, and its receivers' settlements must reach it while it
        // waits for them (held for the next owner instead, they would find their locks gone).
        var serving = view.Nodes
            .Where(n => IsServing(n, view.NodeId, options) && !view.Crashed.Contains(n.Id))
            .ToDictionary(n => n.Id, n => n.Address);
        var routes = view.Containers.ToDictionary(
            c => c.Id,
            c => new ContainerRoute(c.OwnerNode ?? 0, c.Epoch, c.OwnerNode is { } o ? serving.GetValueOrDefault(o) : null));

        var takes = new List<TakeCandidate>();
        var orphanSeen = new Dictionary<long, DateTimeOffset>();
        foreach (var container in view.Containers.OrderBy(c => c.Id))
        {
            // Ours in the farm database but not served here (lost mid-pass, or a hand-over that failed
            // half way) is an orphan too: nobody else would take it while this node lives.
            var orphaned = container.OwnerNode is not { } owner || !liveIds.Contains(owner)
                || (owner == view.NodeId && !view.Served.ContainsKey(container.Id));
            if (!orphaned || view.Served.ContainsKey(container.Id))
            {
                continue;
            }
            var seen = view.OrphanSeen.TryGetValue(container.Id, out var first) ? first : view.Now;
            orphanSeen[container.Id] = seen;
            if (view.ReleasedAt.TryGetValue(container.Id, out var released) && released.Epoch == container.Epoch
                && view.Now - released.At < options.MinimumStay && view.Now - seen < options.MinimumStay)
            {
                // Handed over on purpose (a move or rebalance) and not taken since (a take raises the
                // epoch): leave it to the node it is meant for, unless nobody has taken it for a long
                // while. Once taken, it is an orphan like any other when that node dies.
                continue;
            }
            takes.Add(new TakeCandidate(container.Id, ReleaseFirst: container.OwnerNode == view.NodeId, GraceExpired: view.Now - seen >= options.OrphanGrace));
        }
        return new OwnershipPlan(routes, ShareOf(view.NodeId, live, view.Containers.Count), takes, orphanSeen);
    }

    /// <summary>
    /// How long until a pass has something new to do that nobody will wake it for, or null: a
    /// serving peer's heartbeat goes stale (its containers become orphans), an orphan's lease runs
    /// out (it can be taken), an orphan's grace ends (it may be taken past the share). The loop
    /// sleeps until then when that is sooner than its interval, so a frozen node's containers are
    /// taken when its lease ends, not up to an interval later. Judged from the ages and the lease
    /// ends this pass read, by the database's clock.
    /// </summary>
    public static TimeSpan? NextChangeIn(OwnershipView view, OwnershipPlan plan, NodeOptions options)
    {
        TimeSpan? next = null;
        void Consider(TimeSpan dueIn)
        {
            if (dueIn > TimeSpan.Zero && (next is null || dueIn < next))
            {
                next = dueIn;
            }
        }

        foreach (var node in view.Nodes)
        {
            if (node.Id != view.NodeId && IsServing(node, view.NodeId, options) && !view.Crashed.Contains(node.Id))
            {
                Consider(options.NodeTimeout - node.HeartbeatAge);
            }
        }
        var self = view.Nodes.FirstOrDefault(n => n.Id == view.NodeId);
        foreach (var (containerId, seen) in plan.OrphanSeen)
        {
            Consider(options.OrphanGrace - (view.Now - seen));
            if (self is not null && view.Containers.FirstOrDefault(c => c.Id == containerId)?.LeaseExpiresAt is { } leaseEnds)
            {
                // The database's now, as of the read: this node's heartbeat time plus its age.
                Consider(leaseEnds - (self.HeartbeatAt + self.HeartbeatAge));
            }
        }
        return next;
    }

    /// <summary>
    /// The container to hand back after the takes, or null: only when this node holds more than its
    /// share, another live node less than its own, and no hand-over started within
    /// <see cref="NodeOptions.RebalanceInterval"/>. The longest-held goes: containers that just
    /// arrived (a failover, an operator's move) stay put for <see cref="NodeOptions.MinimumStay"/>.
    /// </summary>
    public static long? Rebalance(OwnershipView view, NodeOptions options, int servedAfterTakes)
    {
        var live = LiveNodes(view, options);
        var owned = view.Containers.GroupBy(c => c.OwnerNode ?? 0).ToDictionary(g => g.Key, g => g.Count());
        var someoneShort = live.Any(n => n.Id != view.NodeId && owned.GetValueOrDefault(n.Id) < ShareOf(n.Id, live, view.Containers.Count));
        if (servedAfterTakes <= ShareOf(view.NodeId, live, view.Containers.Count) || !someoneShort || view.Now - view.LastRelease < options.RebalanceInterval)
        {
            return null;
        }
        return view.Served
            .Where(s => view.Now - s.Value >= options.MinimumStay && !view.Releasing.Contains(s.Key))
            .OrderBy(s => s.Value)
            .Select(s => (long?)s.Key)
            .FirstOrDefault();
    }

    private static List<NodeRecord> LiveNodes(OwnershipView view, NodeOptions options) =>
        view.Nodes.Where(n => IsLive(n, view.NodeId, options) && !view.Crashed.Contains(n.Id)).OrderBy(n => n.Id).ToList();

    /// <summary>Whether <paramref name="node"/> takes a share of the containers: active (not draining or stopped) and heartbeating.</summary>
    public static bool IsLive(NodeRecord node, long self, NodeOptions options) =>
        node.State == NodeStates.Active && IsFresh(node, self, options);

    /// <summary>This node always counts as fresh: it is the one deciding.</summary>
    private static bool IsFresh(NodeRecord node, long self, NodeOptions options) => node.Id == self || node.HeartbeatAge < options.NodeTimeout;

    /// <summary>Whether calls for the containers <paramref name="node"/> owns may be routed to it: it heartbeats and serves (a draining node still does).</summary>
    public static bool IsServing(NodeRecord node, long self, NodeOptions options) =>
        node.State is NodeStates.Active or NodeStates.Draining && IsFresh(node, self, options);

    private static int ShareOf(long nodeId, List<NodeRecord> live, int containers)
    {
        var rank = live.FindIndex(n => n.Id == nodeId);
        return rank < 0 ? 0 : containers / live.Count + (rank < containers % live.Count ? 1 : 0);
    }
}
