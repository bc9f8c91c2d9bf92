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
}

/// <summary>The store could not be opened or reached; nothing was written. Message names the cause.</summary>
public sealed class StoreUnavailableException(string message, Exception? inner = null) : Exception(message, inner);
