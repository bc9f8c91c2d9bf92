using System.Diagnostics;
using Farm.ContainerStore.FarmDatabase;

namespace Farm.ContainerStore.Tests.Contracts;

/// <summary>
/// What every provider's farm database must do. A provider's test class derives from this and
/// says how to make a fresh, empty farm database for one test.
/// </summary>
public abstract class FarmStoreContract : IAsyncLifetime
{
    private static readonly TimeSpan LongLease = TimeSpan.FromMinutes(5);
    private static readonly TimeSpan ShortLease = TimeSpan.FromMilliseconds(200);
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(10);

    /// <summary>The database's times are whole milliseconds: what a duration it reports may differ from one measured here.</summary>
    private static readonly TimeSpan ClockSlack = TimeSpan.FromMilliseconds(5);

    private readonly List<IFarmStore> _opened = [];
    private string? _connectionString;

    protected abstract IStoreProvider Provider { get; }

    /// <summary>A connection string of a farm database that only the current test uses.</summary>
    protected abstract Task<string> NewFarmConnectionStringAsync();

    public virtual Task InitializeAsync() => Task.CompletedTask;

    public virtual async Task DisposeAsync()
    {
        foreach (var store in _opened)
        {
            await store.DisposeAsync();
        }
    }

    [StoreFact]
    public async Task Open_Twice_MigratesOnceAndKeepsData()
    {
        var first = await OpenAsync();
        var container = await CreateContainerAsync(first);
        await first.CreateEntityAsync("orders", EntityKinds.Queue, container.Id, "{}");
        await first.DisposeAsync();

        var second = await OpenAsync();
        var third = await OpenAsync();

        Assert.NotNull(await second.GetEntityAsync("orders"));
        Assert.Equal(container.Id, Assert.Single(await third.ListContainersAsync()).Id);
    }

    [StoreFact]
    public async Task RegisterNode_ThenList_ShowsItActiveWithAFreshHeartbeat()
    {
        var store = await OpenAsync();

        var node = await store.RegisterNodeAsync(1, "http://localhost:5001", 4242);

        Assert.Equal((1L, "http://localhost:5001", NodeStates.Active, 4242), (node.Id, node.Address, node.State, node.ProcessId));
        Assert.Equal(DateTimeKind.Utc, node.HeartbeatAt.Kind);
        Assert.True(node.HeartbeatAge < TimeSpan.FromMinutes(1));
        Assert.Equal(node.Id, Assert.Single(await store.ListNodesAsync()).Id);
    }

    [StoreFact]
    public async Task RegisterNode_KeepsWhereItServesMetrics_AndAReRegistrationReplacesIt()
    {
        var store = await OpenAsync();

        var registered = await store.RegisterNodeAsync(1, "http://a:1", 1, "http://a:9101/metrics");
        var listed = Assert.Single(await store.ListNodesAsync());
        await store.RegisterNodeAsync(1, "http://a:1", 2);
        var without = Assert.Single(await store.ListNodesAsync());

        Assert.Equal("http://a:9101/metrics", registered.MetricsAddress);
        Assert.Equal("http://a:9101/metrics", listed.MetricsAddress);
        Assert.Null(without.MetricsAddress);
    }

    [StoreFact]
    public async Task RegisterNode_KnownId_ReplacesAddressAndReactivates()
    {
        var store = await OpenAsync();
        await store.RegisterNodeAsync(1, "http://old:1", 1);
        await store.SetNodeStateAsync(1, NodeStates.Stopped);

        await store.RegisterNodeAsync(1, "http://new:2", 2);

        var node = Assert.Single(await store.ListNodesAsync());
        Assert.Equal(("http://new:2", 2, NodeStates.Active), (node.Address, node.ProcessId, node.State));
    }

    [StoreFact]
    public async Task SetNodeStateAndHeartbeat_AreRecorded()
    {
        var store = await OpenAsync();
        var registered = await store.RegisterNodeAsync(1, "http://a:1", 1);
        await store.RegisterNodeAsync(2, "http://b:2", 2);

        await store.SetNodeStateAsync(2, NodeStates.Draining);
        Assert.True(await store.HeartbeatAsync(1, 1, "http://a:1"));

        var nodes = await store.ListNodesAsync();
        Assert.Equal([NodeStates.Active, NodeStates.Draining], nodes.Select(n => n.State));
        Assert.True(nodes[0].HeartbeatAt >= registered.HeartbeatAt);
    }

    [StoreFact]
    public async Task MarkNodeCrashed_OnlyTheRegisteredActiveProcess_AndItsOwnHeartbeatMakesItActiveAgain()
    {
        var store = await OpenAsync();
        await store.RegisterNodeAsync(1, "http://a:1", 11);
        await store.RegisterNodeAsync(2, "http://b:2", 22);
        await store.SetNodeStateAsync(2, NodeStates.Draining);

        Assert.False(await store.MarkNodeCrashedAsync(1, 99));   // another process than the one registered
        Assert.False(await store.MarkNodeCrashedAsync(2, 22));   // draining keeps its state
        Assert.True(await store.MarkNodeCrashedAsync(1, 11));
        Assert.Equal([NodeStates.Crashed, NodeStates.Draining], (await store.ListNodesAsync()).Select(n => n.State));

        // The process was alive after all (its database session dropped): its next heartbeat says so.
        Assert.True(await store.HeartbeatAsync(1, 11, "http://a:1"));
        Assert.True(await store.HeartbeatAsync(2, 22, "http://b:2"));
        Assert.Equal([NodeStates.Active, NodeStates.Draining], (await store.ListNodesAsync()).Select(n => n.State));

        // A new process of a crashed node registers active.
        Assert.True(await store.MarkNodeCrashedAsync(1, 11));
        await store.RegisterNodeAsync(1, "http://a:1", 12);
        Assert.Equal(NodeStates.Active, (await store.ListNodesAsync())[0].State);
    }

    [StoreFact]
    public async Task Heartbeat_OfUnknownNode_Throws()
    {
        var store = await OpenAsync();

        await Assert.ThrowsAnyAsync<InvalidOperationException>(() => store.HeartbeatAsync(99, 1, "http://a:1"));
    }

    [StoreFact]
    public async Task Heartbeat_OfAProcessWhoseNodeIdWasRegisteredAgainElsewhere_IsRefused()
    {
        var store = await OpenAsync();
        await store.RegisterNodeAsync(1, "http://a:1", 100);
        await store.RegisterNodeAsync(1, "http://b:1", 200);

        Assert.False(await store.HeartbeatAsync(1, 100, "http://a:1"));
        Assert.True(await store.HeartbeatAsync(1, 200, "http://b:1"));
    }

    [StoreFact]
    public async Task RegisterNode_KeepsWhereItListensForAmqp_AndAReRegistrationReplacesIt()
    {
        var store = await OpenAsync();

        var registered = await store.RegisterNodeAsync(1, "http://a:1", 1, "http://a:9101/metrics", "amqp://a:5672");
        var listed = Assert.Single(await store.ListNodesAsync());
        await store.RegisterNodeAsync(1, "http://a:1", 2, "http://a:9101/metrics");
        var without = Assert.Single(await store.ListNodesAsync());

        Assert.Equal(("amqp://a:5672", "amqp://a:5672"), (registered.AmqpAddress, listed.AmqpAddress));
        Assert.Equal("http://a:9101/metrics", listed.MetricsAddress);
        Assert.Null(without.AmqpAddress);
    }

    [StoreFact]
    public async Task Open_NewFarm_HasTheRootManagePolicyWithTwoRandomKeys()
    {
        var store = await OpenAsync();

        var root = Assert.Single(await store.ListAccessPoliciesAsync());

        Assert.Equal((AccessPolicies.RootPolicyName, AccessRights.Manage | AccessRights.Send | AccessRights.Listen), (root.Name, root.Rights));
        Assert.Equal(32, Convert.FromBase64String(root.PrimaryKey).Length);
        Assert.Equal(32, Convert.FromBase64String(root.SecondaryKey).Length);
        Assert.NotEqual(root.PrimaryKey, root.SecondaryKey);
        Assert.True(DateTimeOffset.UtcNow - root.CreatedAt < TimeSpan.FromMinutes(1));
        Assert.Equal(root, await store.GetAccessPolicyAsync(AccessPolicies.RootPolicyName));
    }

    [StoreFact]
    public async Task Open_NewFarmByThreeProcessesAtOnce_ThenAgain_KeepsOneRootPolicyWithItsFirstKeys()
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var connectionString = _connectionString;

        var opened = await Task.WhenAll(Enumerable.Range(0, 3).Select(_ => Provider.OpenFarmStoreAsync(connectionString)));
        _opened.AddRange(opened);
        var root = Assert.Single(await opened[0].ListAccessPoliciesAsync());
        var again = await OpenAsync();

        foreach (var store in opened.Append(again))
        {
            Assert.Equal(root, Assert.Single(await store.ListAccessPoliciesAsync()));
        }
    }

    [StoreFact]
    public async Task AccessPolicies_AreCreatedListedRenewedAndDeleted_ByExactName()
    {
        var store = await OpenAsync();

        var sender = await store.CreateAccessPolicyAsync("sender", AccessRights.Send, "p1", "s1");
        var taken = await store.CreateAccessPolicyAsync("sender", AccessRights.Listen, "p2", "s2");
        var otherCase = await store.CreateAccessPolicyAsync("Sender", AccessRights.Send | AccessRights.Listen, "p3", "s3");
        var renewed = await store.UpdateAccessPolicyKeysAsync("sender", "p1-new", "s1");

        Assert.NotNull(sender);
        Assert.Equal(("sender", AccessRights.Send, "p1", "s1"), (sender.Name, sender.Rights, sender.PrimaryKey, sender.SecondaryKey));
        Assert.Null(taken);
        Assert.NotNull(otherCase);
        Assert.NotNull(renewed);
        Assert.Equal(("p1-new", "s1", AccessRights.Send, sender.CreatedAt), (renewed.PrimaryKey, renewed.SecondaryKey, renewed.Rights, renewed.CreatedAt));
        Assert.True(renewed.UpdatedAt >= sender.UpdatedAt);
        Assert.Equal(renewed, await store.GetAccessPolicyAsync("sender"));
        Assert.Null(await store.GetAccessPolicyAsync("SENDER"));
        Assert.Equal([AccessPolicies.RootPolicyName, "Sender", "sender"], (await store.ListAccessPoliciesAsync()).Select(p => p.Name));

        Assert.True(await store.DeleteAccessPolicyAsync("sender"));
        Assert.False(await store.DeleteAccessPolicyAsync("sender"));
        Assert.Null(await store.UpdateAccessPolicyKeysAsync("sender", "a", "b"));
        Assert.Equal([AccessPolicies.RootPolicyName, "Sender"], (await store.ListAccessPoliciesAsync()).Select(p => p.Name));
    }

    [StoreFact]
    public async Task CreateAccessPolicy_WithManage_StoresSendAndListenToo_AndRefusesNoRights()
    {
        var store = await OpenAsync();

        var admin = await store.CreateAccessPolicyAsync("admin", AccessRights.Manage, "p", "s");

        Assert.Equal(AccessRights.Manage | AccessRights.Send | AccessRights.Listen, admin!.Rights);
        await Assert.ThrowsAnyAsync<ArgumentException>(() => store.CreateAccessPolicyAsync("nothing", AccessRights.None, "p", "s"));
        await Assert.ThrowsAnyAsync<ArgumentException>(() => store.CreateAccessPolicyAsync("unknown", (AccessRights)8, "p", "s"));
        Assert.Null(await store.GetAccessPolicyAsync("nothing"));
    }

    [StoreFact]
    public async Task DeleteAccessPolicy_TheLastWithManage_IsRefused_AndAnotherManagePolicyLetsTheRootGo()
    {
        var store = await OpenAsync();
        await store.CreateAccessPolicyAsync("listener", AccessRights.Listen, "p", "s");

        var refused = await Assert.ThrowsAsync<LastManageAccessPolicyException>(() => store.DeleteAccessPolicyAsync(AccessPolicies.RootPolicyName));
        await store.CreateAccessPolicyAsync("admin", AccessRights.Manage, "p", "s");
        var deleted = await store.DeleteAccessPolicyAsync(AccessPolicies.RootPolicyName);
        var reopened = await OpenAsync();

        Assert.Contains("last one with Manage", refused.Message, StringComparison.Ordinal);
        Assert.True(deleted);
        await Assert.ThrowsAsync<LastManageAccessPolicyException>(() => store.DeleteAccessPolicyAsync("admin"));
        Assert.True(await store.DeleteAccessPolicyAsync("listener"));
        // A farm that still has a Manage policy does not get the root one back when it is opened again.
        Assert.Equal(["admin"], (await reopened.ListAccessPoliciesAsync()).Select(p => p.Name));
    }

    [StoreFact]
    public async Task DeleteAccessPolicy_TwoManagePoliciesDeletedAtOnce_LeavesOne()
    {
        var store = await OpenAsync();
        await store.CreateAccessPolicyAsync("admin", AccessRights.Manage, "p", "s");

        var deletes = await Task.WhenAll(
            Attempt(() => store.DeleteAccessPolicyAsync(AccessPolicies.RootPolicyName)),
            Attempt(() => store.DeleteAccessPolicyAsync("admin")));

        Assert.Equal(1, deletes.Count(deleted => deleted));
        Assert.Single(await store.ListAccessPoliciesAsync(), p => p.Rights.HasFlag(AccessRights.Manage));

        static async Task<bool> Attempt(Func<Task<bool>> delete)
        {
            try
            {
                return await delete();
            }
            catch (LastManageAccessPolicyException)
            {
                return false;
            }
        }
    }

    [StoreFact]
    public async Task Open_Version5FarmDatabase_UpgradesWithTheRootPolicy_AndItsNodesKeepWorking()
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var containerId = await CreateVersion5FarmAsync(_connectionString);

        var store = await OpenAsync();

        var node = Assert.Single(await store.ListNodesAsync());
        Assert.Equal((1L, "http://node-1", (string?)null), (node.Id, node.Address, node.AmqpAddress));
        Assert.True(await store.HeartbeatAsync(1, 101, "http://node-1"));
        Assert.NotNull(await store.TryAcquireContainerAsync(containerId, 1, LongLease));
        Assert.Equal(AccessPolicies.RootPolicyName, Assert.Single(await store.ListAccessPoliciesAsync()).Name);
        await store.RegisterNodeAsync(1, "http://node-1", 202, amqpAddress: "amqp://node-1:5672");
        Assert.Equal("amqp://node-1:5672", Assert.Single(await (await OpenAsync()).ListNodesAsync()).AmqpAddress);
    }

    [StoreFact]
    public async Task Servers_AreNamedOnce_CountTheirContainers_AndStayWhileAContainerIsOnThem()
    {
        var store = await OpenAsync();

        var added = await store.AddServerAsync("east", "Host=east;Username=farm");
        var again = await store.AddServerAsync("east", "Host=elsewhere");
        var onEast = await store.CreateContainerAsync(id => $"east-{id}", "east");
        var onFarms = await store.CreateContainerAsync(id => $"farm-{id}");
        await store.AddServerAsync("west", "Host=west");

        Assert.Equal(new ServerRecord("east", "Host=east;Username=farm", 0), added);
        Assert.Null(again);
        Assert.Equal(("east", (string?)null), (onEast.Server, onFarms.Server));
        Assert.Equal("east", (await store.GetContainerAsync(onEast.Id))!.Server);
        Assert.Equal([("east", 1L), ("west", 0L)], (await store.ListServersAsync()).Select(s => (s.Name, s.ContainerCount)));
        Assert.False(await store.RemoveServerAsync("east"));
        Assert.True(await store.RemoveServerAsync("west"));
        Assert.False(await store.RemoveServerAsync("west"));
        Assert.Equal(["east"], (await store.ListServersAsync()).Select(s => s.Name));
    }

    [StoreFact]
    public async Task CreateContainer_NamesItsConnectionStringFromItsId()
    {
        var store = await OpenAsync();

        var first = await store.CreateContainerAsync(id => $"container-{id}");
        var second = await store.CreateContainerAsync(id => $"container-{id}");

        Assert.NotEqual(first.Id, second.Id);
        Assert.Equal($"container-{first.Id}", first.ConnectionString);
        Assert.Equal((null, 0L, null, null, 0L), (first.OwnerNode, first.Epoch, first.LeaseExpiresAt, first.OwnedSince, first.EntityCount));
        Assert.Equal(second, await store.GetContainerAsync(second.Id));
        Assert.Equal([first.Id, second.Id], (await store.ListContainersAsync()).Select(c => c.Id));
        Assert.Null(await store.GetContainerAsync(12345));
    }

    [StoreFact]
    public async Task Container_EntityCount_CountsItsEntities()
    {
        var store = await OpenAsync();
        var busy = await CreateContainerAsync(store);
        var idle = await CreateContainerAsync(store);
        await store.CreateEntityAsync("a", EntityKinds.Queue, busy.Id, "{}");
        await store.CreateEntityAsync("b", EntityKinds.Queue, busy.Id, "{}");

        Assert.Equal(2, (await store.GetContainerAsync(busy.Id))!.EntityCount);
        Assert.Equal([2L, 0L], (await store.ListContainersAsync()).Select(c => c.EntityCount));
        Assert.Equal(0, (await store.GetContainerAsync(idle.Id))!.EntityCount);
    }

    [StoreFact]
    public async Task TryAcquire_UnownedContainer_TakesItAndRaisesEpoch()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);

        var acquired = await store.TryAcquireContainerAsync(container.Id, nodeId: 1, LongLease);

        Assert.NotNull(acquired);
        Assert.Equal((1L, 1L), (acquired.OwnerNode, acquired.Epoch));
        Assert.NotNull(acquired.OwnedSince);
        Assert.True(acquired.LeaseExpiresAt > acquired.OwnedSince + TimeSpan.FromMinutes(4));
    }

    [StoreFact]
    public async Task TryAcquire_WhileAnotherNodeHoldsALiveLease_IsRefused()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        Assert.Null(await store.TryAcquireContainerAsync(container.Id, 2, LongLease));

        var unchanged = await store.GetContainerAsync(container.Id);
        Assert.Equal((1L, 1L), (unchanged!.OwnerNode, unchanged.Epoch));
    }

    /// <summary>
    /// A lease renews for its owner at its epoch only; the blocking form (a node's renewal thread, which
    /// must not wait on the thread pool) answers as the async one does.
    /// </summary>
    [StoreFact]
    public async Task RenewContainerLease_ExtendsTheOwnersLeaseAtItsEpoch_RefusesAnyOther_BlockingOrNot()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var taken = await store.TryAcquireContainerAsync(container.Id, 1, ShortLease);

        Assert.True(store.RenewContainerLease(container.Id, 1, taken!.Epoch, LongLease));
        var renewed = Assert.Single(await store.ListContainersAsync(), c => c.Id == container.Id);
        Assert.True(renewed.LeaseExpiresAt > taken.LeaseExpiresAt);
        Assert.False(store.RenewContainerLease(container.Id, 2, taken.Epoch, LongLease));
        Assert.False(store.RenewContainerLease(container.Id, 1, taken.Epoch + 1, LongLease));
        Assert.True(await store.RenewContainerLeaseAsync(container.Id, 1, taken.Epoch, LongLease));
        Assert.False(await store.RenewContainerLeaseAsync(container.Id, 2, taken.Epoch, LongLease));
    }

    [StoreFact]
    public async Task Heartbeat_BlockingForm_AcceptsTheRegisteredProcess_RefusesAReplacedOne_AndThrowsForAnUnknownNode()
    {
        var store = await OpenAsync();
        var timeout = TimeSpan.FromSeconds(3);
        await store.RegisterNodeAsync(1, "http://a:1", 100);

        Assert.True(store.Heartbeat(1, 100, "http://a:1", timeout));
        await store.RegisterNodeAsync(1, "http://b:1", 200);
        Assert.False(store.Heartbeat(1, 100, "http://a:1", timeout));
        Assert.True(store.Heartbeat(1, 200, "http://b:1", timeout));
        Assert.ThrowsAny<InvalidOperationException>(() => store.Heartbeat(99, 1, "http://a:1", timeout));
    }

    [StoreFact]
    public async Task TryAcquire_ByTheOwner_RenewsWithoutRaisingEpoch()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var first = await store.TryAcquireContainerAsync(container.Id, 1, ShortLease);

        var renewed = await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        Assert.NotNull(renewed);
        Assert.Equal((1L, 1L, first!.OwnedSince), (renewed.OwnerNode, renewed.Epoch, renewed.OwnedSince));
        Assert.True(renewed.LeaseExpiresAt > first.LeaseExpiresAt);
    }

    [StoreFact]
    public async Task TryAcquire_AfterTheLeaseExpires_SucceedsForAnotherNodeAndRaisesEpoch()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var first = await store.TryAcquireContainerAsync(container.Id, 1, ShortLease);

        var taken = await Eventually.ValueAsync(
            () => store.TryAcquireContainerAsync(container.Id, 2, LongLease),
            Deadline,
            "node 2 should take the container once node 1's 200 ms lease ran out");

        Assert.Equal((2L, first!.Epoch + 1), (taken.OwnerNode, taken.Epoch));
        Assert.True(taken.OwnedSince >= first.LeaseExpiresAt);
        Assert.Null(await store.TryAcquireContainerAsync(container.Id, 1, LongLease));
    }

    [StoreFact]
    public async Task Release_LetsAnotherNodeTakeOverAtOnce_WithEpochRaised()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        await store.ReleaseContainerAsync(container.Id, 1);

        var released = await store.GetContainerAsync(container.Id);
        Assert.Equal((null, 1L), (released!.OwnerNode, released.Epoch));
        var taken = await store.TryAcquireContainerAsync(container.Id, 2, LongLease);
        Assert.Equal((2L, 2L), (taken!.OwnerNode, taken.Epoch));
    }

    [StoreFact]
    public async Task Release_ByANodeThatDoesNotOwnIt_ChangesNothing()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var acquired = await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        await store.ReleaseContainerAsync(container.Id, 2);

        Assert.Equal(acquired, await store.GetContainerAsync(container.Id));
    }

    [StoreFact]
    public async Task TryAcquire_UnknownContainer_ReturnsNull()
    {
        var store = await OpenAsync();

        Assert.Null(await store.TryAcquireContainerAsync(404, 1, LongLease));
    }

    // ---- Changes of owner ----

    [StoreFact]
    public async Task TakingANewContainer_RecordsAFirstTake_WithNoUnownedTime()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);

        var taken = await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        var change = Assert.Single(await store.ListOwnershipChangesAsync(10));
        Assert.Equal(
            (container.Id, 1L, 0L, 1L, OwnershipChangeKinds.First, (TimeSpan?)null),
            (change.ContainerId, change.Epoch, change.FromNode, change.ToNode, change.Kind, change.Unowned));
        Assert.Equal(DateTimeKind.Utc, change.At.Kind);
        Assert.InRange(change.At, taken!.OwnedSince!.Value, taken.OwnedSince.Value + TimeSpan.FromMinutes(1));
    }

    [StoreFact]
    public async Task TryAcquire_ByTheOwner_RecordsNoChange()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        Assert.Equal(OwnershipChangeKinds.First, Assert.Single(await store.ListOwnershipChangesAsync(10)).Kind);
    }

    [StoreFact]
    public async Task TryAcquire_Refused_RecordsNoChange()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        Assert.Null(await store.TryAcquireContainerAsync(container.Id, 2, LongLease));
        Assert.Null(await store.TryAcquireContainerAsync(404, 2, LongLease));

        Assert.Single(await store.ListOwnershipChangesAsync(10));
    }

    [StoreFact]
    public async Task ReleaseThenTakeByAnotherNode_RecordsAPlannedMove_UnownedForTheTimeBetween()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        var (taken, atLeast, atMost) = await ReleaseThenTakeAsync(store, container.Id, 1, 2);

        var changes = await store.ListOwnershipChangesAsync(10);
        Assert.Equal(2, changes.Count);
        var change = changes[0];
        Assert.Equal(
            (container.Id, taken!.Epoch, 1L, 2L, OwnershipChangeKinds.Planned),
            (change.ContainerId, change.Epoch, change.FromNode, change.ToNode, change.Kind));
        Assert.InRange(change.Unowned!.Value, atLeast, atMost);
    }

    [StoreFact]
    public async Task ReleaseThenTakeBackByTheSameNode_RecordsARestart_UnownedForTheTimeBetween()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        var (taken, atLeast, atMost) = await ReleaseThenTakeAsync(store, container.Id, 1, 1);

        var change = (await store.ListOwnershipChangesAsync(10))[0];
        Assert.Equal(
            (container.Id, 2L, 1L, 1L, OwnershipChangeKinds.Restart),
            (change.ContainerId, change.Epoch, change.FromNode, change.ToNode, change.Kind));
        Assert.Equal(2L, taken!.Epoch);
        Assert.InRange(change.Unowned!.Value, atLeast, atMost);
    }

    [StoreFact]
    public async Task TakeAfterTheOwnersLeaseRanOut_RecordsAFailover_UnownedSinceTheOwnersLastHeartbeat()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var owner = await store.RegisterNodeAsync(1, "http://node-1", 101);
        await store.TryAcquireContainerAsync(container.Id, 1, ShortLease);

        var taken = await Eventually.ValueAsync(
            () => store.TryAcquireContainerAsync(container.Id, 2, LongLease),
            Deadline,
            "node 2 should take the container once node 1's 200 ms lease ran out");

        var change = (await store.ListOwnershipChangesAsync(10))[0];
        Assert.Equal(
            (container.Id, taken.Epoch, 1L, 2L, OwnershipChangeKinds.Failover),
            (change.ContainerId, change.Epoch, change.FromNode, change.ToNode, change.Kind));
        // Node 1 heartbeated last before it took the lease: counted from then, so longer than the lease.
        Assert.Equal(change.At - owner.HeartbeatAt, change.Unowned);
        Assert.True(change.Unowned > ShortLease, $"unowned {change.Unowned}");
    }

    [StoreFact]
    public async Task TakeAfterTheLeaseOfAnOwnerWithoutANodeRowRanOut_CountsUnownedFromTheLeasesEnd()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var first = await store.TryAcquireContainerAsync(container.Id, 1, ShortLease);

        await Eventually.ValueAsync(
            () => store.TryAcquireContainerAsync(container.Id, 2, LongLease),
            Deadline,
            "node 2 should take the container once node 1's 200 ms lease ran out");

        var change = (await store.ListOwnershipChangesAsync(10))[0];
        Assert.Equal((OwnershipChangeKinds.Failover, 1L), (change.Kind, change.FromNode));
        Assert.Equal(change.At - first!.LeaseExpiresAt, change.Unowned);
    }

    [StoreFact]
    public async Task ACrashedProcessesLeftover_TakenBackByItsNode_IsARestart_UnownedSinceThatProcessWasLastAlive()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var crashed = await store.RegisterNodeAsync(1, "http://node-1", 101);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        // The node's next process registers (a fresh heartbeat), then lets go of what the crashed one left.
        await store.RegisterNodeAsync(1, "http://node-1", 202);
        await store.ReleaseAbandonedContainerAsync(container.Id, 1, crashed.HeartbeatAt);
        var released = await store.GetContainerAsync(container.Id);
        var taken = await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        Assert.Equal((null, 1L), (released!.OwnerNode, released.Epoch));
        var change = (await store.ListOwnershipChangesAsync(10))[0];
        Assert.Equal(
            (container.Id, taken!.Epoch, 1L, 1L, OwnershipChangeKinds.Restart),
            (change.ContainerId, change.Epoch, change.FromNode, change.ToNode, change.Kind));
        Assert.Equal(change.At - crashed.HeartbeatAt, change.Unowned);
    }

    [StoreFact]
    public async Task ACrashedProcessesLeftover_TakenByAnotherNode_IsAFailover_UnownedSinceThatProcessWasLastAlive()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var crashed = await store.RegisterNodeAsync(1, "http://node-1", 101);
        await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        await store.RegisterNodeAsync(1, "http://node-1", 202);
        await store.ReleaseAbandonedContainerAsync(container.Id, 1, crashed.HeartbeatAt);
        await store.TryAcquireContainerAsync(container.Id, 2, LongLease);

        var change = (await store.ListOwnershipChangesAsync(10))[0];
        Assert.Equal((OwnershipChangeKinds.Failover, 1L, 2L), (change.Kind, change.FromNode, change.ToNode));
        Assert.Equal(change.At - crashed.HeartbeatAt, change.Unowned);
    }

    [StoreFact]
    public async Task ReleaseAbandoned_ByANodeThatDoesNotOwnIt_ChangesNothing()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var acquired = await store.TryAcquireContainerAsync(container.Id, 1, LongLease);

        await store.ReleaseAbandonedContainerAsync(container.Id, 2, null);

        Assert.Equal(acquired, await store.GetContainerAsync(container.Id));
        Assert.Null(await store.TryAcquireContainerAsync(container.Id, 2, LongLease));
    }

    [StoreFact]
    public async Task ListOwnershipChanges_IsNewestFirst_UpToTheLimit()
    {
        var store = await OpenAsync();
        var one = await CreateContainerAsync(store);
        var two = await CreateContainerAsync(store);
        await store.TryAcquireContainerAsync(one.Id, 1, LongLease);
        await store.TryAcquireContainerAsync(two.Id, 1, LongLease);
        await store.ReleaseContainerAsync(one.Id, 1);
        await store.TryAcquireContainerAsync(one.Id, 2, LongLease);

        Assert.Equal(
            [(one.Id, 2L), (two.Id, 1L), (one.Id, 1L)],
            (await store.ListOwnershipChangesAsync(10)).Select(c => (c.ContainerId, c.Epoch)));
        Assert.Equal([(one.Id, 2L), (two.Id, 1L)], (await store.ListOwnershipChangesAsync(2)).Select(c => (c.ContainerId, c.Epoch)));
        await Assert.ThrowsAsync<ArgumentOutOfRangeException>(() => store.ListOwnershipChangesAsync(0));
    }

    [StoreFact]
    public async Task OnlyTheNewest1000ChangesOfOwner_AreKept()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        const int Takes = 1_003;

        for (var take = 1; take <= Takes; take++)
        {
            var node = take % 2 + 1;
            Assert.NotNull(await store.TryAcquireContainerAsync(container.Id, node, LongLease));
            await store.ReleaseContainerAsync(container.Id, node);
        }

        var changes = await store.ListOwnershipChangesAsync(int.MaxValue);
        Assert.Equal(Enumerable.Range(Takes - 999, 1_000).Reverse().Select(epoch => (long)epoch), changes.Select(c => c.Epoch));
        Assert.All(changes, c => Assert.Equal(OwnershipChangeKinds.Planned, c.Kind));
    }

    [StoreFact]
    public async Task Open_Version3FarmDatabase_UpgradesAndRecordsChangesOfOwnerFromThen()
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var (owned, released, fresh) = await CreateVersion3FarmAsync(_connectionString);

        var store = await OpenAsync();

        Assert.Empty(await store.ListOwnershipChangesAsync(10));
        Assert.Null(await store.TryAcquireContainerAsync(owned, 2, LongLease));
        Assert.NotNull(await store.TryAcquireContainerAsync(released, 2, LongLease));
        Assert.NotNull(await store.TryAcquireContainerAsync(fresh, 2, LongLease));
        await store.ReleaseContainerAsync(owned, 1);
        Assert.NotNull(await store.TryAcquireContainerAsync(owned, 2, LongLease));

        // Released before the upgrade: a planned move (releases are), by whom and since when unknown.
        (long, long, long, long, string, bool)[] expected =
        [
            (owned, 4, 1, 2, OwnershipChangeKinds.Planned, true),
            (fresh, 1, 0, 2, OwnershipChangeKinds.First, false),
            (released, 3, 0, 2, OwnershipChangeKinds.Planned, false),
        ];
        Assert.Equal(expected, (await store.ListOwnershipChangesAsync(10)).Select(c => (c.ContainerId, c.Epoch, c.FromNode, c.ToNode, c.Kind, c.Unowned is not null)));
        var reopened = await OpenAsync();
        Assert.Equal(3, (await reopened.ListOwnershipChangesAsync(10)).Count);
    }

    /// <summary>
    /// Releases the container, leaves it without an owner for a while, and takes it: returns the take
    /// and the least and most time the database can have counted between the release and the take.
    /// </summary>
    private static async Task<(ContainerRecord? Taken, TimeSpan AtLeast, TimeSpan AtMost)> ReleaseThenTakeAsync(
        IFarmStore store, long containerId, long releasedBy, long takenBy)
    {
        var clock = Stopwatch.StartNew();
        await store.ReleaseContainerAsync(containerId, releasedBy);
        var released = clock.Elapsed;
        // Not a wait for something: the time without an owner is what the change must report.
        await Task.Delay(TimeSpan.FromMilliseconds(300));
        var takeStarts = clock.Elapsed;
        var taken = await store.TryAcquireContainerAsync(containerId, takenBy, LongLease);
        return (taken, takeStarts - released - ClockSlack, clock.Elapsed + ClockSlack);
    }

    [StoreFact]
    public async Task CreateEntity_ThenGet_IgnoresCase()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);

        var created = await store.CreateEntityAsync("Orders", EntityKinds.Queue, container.Id, """{"maxDeliveryCount":10}""");

        var found = await store.GetEntityAsync("oRDERS");
        Assert.Equal(created, found);
        Assert.Equal(("Orders", EntityKinds.Queue, container.Id, """{"maxDeliveryCount":10}"""), (found!.Name, found.Kind, found.ContainerId, found.PropertiesJson));
        Assert.Equal(created.CreatedAt, created.UpdatedAt);
        Assert.Null(await store.GetEntityAsync("missing"));
    }

    [StoreFact]
    public async Task CreateEntity_WithNameTakenInAnotherCase_ThrowsEntityAlreadyExists()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.CreateEntityAsync("orders", EntityKinds.Queue, container.Id, "{}");

        var error = await Assert.ThrowsAsync<EntityAlreadyExistsException>(
            () => store.CreateEntityAsync("ORDERS", EntityKinds.Queue, container.Id, "{}"));

        Assert.Equal("ORDERS", error.Name);
        Assert.Single(await store.ListEntitiesAsync());
    }

    [StoreFact]
    public async Task CreateEntity_InUnknownContainer_ThrowsArgumentException()
    {
        var store = await OpenAsync();

        await Assert.ThrowsAsync<ArgumentException>(() => store.CreateEntityAsync("orders", EntityKinds.Queue, 404, "{}"));
    }

    [StoreFact]
    public async Task UpdateEntity_ReplacesPropertiesAndKeepsCreationTime()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var created = await store.CreateEntityAsync("orders", EntityKinds.Queue, container.Id, "{}");

        var updated = await store.UpdateEntityAsync("ORDERS", """{"lockDuration":"PT1M"}""");

        Assert.NotNull(updated);
        Assert.Equal((created.Id, created.CreatedAt, """{"lockDuration":"PT1M"}"""), (updated.Id, updated.CreatedAt, updated.PropertiesJson));
        Assert.True(updated.UpdatedAt >= created.UpdatedAt);
        Assert.Equal(updated, await store.GetEntityAsync("orders"));
        Assert.Null(await store.UpdateEntityAsync("missing", "{}"));
    }

    [StoreFact]
    public async Task DeleteEntity_RemovesItOnce()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        await store.CreateEntityAsync("orders", EntityKinds.Queue, container.Id, "{}");

        Assert.True(await store.DeleteEntityAsync("Orders"));
        Assert.False(await store.DeleteEntityAsync("orders"));
        Assert.Null(await store.GetEntityAsync("orders"));
    }

    [StoreFact]
    public async Task DeleteEntity_ThenCreateSameName_GetsANewId()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var first = await store.CreateEntityAsync("orders", EntityKinds.Queue, container.Id, "{}");
        await store.DeleteEntityAsync("orders");

        var second = await store.CreateEntityAsync("orders", EntityKinds.Queue, container.Id, "{}");

        // Container databases key messages by entity id; a reused id would inherit old messages.
        Assert.NotEqual(first.Id, second.Id);
    }

    [StoreFact]
    public async Task ListEntities_FiltersByKindAndByContainer()
    {
        var store = await OpenAsync();
        var one = await CreateContainerAsync(store);
        var two = await CreateContainerAsync(store);
        await store.CreateEntityAsync("b-queue", EntityKinds.Queue, one.Id, "{}");
        await store.CreateEntityAsync("a-queue", EntityKinds.Queue, two.Id, "{}");
        await store.CreateEntityAsync("c-topic", "topic", one.Id, "{}");

        Assert.Equal(["a-queue", "b-queue", "c-topic"], (await store.ListEntitiesAsync()).Select(e => e.Name));
        Assert.Equal(["a-queue", "b-queue"], (await store.ListEntitiesAsync(EntityKinds.Queue)).Select(e => e.Name));
        Assert.Equal(["b-queue", "c-topic"], (await store.ListEntitiesInContainerAsync(one.Id)).Select(e => e.Name));
        Assert.Empty(await store.ListEntitiesInContainerAsync(404));
    }

    /// <summary>A node loading many queues at once reads their records afresh in one read: the ones that still exist, as stored now.</summary>
    [StoreFact]
    public async Task GetEntitiesById_ReadsTheOnesThatExist_AsStoredNow()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var kept = await store.CreateEntityAsync("kept", EntityKinds.Queue, container.Id, "{}");
        var changed = await store.CreateEntityAsync("changed", EntityKinds.Queue, container.Id, "{}");
        var deleted = await store.CreateEntityAsync("deleted", EntityKinds.Queue, container.Id, "{}");
        await store.UpdateEntityAsync("changed", """{"maxDeliveryCount":3}""");
        await store.DeleteEntityAsync("deleted");

        var read = (await store.GetEntitiesByIdAsync([kept.Id, changed.Id, deleted.Id, 404])).OrderBy(e => e.Id).ToList();

        Assert.Equal([kept.Id, changed.Id], read.Select(e => e.Id));
        Assert.Equal(("kept", EntityKinds.Queue, container.Id), (read[0].Name, read[0].Kind, read[0].ContainerId));
        Assert.Equal("""{"maxDeliveryCount":3}""", read[1].PropertiesJson);
        Assert.Empty(await store.GetEntitiesByIdAsync([]));
    }

    [StoreFact]
    public async Task Container_EntityCount_CountsOnlyTopLevelEntities()
    {
        var store = await OpenAsync();
        var busy = await CreateContainerAsync(store);
        var idle = await CreateContainerAsync(store);
        await store.CreateEntityAsync("queue", EntityKinds.Queue, busy.Id, "{}");
        var topic = await store.CreateEntityAsync("topic", EntityKinds.Topic, busy.Id, "{}");
        for (var i = 0; i < 3; i++)
        {
            await CreateSubscriptionAsync(store, topic, $"sub-{i}");
        }

        // Placement puts a new queue or topic in the container with the fewest; subscriptions
        // follow their topic and do not count.
        Assert.Equal(2, (await store.GetContainerAsync(busy.Id))!.EntityCount);
        Assert.Equal([2L, 0L], (await store.ListContainersAsync()).Select(c => c.EntityCount));
        Assert.Equal(0, (await store.GetContainerAsync(idle.Id))!.EntityCount);
        Assert.Equal(5, (await store.ListEntitiesInContainerAsync(busy.Id)).Count);
    }

    [StoreFact]
    public async Task CreateChildEntity_LivesInTheParentsContainer_WithItsFirstRule_AndIsListedUnderIt()
    {
        var store = await OpenAsync();
        await CreateContainerAsync(store);
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("Orders", EntityKinds.Topic, container.Id, "{}");
        var otherTopic = await store.CreateEntityAsync("payments", EntityKinds.Topic, container.Id, "{}");
        await CreateSubscriptionAsync(store, otherTopic, "elsewhere");

        var second = await store.CreateChildEntityAsync(
            topic.Id, "Orders/Subscriptions/b-audit", EntityKinds.Subscription, """{"lockDuration":"PT30S"}""", "$Default", """{"sqlFilter":"1=1"}""");
        var first = await store.CreateChildEntityAsync(
            topic.Id, "Orders/Subscriptions/A-Billing", EntityKinds.Subscription, "{}", "$Default", "{}");

        Assert.Null(topic.ParentId);
        Assert.Equal(
            ("Orders/Subscriptions/b-audit", EntityKinds.Subscription, container.Id, topic.Id, """{"lockDuration":"PT30S"}"""),
            (second.Name, second.Kind, second.ContainerId, second.ParentId, second.PropertiesJson));
        Assert.Equal(second.CreatedAt, second.UpdatedAt);
        Assert.Equal(DateTimeKind.Utc, second.CreatedAt.Kind);
        Assert.Equal(second, await store.GetEntityAsync("orders/subscriptions/B-AUDIT"));
        Assert.Equal([first, second], await store.ListChildEntitiesAsync(topic.Id));
        Assert.Equal(["elsewhere"], (await store.ListChildEntitiesAsync(otherTopic.Id)).Select(e => e.Name[(e.Name.LastIndexOf('/') + 1)..]));
        Assert.Empty(await store.ListChildEntitiesAsync(404));
        Assert.Empty(await store.ListChildEntitiesAsync(first.Id));

        var rule = Assert.Single(await store.ListRulesAsync(second.Id));
        Assert.Equal((second.Id, "$Default", """{"sqlFilter":"1=1"}"""), (rule.SubscriptionId, rule.Name, rule.DefinitionJson));
        Assert.Equal(DateTimeKind.Utc, rule.CreatedAt.Kind);
        Assert.Equal(
            [EntityKinds.Subscription, EntityKinds.Subscription, EntityKinds.Subscription],
            (await store.ListEntitiesAsync(EntityKinds.Subscription)).Select(e => e.Kind));
    }

    [StoreFact]
    public async Task CreateChildEntity_WithNameTakenInAnotherCase_ThrowsEntityAlreadyExistsAndWritesNothing()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var existing = await CreateSubscriptionAsync(store, topic, "audit");
        await store.CreateEntityAsync("orders/Subscriptions/queue-like", EntityKinds.Queue, container.Id, "{}");

        var error = await Assert.ThrowsAsync<EntityAlreadyExistsException>(() => store.CreateChildEntityAsync(
            topic.Id, "ORDERS/subscriptions/AUDIT", EntityKinds.Subscription, "{}", "$Default", "{}"));
        await Assert.ThrowsAsync<EntityAlreadyExistsException>(() => store.CreateChildEntityAsync(
            topic.Id, "orders/Subscriptions/Queue-Like", EntityKinds.Subscription, "{}", "$Default", "{}"));

        Assert.Equal("ORDERS/subscriptions/AUDIT", error.Name);
        Assert.Equal([existing.Id], (await store.ListChildEntitiesAsync(topic.Id)).Select(e => e.Id));
        Assert.Single(await store.ListRulesOfTopicAsync(topic.Id));
    }

    [StoreFact]
    public async Task CreateChildEntity_WhenTheParentIsGone_ThrowsKeyNotFoundAndWritesNothing()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        Assert.True(await store.DeleteEntityAsync("orders"));

        await Assert.ThrowsAsync<KeyNotFoundException>(() => store.CreateChildEntityAsync(
            topic.Id, "orders/Subscriptions/audit", EntityKinds.Subscription, "{}", "$Default", "{}"));
        await Assert.ThrowsAsync<KeyNotFoundException>(() => store.CreateChildEntityAsync(
            404, "ghost/Subscriptions/audit", EntityKinds.Subscription, "{}", "$Default", "{}"));

        Assert.Empty(await store.ListEntitiesAsync());
        Assert.Empty(await store.ListChildEntitiesAsync(topic.Id));
    }

    [StoreFact]
    public async Task DeleteEntity_Topic_DeletesItsSubscriptionsAndTheirRules_AndNothingElse()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var orders = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var payments = await store.CreateEntityAsync("payments", EntityKinds.Topic, container.Id, "{}");
        var queue = await store.CreateEntityAsync("orders-queue", EntityKinds.Queue, container.Id, "{}");
        var audit = await CreateSubscriptionAsync(store, orders, "audit");
        var billing = await CreateSubscriptionAsync(store, orders, "billing");
        await store.CreateRuleAsync(audit.Id, "big", """{"sql":"amount > 100"}""");
        var kept = await CreateSubscriptionAsync(store, payments, "audit");
        await store.CreateRuleAsync(kept.Id, "small", "{}");

        Assert.True(await store.DeleteEntityAsync("ORDERS"));

        Assert.Null(await store.GetEntityAsync("orders"));
        Assert.Null(await store.GetEntityAsync(audit.Name));
        Assert.Null(await store.GetEntityAsync(billing.Name));
        Assert.Empty(await store.ListChildEntitiesAsync(orders.Id));
        Assert.Empty(await store.ListRulesAsync(audit.Id));
        Assert.Empty(await store.ListRulesAsync(billing.Id));
        Assert.Empty(await store.ListRulesOfTopicAsync(orders.Id));
        Assert.Equal(new[] { payments.Id, kept.Id, queue.Id }.Order(), (await store.ListEntitiesAsync()).Select(e => e.Id).Order());
        Assert.Equal(["$Default", "small"], (await store.ListRulesAsync(kept.Id)).Select(r => r.Name));
        Assert.False(await store.DeleteEntityAsync("orders"));

        // The names are free again, under new ids, with no rules left over.
        var newOrders = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var newAudit = await CreateSubscriptionAsync(store, newOrders, "audit");
        Assert.NotEqual(audit.Id, newAudit.Id);
        Assert.Equal(["$Default"], (await store.ListRulesAsync(newAudit.Id)).Select(r => r.Name));
    }

    [StoreFact]
    public async Task DeleteEntity_Subscription_DeletesItsRules_AndKeepsTheTopicAndItsOtherSubscriptions()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var audit = await CreateSubscriptionAsync(store, topic, "audit");
        var billing = await CreateSubscriptionAsync(store, topic, "billing");

        Assert.True(await store.DeleteEntityAsync("orders/subscriptions/AUDIT"));

        Assert.Empty(await store.ListRulesAsync(audit.Id));
        Assert.Equal([billing], await store.ListChildEntitiesAsync(topic.Id));
        Assert.Equal([billing.Id], (await store.ListRulesOfTopicAsync(topic.Id)).Select(r => r.SubscriptionId));
        Assert.NotNull(await store.GetEntityAsync("orders"));
    }

    [StoreFact]
    public async Task CreateRule_ListsRulesInCreationOrder()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var subscription = await CreateSubscriptionAsync(store, topic, "audit");

        var zeta = await store.CreateRuleAsync(subscription.Id, "zeta", """{"correlationFilter":{"label":"z"}}""");
        var alpha = await store.CreateRuleAsync(subscription.Id, "Alpha", """{"sqlFilter":{"expression":"a = 1"}}""");
        var middle = await store.CreateRuleAsync(subscription.Id, "middle", "{}");

        var rules = await store.ListRulesAsync(subscription.Id);
        Assert.Equal(["$Default", "zeta", "Alpha", "middle"], rules.Select(r => r.Name));
        Assert.Equal([zeta, alpha, middle], rules.Skip(1));
        Assert.Equal(
            (subscription.Id, "Alpha", """{"sqlFilter":{"expression":"a = 1"}}"""),
            (alpha.SubscriptionId, alpha.Name, alpha.DefinitionJson));
        Assert.Equal(DateTimeKind.Utc, alpha.CreatedAt.Kind);
        Assert.True(alpha.CreatedAt >= zeta.CreatedAt && middle.CreatedAt >= alpha.CreatedAt);
        Assert.True(zeta.CreatedAt >= subscription.CreatedAt);
        Assert.Empty(await store.ListRulesAsync(404));
    }

    [StoreFact]
    public async Task CreateRule_WithNameTakenInAnotherCase_ThrowsRuleAlreadyExists_ButOtherSubscriptionsMayUseIt()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var audit = await CreateSubscriptionAsync(store, topic, "audit");
        var billing = await CreateSubscriptionAsync(store, topic, "billing");
        await store.CreateRuleAsync(audit.Id, "Big-Orders", "{}");

        var error = await Assert.ThrowsAsync<RuleAlreadyExistsException>(() => store.CreateRuleAsync(audit.Id, "big-ORDERS", """{"other":true}"""));
        await Assert.ThrowsAsync<RuleAlreadyExistsException>(() => store.CreateRuleAsync(audit.Id, "$DEFAULT", "{}"));
        var elsewhere = await store.CreateRuleAsync(billing.Id, "big-orders", "{}");

        Assert.Equal((audit.Name, "big-ORDERS"), (error.Subscription, error.Name));
        Assert.Contains(audit.Name, error.Message);
        Assert.Equal(["$Default", "Big-Orders"], (await store.ListRulesAsync(audit.Id)).Select(r => r.Name));
        Assert.Equal("{}", (await store.ListRulesAsync(audit.Id))[1].DefinitionJson);
        Assert.Equal(billing.Id, elsewhere.SubscriptionId);
    }

    [StoreFact]
    public async Task CreateRule_OnASubscriptionThatIsGone_ThrowsKeyNotFound()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var audit = await CreateSubscriptionAsync(store, topic, "audit");
        await store.DeleteEntityAsync(audit.Name);

        await Assert.ThrowsAsync<KeyNotFoundException>(() => store.CreateRuleAsync(audit.Id, "late", "{}"));
        await Assert.ThrowsAsync<KeyNotFoundException>(() => store.CreateRuleAsync(404, "nowhere", "{}"));

        Assert.Empty(await store.ListRulesAsync(audit.Id));
        Assert.Empty(await store.ListRulesOfTopicAsync(topic.Id));
    }

    [StoreFact]
    public async Task DeleteRule_ByNameIgnoringCase_RemovesItOnce()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var audit = await CreateSubscriptionAsync(store, topic, "audit");
        var billing = await CreateSubscriptionAsync(store, topic, "billing");
        await store.CreateRuleAsync(audit.Id, "Big", "{}");
        await store.CreateRuleAsync(billing.Id, "Big", "{}");

        Assert.True(await store.DeleteRuleAsync(audit.Id, "bIG"));
        Assert.False(await store.DeleteRuleAsync(audit.Id, "big"));
        Assert.False(await store.DeleteRuleAsync(404, "big"));

        Assert.Equal(["$Default"], (await store.ListRulesAsync(audit.Id)).Select(r => r.Name));
        Assert.Equal(["$Default", "Big"], (await store.ListRulesAsync(billing.Id)).Select(r => r.Name));

        // The name is free again, and the new rule comes last.
        Assert.True(await store.DeleteRuleAsync(audit.Id, "$default"));
        await store.CreateRuleAsync(audit.Id, "big", "{}");
        await store.CreateRuleAsync(audit.Id, "$Default", "{}");
        Assert.Equal(["big", "$Default"], (await store.ListRulesAsync(audit.Id)).Select(r => r.Name));
    }

    [StoreFact]
    public async Task UpdateRule_ReplacesTheDefinitionInPlace_KeepingItsPlaceAndName_AndOnlyThatSubscriptions()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var topic = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var audit = await CreateSubscriptionAsync(store, topic, "audit");
        var billing = await CreateSubscriptionAsync(store, topic, "billing");
        var created = await store.CreateRuleAsync(audit.Id, "Big", """{"v":1}""");
        await store.CreateRuleAsync(audit.Id, "Last", "{}");
        await store.CreateRuleAsync(billing.Id, "Big", """{"v":1}""");

        var updated = await store.UpdateRuleAsync(audit.Id, "bIG", """{"v":2}""");

        Assert.NotNull(updated);
        Assert.Equal((created.Id, "Big", """{"v":2}""", created.CreatedAt), (updated.Id, updated.Name, updated.DefinitionJson, updated.CreatedAt));
        Assert.Equal(["$Default", "Big", "Last"], (await store.ListRulesAsync(audit.Id)).Select(r => r.Name));
        Assert.Equal("""{"v":2}""", (await store.ListRulesAsync(audit.Id))[1].DefinitionJson);
        Assert.Equal("""{"v":1}""", (await store.ListRulesAsync(billing.Id))[1].DefinitionJson);
        Assert.Null(await store.UpdateRuleAsync(audit.Id, "missing", "{}"));
        Assert.Null(await store.UpdateRuleAsync(404, "Big", "{}"));
    }

    [StoreFact]
    public async Task ListRulesOfTopic_ReturnsEverySubscriptionsRulesInCreationOrder_AndNoOtherTopics()
    {
        var store = await OpenAsync();
        var container = await CreateContainerAsync(store);
        var orders = await store.CreateEntityAsync("orders", EntityKinds.Topic, container.Id, "{}");
        var payments = await store.CreateEntityAsync("payments", EntityKinds.Topic, container.Id, "{}");
        var empty = await store.CreateEntityAsync("empty", EntityKinds.Topic, container.Id, "{}");
        var queue = await store.CreateEntityAsync("queue", EntityKinds.Queue, container.Id, "{}");
        var billing = await CreateSubscriptionAsync(store, orders, "billing");
        var audit = await CreateSubscriptionAsync(store, orders, "audit");
        await CreateSubscriptionAsync(store, payments, "audit");
        var late = await store.CreateRuleAsync(billing.Id, "late", """{"late":1}""");

        var rules = await store.ListRulesOfTopicAsync(orders.Id);

        Assert.Equal(
            [(billing.Id, "$Default"), (audit.Id, "$Default"), (billing.Id, "late")],
            rules.Select(r => (r.SubscriptionId, r.Name)));
        Assert.Equal(late, rules[2]);
        Assert.Equal((await store.ListRulesAsync(audit.Id))[0], rules[1]);
        Assert.Single(await store.ListRulesOfTopicAsync(payments.Id));
        Assert.Empty(await store.ListRulesOfTopicAsync(empty.Id));
        Assert.Empty(await store.ListRulesOfTopicAsync(queue.Id));
        Assert.Empty(await store.ListRulesOfTopicAsync(404));
    }

    [StoreFact]
    public async Task Open_Version1FarmDatabase_UpgradesAndKeepsItsEntitiesAsTopLevel()
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var (containerId, queueId) = await CreateVersion1FarmAsync(_connectionString, "Legacy-Orders");

        var store = await OpenAsync();

        var queue = await store.GetEntityAsync("legacy-orders");
        Assert.NotNull(queue);
        Assert.Equal(
            (queueId, "Legacy-Orders", EntityKinds.Queue, containerId, (long?)null, """{"maxDeliveryCount":10}"""),
            (queue.Id, queue.Name, queue.Kind, queue.ContainerId, queue.ParentId, queue.PropertiesJson));
        Assert.Equal(1, (await store.GetContainerAsync(containerId))!.EntityCount);
        Assert.Empty(await store.ListChildEntitiesAsync(queueId));

        // The upgraded farm takes topics, subscriptions and rules, and reopening changes nothing.
        var topic = await store.CreateEntityAsync("events", EntityKinds.Topic, containerId, "{}");
        var subscription = await CreateSubscriptionAsync(store, topic, "all");
        await store.CreateRuleAsync(subscription.Id, "more", "{}");
        var reopened = await OpenAsync();
        Assert.Equal(queue, await reopened.GetEntityAsync("Legacy-Orders"));
        Assert.Equal(2, (await reopened.ListRulesOfTopicAsync(topic.Id)).Count);
        Assert.Equal(2, (await reopened.GetContainerAsync(containerId))!.EntityCount);
        Assert.True(await reopened.DeleteEntityAsync("events"));
        Assert.Empty(await reopened.ListRulesAsync(subscription.Id));
    }

    /// <summary>
    /// Makes the farm database at <paramref name="connectionString"/> as a build of schema version 1
    /// left it (only migration 0001 applied), holding one container and one queue named
    /// <paramref name="queueName"/> with properties {"maxDeliveryCount":10}. Returns their ids.
    /// </summary>
    protected abstract Task<(long ContainerId, long QueueId)> CreateVersion1FarmAsync(string connectionString, string queueName);

    /// <summary>
    /// Makes the farm database at <paramref name="connectionString"/> as a build of schema version 3
    /// left it (migrations 0001-0003), with node 1 heartbeating now and three containers: one node 1
    /// owns at epoch 3 with a lease of five minutes from now, one released at epoch 2 (no owner),
    /// and one never owned (epoch 0). Returns their ids.
    /// </summary>
    protected abstract Task<(long Owned, long Released, long New)> CreateVersion3FarmAsync(string connectionString);

    /// <summary>
    /// Makes the farm database at <paramref name="connectionString"/> as a build of schema version 5
    /// left it (migrations 0001-0005: no access policies, no AMQP addresses), with node 1 (pid 101 at
    /// http://node-1) heartbeating now and one container nobody owns. Returns the container's id.
    /// </summary>
    protected abstract Task<long> CreateVersion5FarmAsync(string connectionString);

    /// <summary>Opens the test's farm database (the same one every time within a test).</summary>
    protected async Task<IFarmStore> OpenAsync()
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var store = await Provider.OpenFarmStoreAsync(_connectionString);
        _opened.Add(store);
        return store;
    }

    /// <summary>A subscription "{topic}/Subscriptions/{name}" with the default rule, as the management API makes one.</summary>
    private static Task<EntityRecord> CreateSubscriptionAsync(IFarmStore store, EntityRecord topic, string name) =>
        store.CreateChildEntityAsync(topic.Id, $"{topic.Name}/Subscriptions/{name}", EntityKinds.Subscription, "{}", "$Default", """{"sqlFilter":{"expression":"1=1"}}""");

    private async Task<ContainerRecord> CreateContainerAsync(IFarmStore store)
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var farm = _connectionString;
        return await store.CreateContainerAsync(id => Provider.NewContainerConnectionString(farm, id));
    }
}
