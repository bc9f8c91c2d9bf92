using System.Text;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// PostgreSQL, for farms whose nodes run on different hosts: the farm database is one database on
/// the server (it must exist), and each container gets a database of its own beside it, named
/// after the farm's and created on first open. Connection strings are Npgsql's.
/// </summary>
public sealed class PostgresStoreProvider : IStoreProvider
{
    /// <summary>PostgreSQL cuts longer identifiers short, which could make two containers share a database.</summary>
    private const int MaxDatabaseNameBytes = 63;

    public string Name => "postgres";

    public async Task<IFarmStore> OpenFarmStoreAsync(string connectionString, CancellationToken cancellationToken = default) =>
        await PostgresFarmStore.OpenAsync(connectionString, cancellationToken).ConfigureAwait(false);

    public async Task<IContainerDatabase> OpenContainerAsync(string connectionString, CancellationToken cancellationToken = default) =>
        await PostgresContainerDatabase.OpenAsync(connectionString, cancellationToken).ConfigureAwait(false);

    /// <summary>The farm's connection string with Database = "{farm database}_container_{id}", other settings kept.</summary>
    public string NewContainerConnectionString(string farmConnectionString, long containerId)
    {
        var settings = PostgresDatabase.Parse(farmConnectionString, "farm database");

        // Npgsql connects to the database named like the user when none is given.
        var farmDatabase = settings.Database ?? settings.Username
            ?? throw new StoreUnavailableException("The farm database connection string names neither a Database nor a Username.");
        var name = ContainerDatabaseName(farmDatabase, containerId);
        if (Encoding.UTF8.GetByteCount(name) > MaxDatabaseNameBytes)
        {
            throw new StoreUnavailableException(
                $"The container database name '{name}' is longer than PostgreSQL's {MaxDatabaseNameBytes} bytes; give the farm database a shorter name.");
        }

        settings.Database = name;
        return settings.ConnectionString;
    }

    internal static string ContainerDatabaseName(string farmDatabase, long containerId) => $"{farmDatabase}_container_{containerId}";
}
