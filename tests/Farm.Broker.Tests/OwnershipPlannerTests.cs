using Farm.Broker.Node;
using Farm.ContainerStore.FarmDatabase;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Broker.Tests;

/// <summary>The ownership decision alone: farm rows, this node's state and a fake clock in, a plan out.</summary>
public sealed class OwnershipPlannerTests
{
    private static readonly NodeOptions Options = new()
    {
        NodeTimeout = TimeSpan.FromSeconds(3),
        OrphanGrace = TimeSpan.FromSeconds(1),
        MinimumStay = TimeSpan.FromSeconds(10),
        RebalanceInterval = TimeSpan.FromSeconds(5),
    };

    private readonly FakeTimeProvider _clock = new();

    private static NodeRecord Node(long id, double heartbeatAgeSeconds = 0.5, string state = NodeStates.Active) =>
        new(id, $"http://node-{id}", state, 1000 + (int)id, DateTime.UtcNow, TimeSpan.FromSeconds(heartbeatAgeSeconds));

    private static ContainerRecord Container(long id, long? owner, long epoch = 1) => new(id, $"c{id}", owner, epoch, null, null, 0);

    private OwnershipView View(long self, NodeRecord[] nodes, ContainerRecord[] containers,
        Dictionary<long, DateTimeOffset>? served = null, Dictionary<long, DateTimeOffset>? orphanSeen = null,
        Dictionary<long, HandOver>? releasedAt = null, long[]? releasing = null, DateTimeOffset? lastRelease = null) =>
        new(self, nodes, containers, served ?? [], orphanSeen ?? [], releasedAt ?? [], releasing ?? [], lastRelease ?? DateTimeOffset.MinValue, _clock.GetUtcNow());

    [Fact]
    public void Shares_SplitTheContainersEvenly_TheLowestIdsTakingTheRemainder()
    {
        var nodes = new[] { Node(1), Node(2), Node(3) };
        var containers = Enumerable.Range(1, 7).Select(i => Container(i, owner: null)).ToArray();

        var shares = nodes.Select(n => OwnershipPlanner.Plan(View(n.Id, nodes, containers), Options).Share).ToList();

        Assert.Equal([3, 2, 2], shares);
    }

    [Fact]
    public void OrphansAreUnownedContainers_AndThoseOfNodesWhoseHeartbeatLapsed_InIdOrder()
    {
        var nodes = new[] { Node(1), Node(2), Node(3, heartbeatAgeSeconds: 10) };
        var containers = new[] { Container(4, owner: 3), Container(1, owner: 2), Container(2, owner: null), Container(3, owner: 1) };

        var plan = OwnershipPlanner.Plan(View(1, nodes, containers, served: new() { [3] = _clock.GetUtcNow() }), Options);

        Assert.Equal([2L, 4L], plan.Takes.Select(t => t.ContainerId));
        Assert.All(plan.Takes, t => Assert.False(t.ReleaseFirst));
    }

    [Fact]
    public void ANodeWhoseProcessIsGone_IsNotLive_ThoughItsHeartbeatIsFresh()
    {
        var nodes = new[] { Node(1), Node(2), Node(3) };
        var containers = new[] { Container(1, owner: 1), Container(2, owner: 1), Container(3, owner: null), Container(4, owner: null), Container(5, owner: 3), Container(6, owner: 3) };
        var served = new Dictionary<long, DateTimeOffset> { [1] = _clock.GetUtcNow(), [2] = _clock.GetUtcNow() };

        var before = OwnershipPlanner.Plan(View(1, nodes, containers, served: served), Options);
        var after = OwnershipPlanner.Plan(View(1, nodes, containers, served: served) with { Crashed = new HashSet<long> { 2 } }, Options);

        // Three live nodes share six containers two each; with node 2's process gone, two share them three each.
        Assert.Equal(2, before.Share);
        Assert.Equal(3, after.Share);
        Assert.Equal([3L, 4L], after.Takes.Select(t => t.ContainerId));
        Assert.All(after.Takes, t => Assert.False(t.GraceExpired));
        // Nothing is routed to it.
        Assert.NotNull(before.Routes[5].Address);
        var routes = OwnershipPlanner.Plan(View(1, nodes, [Container(7, owner: 2)]) with { Crashed = new HashSet<long> { 2 } }, Options).Routes;
        Assert.Null(routes[7].Address);
    }

    [Fact]
    public void AContainerTheDatabaseGivesThisNode_ButItDoesNotServe_IsReleasedFirstThenTaken()
    {
        var plan = OwnershipPlanner.Plan(View(1, [Node(1)], [Container(5, owner: 1)]), Options);

        var take = Assert.Single(plan.Takes);
        Assert.True(take.ReleaseFirst);
    }

    [Fact]
    public void AnOrphanPastItsGrace_IsTakenEvenPastTheShare_AndTheFirstSightingIsKept()
    {
        var nodes = new[] { Node(1), Node(2) };
        var containers = new[] { Container(1, owner: null), Container(2, owner: null) };
        var firstSeen = _clock.GetUtcNow();

        var fresh = OwnershipPlanner.Plan(View(1, nodes, containers), Options);
        _clock.Advance(TimeSpan.FromSeconds(2));
        var later = OwnershipPlanner.Plan(View(1, nodes, containers, orphanSeen: new(fresh.OrphanSeen)), Options);

        Assert.All(fresh.Takes, t => Assert.False(t.GraceExpired));
        Assert.All(later.Takes, t => Assert.True(t.GraceExpired));
        Assert.All(later.OrphanSeen.Values, seen => Assert.Equal(firstSeen, seen));
    }

    [Fact]
    public void AContainerHandedOverOnPurpose_IsLeftToItsTarget_UntilNobodyTookItForMinimumStay()
    {
        var nodes = new[] { Node(1), Node(2) };
        var containers = new[] { Container(7, owner: null) };
        var releasedAt = new Dictionary<long, HandOver> { [7] = new(_clock.GetUtcNow(), Epoch: 1) };

        var now = OwnershipPlanner.Plan(View(1, nodes, containers, releasedAt: releasedAt), Options);
        _clock.Advance(Options.MinimumStay);
        var afterStay = OwnershipPlanner.Plan(View(1, nodes, containers, releasedAt: releasedAt, orphanSeen: new(now.OrphanSeen)), Options);

        Assert.Empty(now.Takes);
        Assert.Contains(7L, now.OrphanSeen.Keys);
        Assert.Equal(7L, Assert.Single(afterStay.Takes).ContainerId);
    }

    [Fact]
    public void Routes_NameLiveAndDrainingOwners_AndNoAddressForADeadOne()
    {
        var nodes = new[] { Node(1), Node(2, state: NodeStates.Draining), Node(3, heartbeatAgeSeconds: 30) };
        var containers = new[] { Container(1, owner: 1, epoch: 4), Container(2, owner: 2), Container(3, owner: 3), Container(4, owner: null) };

        var routes = OwnershipPlanner.Plan(View(1, nodes, containers), Options).Routes;

        Assert.Equal(new ContainerRoute(1, 4, "http://node-1"), routes[1]);
        Assert.Equal("http://node-2", routes[2].Address);
        Assert.Null(routes[3].Address);
        Assert.Equal(new ContainerRoute(0, 1, null), routes[4]);
    }

    [Fact]
    public void Rebalance_HandsBackTheLongestHeld_OnlyWhenAnotherLiveNodeIsShort_AndNotTooOften()
    {
        var nodes = new[] { Node(1), Node(2) };
        var containers = Enumerable.Range(1, 4).Select(i => Container(i, owner: 1)).ToArray();
        var start = _clock.GetUtcNow();
        var served = new Dictionary<long, DateTimeOffset> { [1] = start.AddSeconds(3), [2] = start, [3] = start.AddSeconds(1), [4] = start.AddSeconds(2) };

        var tooSoon = OwnershipPlanner.Rebalance(View(1, nodes, containers, served: served), Options, servedAfterTakes: 4);
        _clock.Advance(TimeSpan.FromSeconds(20));
        var due = OwnershipPlanner.Rebalance(View(1, nodes, containers, served: served), Options, servedAfterTakes: 4);
        var releasingIt = OwnershipPlanner.Rebalance(View(1, nodes, containers, served: served, releasing: [2]), Options, servedAfterTakes: 4);
        var justReleased = OwnershipPlanner.Rebalance(View(1, nodes, containers, served: served, lastRelease: _clock.GetUtcNow().AddSeconds(-1)), Options, servedAfterTakes: 4);
        var alone = OwnershipPlanner.Rebalance(View(1, [Node(1)], containers, served: served), Options, servedAfterTakes: 4);

        Assert.Null(tooSoon);
        Assert.Equal(2, due);
        Assert.Equal(3, releasingIt);
        Assert.Null(justReleased);
        Assert.Null(alone);
    }

    [Fact]
    public void AContainerHandedOverAndTakenSince_IsAnOrphanLikeAnyOther_WhenItsNewOwnerDies()
    {
        // This node handed container 7 to node 3 two seconds ago (at epoch 1); node 3 took it (epoch
        // 2) and has just crashed. Node 1 is the only one with room: it must not leave 7 "to the
        // node it was meant for" until the grace runs out.
        var nodes = new[] { Node(1), Node(2), Node(3, state: NodeStates.Crashed) };
        var containers = new[] { Container(5, 2), Container(6, 2), Container(7, owner: null, epoch: 2), Container(8, 1) };
        var releasedAt = new Dictionary<long, HandOver> { [7] = new(_clock.GetUtcNow() - TimeSpan.FromSeconds(2), Epoch: 1) };
        var served = new Dictionary<long, DateTimeOffset> { [8] = _clock.GetUtcNow() };

        var plan = OwnershipPlanner.Plan(View(1, nodes, containers, served, releasedAt: releasedAt), Options);

        var take = Assert.Single(plan.Takes);
        Assert.Equal((7L, false), (take.ContainerId, take.GraceExpired));
    }

    [Fact]
    public void ANodeMarkedCrashed_IsNotCounted_ThoughItsHeartbeatIsFresh()
    {
        // Node 2 was proved gone by another survivor, which holds its process lock while it releases
        // the containers: this node cannot probe the lock, but the mark tells it, so its share
        // takes the orphan now instead of after the grace.
        var nodes = new[] { Node(1), Node(2, heartbeatAgeSeconds: 0.4, state: NodeStates.Crashed), Node(3) };
        var containers = new[] { Container(1, 1), Container(2, 1), Container(3, null), Container(4, 3), Container(5, 3), Container(6, 3) };
        var served = new Dictionary<long, DateTimeOffset> { [1] = _clock.GetUtcNow(), [2] = _clock.GetUtcNow() };

        var plan = OwnershipPlanner.Plan(View(1, nodes, containers, served), Options);

        Assert.Equal(3, plan.Share);
        Assert.Equal([3L], plan.Takes.Select(t => t.ContainerId));
        Assert.Null(plan.Routes[3].Address);
        Assert.DoesNotContain(nodes[1], nodes.Where(n => OwnershipPlanner.IsServing(n, 1, Options)));
    }

    [Fact]
    public void NextChange_IsWhenAServingPeersHeartbeatGoesStale()
    {
        var nodes = new[] { Node(1), Node(2, heartbeatAgeSeconds: 2.8), Node(3, heartbeatAgeSeconds: 0.3) };
        var containers = new[] { Container(1, 1), Container(2, 2), Container(3, 3) };
        var view = View(1, nodes, containers);

        var next = OwnershipPlanner.NextChangeIn(view, OwnershipPlanner.Plan(view, Options), Options);

        Assert.Equal(0.2, next!.Value.TotalSeconds, 0.001);
    }

    [Fact]
    public void NextChange_IsWhenAnOrphansLeaseRunsOut_OrItsGraceEnds()
    {
        // Node 2 went stale a moment ago: its container is an orphan whose lease still runs 0.7 s.
        var self = Node(1);
        var databaseNow = self.HeartbeatAt + self.HeartbeatAge;
        var nodes = new[] { self, Node(2, heartbeatAgeSeconds: 3.1), Node(3, heartbeatAgeSeconds: 0.1) };
        var leased = new ContainerRecord(2, "c2", 2, 1, databaseNow.AddSeconds(0.7), null, 0);
        var containers = new[] { Container(1, 1), leased, Container(3, 3) };
        var view = View(1, nodes, containers);

        var next = OwnershipPlanner.NextChangeIn(view, OwnershipPlanner.Plan(view, Options), Options);
        Assert.Equal(0.7, next!.Value.TotalSeconds, 0.001);

        // Seen 0.6 s ago as an orphan, its lease gone: the grace ends in 0.4 s.
        var free = leased with { LeaseExpiresAt = databaseNow.AddSeconds(-1) };
        var seen = new Dictionary<long, DateTimeOffset> { [2] = _clock.GetUtcNow() - TimeSpan.FromSeconds(0.6) };
        view = View(1, nodes, [containers[0], free, containers[2]], orphanSeen: seen);
        next = OwnershipPlanner.NextChangeIn(view, OwnershipPlanner.Plan(view, Options), Options);
        Assert.Equal(0.4, next!.Value.TotalSeconds, 0.001);
    }

    [Fact]
    public void NextChange_IsNothing_WhenNoPeerServesAndNoOrphanWaits()
    {
        var nodes = new[] { Node(1), Node(2, state: NodeStates.Stopped, heartbeatAgeSeconds: 40) };
        var containers = new[] { Container(1, 1), Container(2, 1) };
        var served = new Dictionary<long, DateTimeOffset> { [1] = _clock.GetUtcNow(), [2] = _clock.GetUtcNow() };
        var view = View(1, nodes, containers, served);

        Assert.Null(OwnershipPlanner.NextChangeIn(view, OwnershipPlanner.Plan(view, Options), Options));
    }
}
