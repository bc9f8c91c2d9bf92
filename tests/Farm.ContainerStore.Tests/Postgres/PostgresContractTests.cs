using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Tests.Contracts;

namespace Farm.ContainerStore.Tests.Postgres;

[RequiresPostgres]
public sealed class PostgresFarmStoreTests : FarmStoreContract
{
    private readonly PostgresTestDatabases _databases = new();

    protected override IStoreProvider Provider { get; } = new PostgresStoreProvider();

    protected override Task<string> NewFarmConnectionStringAsync() => _databases.CreateFarmDatabaseAsync();

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
