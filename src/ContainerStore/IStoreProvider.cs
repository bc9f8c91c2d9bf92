using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;

namespace Farm.ContainerStore;

/// <summary>
/// One SQL dialect: opens the farm database and container databases. SQLite is the embedded
/// default; PostgreSQL and SQL Server implement the same interfaces and pass the same contract tests.
/// </summary>
public interface IStoreProvider
{
    /// <summary>"sqlite", "postgres", ...</summary>
    string Name { get; }

    /// <summary>Opens (and migrates) the farm database.</summary>
    Task<IFarmStore> OpenFarmStoreAsync(string connectionString, CancellationToken cancellationToken = default);

    /// <summary>Opens (creating and migrating if needed) a container database.</summary>
    Task<IContainerDatabase> OpenContainerAsync(string connectionString, CancellationToken cancellationToken = default);

    /// <summary>The connection string of a new container database, derived from the farm's.</summary>
    string NewContainerConnectionString(string farmConnectionString, long containerId);

    /// <summary>
    /// The connection string of a new container database on another database server (the farm's
    /// naming, that server's host and login). Throws <see cref="StoreUnavailableException"/> where the
    /// store has no servers (SQLite) or the server's connection string is not valid.
    /// </summary>
    string NewContainerConnectionString(string farmConnectionString, long containerId, string serverConnectionString);

    /// <summary>Checks a database server can be reached with its connection string; throws <see cref="StoreUnavailableException"/> saying why not.</summary>
    Task CheckServerAsync(string serverConnectionString, CancellationToken cancellationToken = default);

    /// <summary>
    /// A container served elsewhere, which this process may have to take at short notice (its
    /// owner dies): a store whose open is slow gets ready for it in the background (PostgreSQL: one
    /// connection kept open). Never throws, never waits; by default does nothing.
    /// </summary>
    void PrepareContainer(string connectionString)
    {
    }
}

/// <summary>The store could not be opened or reached; nothing was written. Message names the cause.</summary>
public sealed class StoreUnavailableException(string message, Exception? inner = null) : Exception(message, inner);
