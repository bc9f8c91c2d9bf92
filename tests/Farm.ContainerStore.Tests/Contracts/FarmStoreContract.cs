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
        await store.HeartbeatAsync(1);

        var nodes = await store.ListNodesAsync();
        Assert.Equal([NodeStates.Active, NodeStates.Draining], nodes.Select(n => n.State));
        Assert.True(nodes[0].HeartbeatAt >= registered.HeartbeatAt);
    }

    [StoreFact]
    public async Task Heartbeat_OfUnknownNode_Throws()
    {
        var store = await OpenAsync();

        await Assert.ThrowsAnyAsync<InvalidOperationException>(() => store.HeartbeatAsync(99));
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

    /// <summary>Opens the test's farm database (the same one every time within a test).</summary>
    protected async Task<IFarmStore> OpenAsync()
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var store = await Provider.OpenFarmStoreAsync(_connectionString);
        _opened.Add(store);
        return store;
    }

    private async Task<ContainerRecord> CreateContainerAsync(IFarmStore store)
    {
        _connectionString ??= await NewFarmConnectionStringAsync();
        var farm = _connectionString;
        return await store.CreateContainerAsync(id => Provider.NewContainerConnectionString(farm, id));
    }
}
