using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// The embedded default: the farm database and every container database are SQLite files in WAL
/// mode, container files beside the farm file under containers/.
/// </summary>
public sealed class SqliteStoreProvider : IStoreProvider
{
    public string Name => "sqlite";

    public async Task<IFarmStore> OpenFarmStoreAsync(string connectionString, CancellationToken cancellationToken = default) =>
        await SqliteFarmStore.OpenAsync(connectionString, cancellationToken).ConfigureAwait(false);

    public async Task<IContainerDatabase> OpenContainerAsync(string connectionString, CancellationToken cancellationToken = default) =>
        await SqliteContainerDatabase.OpenAsync(connectionString, cancellationToken).ConfigureAwait(false);

    /// <summary>"containers/container-{id}.db" in the farm database's directory, other settings kept.</summary>
    public string NewContainerConnectionString(string farmConnectionString, long containerId)
    {
        var builder = SqliteDatabaseFile.Parse(farmConnectionString, "farm database");
        var directory = Path.GetDirectoryName(builder.DataSource) ?? "";
        builder.DataSource = Path.Combine(directory, "containers", $"container-{containerId}.db");
        return builder.ConnectionString;
    }

    public string NewContainerConnectionString(string farmConnectionString, long containerId, string serverConnectionString) =>
        throw NoServers();

    public Task CheckServerAsync(string serverConnectionString, CancellationToken cancellationToken = default) =>
        throw NoServers();

    private static StoreUnavailableException NoServers() =>
        new("A SQLite farm keeps every container in its data directory: database servers need a PostgreSQL farm (farm up --store postgres).");
}
