using Farm.ContainerStore.Sqlite;
using Farm.ContainerStore.Tests.Contracts;

namespace Farm.ContainerStore.Tests.Sqlite;

public sealed class SqliteFarmStoreTests : FarmStoreContract
{
    private readonly SqliteTestDirectory _directory = new();

    protected override IStoreProvider Provider { get; } = new SqliteStoreProvider();

    protected override Task<string> NewFarmConnectionStringAsync() => Task.FromResult(_directory.ConnectionString("farm.db"));

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
