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

    /// <summary>Database "{farm database}_container_{id}" on the server the other connection string names, with its login.</summary>
    public string NewContainerConnectionString(string farmConnectionString, long containerId, string serverConnectionString)
    {
        // Named (and length-checked) as on the farm's own server.
        var name = PostgresDatabase.Parse(NewContainerConnectionString(farmConnectionString, containerId), "container database").Database;
        var server = PostgresDatabase.Parse(serverConnectionString, "database server");
        server.Database = name;
        return server.ConnectionString;
    }

    /// <summary>Logs in to the server's maintenance database: the server is there and the login works.</summary>
    public async Task CheckServerAsync(string serverConnectionString, CancellationToken cancellationToken = default)
    {
        var settings = PostgresDatabase.Parse(serverConnectionString, "database server");
        settings.Database = "postgres";
        settings.Pooling = false;
        settings.Timeout = Math.Min(settings.Timeout, 10);
        try
        {
            await using var connection = new Npgsql.NpgsqlConnection(settings.ConnectionString);
            await connection.OpenAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (Npgsql.NpgsqlException e)
        {
            throw new StoreUnavailableException($"Cannot reach the PostgreSQL server {settings.Host}:{settings.Port} as '{settings.Username}': {e.Message.TrimEnd('.')}.", e);
        }
    }

    /// <summary>Opens one connection to the container's database in the background and keeps it for a take (PostgresStandby).</summary>
    public void PrepareContainer(string connectionString) => PostgresStandby.Prepare(connectionString);

    /// <summary>
    /// The process stops: closes the container databases kept since this process last served them
    /// (see PostgresStandby), and keeps none it releases from now on.
    /// </summary>
    public static void StopKeepingReleasedDatabases() => PostgresStandby.Stop();

    internal static string ContainerDatabaseName(string farmDatabase, long containerId) => $"{farmDatabase}_container_{containerId}";
}
