using Dapper;
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

    public override async Task DisposeAsync()
    {
        await base.DisposeAsync();
        await _databases.DisposeAsync();
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
