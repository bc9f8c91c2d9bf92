using Dapper;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Tests.Contracts;
using Npgsql;

namespace Farm.ContainerStore.Tests.Postgres;

[RequiresPostgres]
public sealed class PostgresFarmStoreTests : FarmStoreContract
{
    private readonly PostgresTestDatabases _databases = new();

    protected override IStoreProvider Provider { get; } = new PostgresStoreProvider();

    protected override Task<string> NewFarmConnectionStringAsync() => _databases.CreateFarmDatabaseAsync();

    /// <summary>Applies migration 0001 alone, the way a version-1 build's migrator did, and adds a container and a queue.</summary>
    protected override async Task<(long ContainerId, long QueueId)> CreateVersion1FarmAsync(string connectionString, string queueName)
    {
        var version1 = MigrationScript.Load(typeof(PostgresMigrator), PostgresMigrator.FarmSchema).Single(m => m.Version == 1);
        await using var connection = new NpgsqlConnection(new NpgsqlConnectionStringBuilder(connectionString) { Pooling = false }.ConnectionString);
        await connection.OpenAsync();
        await using var transaction = await connection.BeginTransactionAsync();
        await connection.ExecuteAsync(PostgresSql.Schema.CreateVersionTable, transaction: transaction);
        await connection.ExecuteAsync(version1.Sql, transaction: transaction);
        await connection.ExecuteAsync(PostgresSql.Schema.RecordVersion, new { version1.Version, version1.Name }, transaction);
        var containerId = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-x', 0) RETURNING id", transaction: transaction);
        var queueId = await connection.ExecuteScalarAsync<long>(
            """
            INSERT INTO entities (name, name_key, kind, container_id, properties_json, created_at, updated_at)
            VALUES (@Name, lower(@Name), 'queue', @ContainerId, '{"maxDeliveryCount":10}', now(), now())
            RETURNING id
            """,
            new { Name = queueName, ContainerId = containerId },
            transaction);
        await transaction.CommitAsync();
        return (containerId, queueId);
    }

    /// <summary>Applies migrations 0001-0003, the way a version-3 build's migrator did, and adds a node and three containers.</summary>
    protected override async Task<(long Owned, long Released, long New)> CreateVersion3FarmAsync(string connectionString)
    {
        await using var connection = new NpgsqlConnection(new NpgsqlConnectionStringBuilder(connectionString) { Pooling = false }.ConnectionString);
        await connection.OpenAsync();
        await using var transaction = await connection.BeginTransactionAsync();
        await connection.ExecuteAsync(PostgresSql.Schema.CreateVersionTable, transaction: transaction);
        foreach (var migration in MigrationScript.Load(typeof(PostgresMigrator), PostgresMigrator.FarmSchema).Where(m => m.Version <= 3))
        {
            await connection.ExecuteAsync(migration.Sql, transaction: transaction);
            await connection.ExecuteAsync(PostgresSql.Schema.RecordVersion, new { migration.Version, migration.Name }, transaction);
        }
        await connection.ExecuteAsync(
            "INSERT INTO nodes (id, address, state, process_id, heartbeat_at) VALUES (1, 'http://node-1', 'active', 101, now())", transaction: transaction);
        var owned = await connection.ExecuteScalarAsync<long>(
            """
            INSERT INTO containers (connection_string, owner_node, epoch, lease_expires_at, owned_since)
            VALUES ('container-owned', 1, 3, now() + interval '5 minutes', now()) RETURNING id
            """,
            transaction: transaction);
        var released = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-released', 2) RETURNING id", transaction: transaction);
        var fresh = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-new', 0) RETURNING id", transaction: transaction);
        await transaction.CommitAsync();
        return (owned, released, fresh);
    }

    /// <summary>Applies migrations 0001-0005, the way a version-5 build's migrator did, and adds a node and a container.</summary>
    protected override async Task<long> CreateVersion5FarmAsync(string connectionString)
    {
        await using var connection = new NpgsqlConnection(new NpgsqlConnectionStringBuilder(connectionString) { Pooling = false }.ConnectionString);
        await connection.OpenAsync();
        await using var transaction = await connection.BeginTransactionAsync();
        await connection.ExecuteAsync(PostgresSql.Schema.CreateVersionTable, transaction: transaction);
        foreach (var migration in MigrationScript.Load(typeof(PostgresMigrator), PostgresMigrator.FarmSchema).Where(m => m.Version <= 5))
        {
            await connection.ExecuteAsync(migration.Sql, transaction: transaction);
            await connection.ExecuteAsync(PostgresSql.Schema.RecordVersion, new { migration.Version, migration.Name }, transaction);
        }
        await connection.ExecuteAsync(
            "INSERT INTO nodes (id, address, metrics_address, state, process_id, heartbeat_at) VALUES (1, 'http://node-1', NULL, 'active', 101, now())", transaction: transaction);
        var containerId = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-x', 0) RETURNING id", transaction: transaction);
        await transaction.CommitAsync();
        return containerId;
    }

    public override async Task DisposeAsync()
    {
        await base.DisposeAsync();
        await _databases.DisposeAsync();
    }

    // --- node session locks (INodeSessionLock): how a PostgreSQL farm tells a crashed node at once ---

    [PostgresFact]
    public async Task ANodesSessionLock_IsHeldWhileItsSessionLives_AndFreeOnceTheSessionEnds()
    {
        var store = await OpenAsync();
        await using var node2 = await HeldLockAsync(store, 2);
        await using var node3 = await HeldLockAsync(store, 3);

        Assert.Equal(NodeLockHolder.ItsNode, (await node3.ProbeAsync(2)).Holder);
        // A second process of node 2 does not get the lock while the first one's session holds it.
        await using (var secondLife = store.CreateNodeSessionLock(2)!)
        {
            Assert.Null(await secondLife.EnsureHeldAsync(TimeProvider.System));
        }

        // The process dies: its connection closes, and the server ends the session and its locks
        // (the backend exits a moment after the socket closes: an observer sees it on a later probe).
        await node2.DisposeAsync();

        var hold = await Eventually.ValueAsync(async () => (await node3.ProbeAsync(2)).Hold, TimeSpan.FromSeconds(10), "node 2's lock free once its session ended");
        // While node 3 holds it (releasing node 2's containers), a new process of node 2 waits.
        await using var restarted = store.CreateNodeSessionLock(2)!;
        Assert.Null(await restarted.EnsureHeldAsync(TimeProvider.System));
        await hold.DisposeAsync();
        Assert.NotNull(await restarted.EnsureHeldAsync(TimeProvider.System));
        Assert.Equal(NodeLockHolder.ItsNode, (await node3.ProbeAsync(2)).Holder);
    }

    [PostgresFact]
    public async Task ASessionTheServerEnded_IsReplaced_AndTheLockTakenAgainOnTheNextCheck()
    {
        var store = await OpenAsync();
        await using var node2 = store.CreateNodeSessionLock(2)!;
        await using var node3 = store.CreateNodeSessionLock(3)!;
        var first = await node2.EnsureHeldAsync(TimeProvider.System);
        Assert.NotNull(first);
        Assert.NotNull(await node3.EnsureHeldAsync(TimeProvider.System));

        // The server ends node 2's lock session (a restart, an administrator, a broken connection).
        var ended = await PostgresTestServer.TerminateSessionsHoldingAdvisoryLockAsync(_databases.FarmDatabase, PostgresSql.NodeLocks.Space, 2);
        Assert.Equal(1, ended);
        await Farm.Testing.Eventually.UntilAsync(async () => await ProbeAsync(node3, 2), TimeSpan.FromSeconds(10), "node 2's lock free once its session ended");

        var again = await node2.EnsureHeldAsync(TimeProvider.System);
        Assert.NotNull(again);
        Assert.True(again > first, $"held since {again}, first {first}: a new session");
        Assert.False(await ProbeAsync(node3, 2));
    }

    [PostgresFact]
    public async Task OnlyASessionHoldingItsOwnLock_ProbesOthers()
    {
        var store = await OpenAsync();
        await using var holder = store.CreateNodeSessionLock(2)!;
        await holder.EnsureHeldAsync(TimeProvider.System);
        await using var blocked = store.CreateNodeSessionLock(2)!;
        Assert.Null(await blocked.EnsureHeldAsync(TimeProvider.System));

        // Node 5 has no session at all, but a probe from a session that does not hold its own lock says nothing.
        Assert.Equal(NodeLockProbe.Unknown, await blocked.ProbeAsync(5));
        await using var fresh = store.CreateNodeSessionLock(3)!;
        Assert.Equal(NodeLockProbe.Unknown, await fresh.ProbeAsync(5));
    }

    [PostgresFact]
    public async Task AProbe_TellsTheNodesOwnSession_FromAnotherNodesProbeHoldingItsLock()
    {
        // After a server restart every session is new: node 2 probes node 4, which has not taken
        // its lock again yet, and holds it for a moment.
        var store = await OpenAsync();
        await using var node2 = await HeldLockAsync(store, 2);
        await using var node3 = await HeldLockAsync(store, 3);
        var probeOfNode4 = await node2.ProbeAsync(4);
        Assert.Equal(NodeLockHolder.Nobody, probeOfNode4.Holder);

        // Node 3 sees node 4's lock held, but not by node 4: that says nothing of node 4.
        Assert.Equal(new NodeLockProbe(NodeLockHolder.AnotherSession), await node3.ProbeAsync(4));

        await probeOfNode4.Hold!.DisposeAsync();
        await using var node4 = await HeldLockAsync(store, 4);
        Assert.Equal(new NodeLockProbe(NodeLockHolder.ItsNode), await node3.ProbeAsync(4));
    }

    [PostgresFact]
    public async Task ListHeld_NamesTheNodesWhoseSessionHoldsTheirLock_AndTakesNothing()
    {
        var store = await OpenAsync();
        await using var node2 = store.CreateNodeSessionLock(2)!;
        await using var node3 = store.CreateNodeSessionLock(3)!;
        Assert.Equal([], (await node3.ListHeldAsync())!);
        await node2.EnsureHeldAsync(TimeProvider.System);
        await node3.EnsureHeldAsync(TimeProvider.System);
        // Another user's advisory lock with the same second key, in another key space, is not a node's.
        await using var other = new NpgsqlConnection(_databases.FarmConnectionString);
        await other.OpenAsync();
        await using (var foreign = new NpgsqlCommand("SELECT pg_advisory_lock(7, 4)", other))
        {
            await foreign.ExecuteScalarAsync();
        }

        Assert.Equal([2L, 3L], (await node3.ListHeldAsync())!.Order());
        // Reading took nothing: node 2's lock is still its own, and a probe still finds node 4 free.
        Assert.Equal(NodeLockHolder.ItsNode, (await node3.ProbeAsync(2)).Holder);
        Assert.True(await ProbeAsync(node3, 4));

        await node2.DisposeAsync();
        await Farm.Testing.Eventually.UntilAsync(async () => (await node3.ListHeldAsync())!.SetEquals([3L]), TimeSpan.FromSeconds(10), "only node 3's lock held once node 2's session ended");
    }

    /// <summary>Node <paramref name="nodeId"/>'s session lock, held (asserted).</summary>
    private static async Task<INodeSessionLock> HeldLockAsync(IFarmStore store, long nodeId)
    {
        var nodeLock = store.CreateNodeSessionLock(nodeId)!;
        if (await nodeLock.EnsureHeldAsync(TimeProvider.System) is null)
        {
            await nodeLock.DisposeAsync();
            Assert.Fail($"node {nodeId}'s session lock was not taken");
        }
        return nodeLock;
    }

    /// <summary>Whether <paramref name="probe"/> finds <paramref name="nodeId"/>'s lock free (letting it go again at once).</summary>
    private static async Task<bool> ProbeAsync(INodeSessionLock probe, long nodeId)
    {
        var found = await probe.ProbeAsync(nodeId);
        if (found.Hold is null)
        {
            return false;
        }
        await found.Hold.DisposeAsync();
        return true;
    }
}

[RequiresPostgres]
public sealed class PostgresContainerDatabaseTests : ContainerDatabaseContract
{
    private readonly PostgresTestDatabases _databases = new();

    protected override IStoreProvider Provider { get; } = new PostgresStoreProvider();

    /// <summary>The provider creates the container's database on first open.</summary>
    protected override Task<string> NewContainerConnectionStringAsync() =>
        Task.FromResult(Provider.NewContainerConnectionString(_databases.FarmConnectionString, 1));

    public override async Task DisposeAsync()
    {
        await base.DisposeAsync();
        await _databases.DisposeAsync();
    }
}

[RequiresPostgres]
public sealed class PostgresFollowerTests : FollowerStoreContract
{
    private readonly PostgresTestDatabases _databases = new();

    protected override IStoreProvider Provider { get; } = new PostgresStoreProvider();

    /// <summary>The provider creates the container's database on first open.</summary>
    protected override Task<string> NewContainerConnectionStringAsync() =>
        Task.FromResult(Provider.NewContainerConnectionString(_databases.FarmConnectionString, 1));

    public override async Task DisposeAsync()
    {
        await base.DisposeAsync();
        await _databases.DisposeAsync();
    }
}
