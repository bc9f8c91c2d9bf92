using Dapper;
using Farm.ContainerStore.Sqlite;
using Farm.ContainerStore.Tests.Contracts;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Tests.Sqlite;

public sealed class SqliteFarmStoreTests : FarmStoreContract
{
    private readonly SqliteTestDirectory _directory = new();

    protected override IStoreProvider Provider { get; } = new SqliteStoreProvider();

    protected override Task<string> NewFarmConnectionStringAsync() => Task.FromResult(_directory.ConnectionString("farm.db"));

    /// <summary>Applies migration 0001 alone, the way a version-1 build's migrator did, and adds a container and a queue.</summary>
    protected override async Task<(long ContainerId, long QueueId)> CreateVersion1FarmAsync(string connectionString, string queueName)
    {
        var version1 = MigrationScript.Load(typeof(SqliteMigrator), SqliteMigrator.FarmSchema).Single(m => m.Version == 1);
        await using var connection = new SqliteConnection(connectionString);
        await connection.OpenAsync();
        using var transaction = connection.BeginTransaction();
        await connection.ExecuteAsync(SqliteSql.Schema.CreateVersionTable, transaction: transaction);
        await connection.ExecuteAsync(version1.Sql, transaction: transaction);
        await connection.ExecuteAsync(SqliteSql.Schema.RecordVersion, new { version1.Version, version1.Name }, transaction);
        var containerId = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-x', 0) RETURNING id", transaction: transaction);
        var queueId = await connection.ExecuteScalarAsync<long>(
            """
            INSERT INTO entities (name, name_key, kind, container_id, properties_json, created_at, updated_at)
            VALUES (@Name, lower(@Name), 'queue', @ContainerId, '{"maxDeliveryCount":10}', 1700000000000, 1700000000000)
            RETURNING id
            """,
            new { Name = queueName, ContainerId = containerId },
            transaction);
        transaction.Commit();
        return (containerId, queueId);
    }

    /// <summary>Applies migrations 0001-0003, the way a version-3 build's migrator did, and adds a node and three containers.</summary>
    protected override async Task<(long Owned, long Released, long New)> CreateVersion3FarmAsync(string connectionString)
    {
        await using var connection = new SqliteConnection(connectionString);
        await connection.OpenAsync();
        using var transaction = connection.BeginTransaction();
        await connection.ExecuteAsync(SqliteSql.Schema.CreateVersionTable, transaction: transaction);
        foreach (var migration in MigrationScript.Load(typeof(SqliteMigrator), SqliteMigrator.FarmSchema).Where(m => m.Version <= 3))
        {
            await connection.ExecuteAsync(migration.Sql, transaction: transaction);
            await connection.ExecuteAsync(SqliteSql.Schema.RecordVersion, new { migration.Version, migration.Name }, transaction);
        }
        var now = new { Now = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() };
        await connection.ExecuteAsync(
            "INSERT INTO nodes (id, address, state, process_id, heartbeat_at) VALUES (1, 'http://node-1', 'active', 101, @Now)", now, transaction);
        var owned = await connection.ExecuteScalarAsync<long>(
            """
            INSERT INTO containers (connection_string, owner_node, epoch, lease_expires_at, owned_since)
            VALUES ('container-owned', 1, 3, @Now + 300000, @Now) RETURNING id
            """,
            now,
            transaction);
        var released = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-released', 2) RETURNING id", transaction: transaction);
        var fresh = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-new', 0) RETURNING id", transaction: transaction);
        transaction.Commit();
        return (owned, released, fresh);
    }

    /// <summary>Applies migrations 0001-0005, the way a version-5 build's migrator did, and adds a node and a container.</summary>
    protected override async Task<long> CreateVersion5FarmAsync(string connectionString)
    {
        await using var connection = new SqliteConnection(connectionString);
        await connection.OpenAsync();
        using var transaction = connection.BeginTransaction();
        await connection.ExecuteAsync(SqliteSql.Schema.CreateVersionTable, transaction: transaction);
        foreach (var migration in MigrationScript.Load(typeof(SqliteMigrator), SqliteMigrator.FarmSchema).Where(m => m.Version <= 5))
        {
            await connection.ExecuteAsync(migration.Sql, transaction: transaction);
            await connection.ExecuteAsync(SqliteSql.Schema.RecordVersion, new { migration.Version, migration.Name }, transaction);
        }
        await connection.ExecuteAsync(
            "INSERT INTO nodes (id, address, metrics_address, state, process_id, heartbeat_at) VALUES (1, 'http://node-1', NULL, 'active', 101, @Now)", new { Now = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() }, transaction);
        var containerId = await connection.ExecuteScalarAsync<long>(
            "INSERT INTO containers (connection_string, epoch) VALUES ('container-x', 0) RETURNING id", transaction: transaction);
        transaction.Commit();
        return containerId;
    }

    public override async Task DisposeAsync()
    {
        await base.DisposeAsync();
        _directory.Dispose();
    }
}

public sealed class SqliteContainerDatabaseTests : ContainerDatabaseContract
{
    private readonly SqliteTestDirectory _directory = new();

    protected override IStoreProvider Provider { get; } = new SqliteStoreProvider();

    protected override Task<string> NewContainerConnectionStringAsync() =>
        Task.FromResult(Provider.NewContainerConnectionString(_directory.ConnectionString("farm.db"), 1));

    public override async Task DisposeAsync()
    {
        await base.DisposeAsync();
        _directory.Dispose();
    }
}

public sealed class SqliteFollowerTests : FollowerStoreContract
{
    private readonly SqliteTestDirectory _directory = new();

    protected override IStoreProvider Provider { get; } = new SqliteStoreProvider();

    protected override Task<string> NewContainerConnectionStringAsync() =>
        Task.FromResult(Provider.NewContainerConnectionString(_directory.ConnectionString("farm.db"), 1));

    public override async Task DisposeAsync()
    {
        await base.DisposeAsync();
        _directory.Dispose();
    }
}
