using System.Data.Common;
using Npgsql;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// One PostgreSQL database: parses its connection string, hands out pooled connections from an
/// <see cref="NpgsqlDataSource"/>, creates the database when asked to, and turns "cannot reach it"
/// failures into <see cref="StoreUnavailableException"/> naming the host and the database.
/// </summary>
internal sealed class PostgresDatabase : IAsyncDisposable
{
    /// <summary>The database that is always there to connect to while creating another one.</summary>
    private const string MaintenanceDatabase = "postgres";

    private readonly NpgsqlDataSource _dataSource;
    private readonly NpgsqlConnectionStringBuilder _settings;
    private readonly string _description;

    private PostgresDatabase(NpgsqlConnectionStringBuilder settings, string description)
    {
        _settings = settings;
        _description = description;
        Name = settings.Database ?? settings.Username ?? "";
        Server = $"{settings.Host}:{settings.Port}";
        var builder = new NpgsqlDataSourceBuilder(settings.ConnectionString);
        // Farm's SQL uses built-in types only (bigint, integer, boolean, text, bytea, their arrays),
        // which Npgsql knows without asking. Loading the server's type catalog is a large query on
        // each new pool's first connection, and a container's take opens a new pool: on the 2-core
        // reference machine it was about 40% of a first open (perf/README.md, "Session 63").
        builder.ConfigureTypeLoading(types => types.EnableTypeLoading(false));
        _dataSource = builder.Build();
    }

    /// <summary>The database's name.</summary>
    public string Name { get; }

    /// <summary>The most connections its pool opens.</summary>
    internal int MaxPoolSize => _settings.MaxPoolSize;

    /// <summary>host:port, for messages.</summary>
    public string Server { get; }

    /// <summary>
    /// Parses the connection string. Throws <see cref="StoreUnavailableException"/> for one that is
    /// not a valid Npgsql connection string or names no host.
    /// </summary>
    public static PostgresDatabase Resolve(string connectionString, string description)
    {
        var settings = Parse(connectionString, description);
        settings.ApplicationName ??= "farm";

        // An acknowledged write must be durable whatever the server's or the database's default is,
        // and a transaction stranded by a frozen or cut-off node must not hold its locks for hours.
        var options = $"{PostgresSql.DurableSessionOptions} {PostgresSql.StrandedTransactionSessionOptions}";
        settings.Options = string.IsNullOrWhiteSpace(settings.Options) ? options : $"{settings.Options} {options}";

        // A burst (every send repeated after a failover, thousands of links reopening) must queue on
        // the pool, not open a connection each: Npgsql's default of 100 a pool let three nodes open
        // some 300 server processes in one failover, forking and authenticating on the same cores,
        // until the server refused more ("too many clients"). One writer and a few reads at a time
        // is what a container needs; more costs the server a process each.
        if (!NamesMaxPoolSize(connectionString))
        {
            settings.MaxPoolSize = DefaultMaxPoolSize;
        }

        // Group commits repeat the same few statements; prepared once per connection they skip parsing and planning.
        if (settings.MaxAutoPrepare == 0)
        {
            settings.MaxAutoPrepare = 32;
        }

        return new PostgresDatabase(settings, description);
    }

    /// <summary>
    /// Connections a pool opens at most unless the connection string says (<c>Maximum Pool Size</c>):
    /// per node, per database it uses. Three nodes with six containers stay within a default
    /// server's 100 connections (3 x 8 for the farm database, 6 x 8 for the containers, a lock
    /// session and a renewal connection or two each, and one kept for each of the four containers
    /// a node does not serve: <see cref="PostgresStandby"/>).
    /// </summary>
    public const int DefaultMaxPoolSize = 8;

    /// <summary>Whether the connection string sets the pool's size itself (under any of Npgsql's names for it).</summary>
    private static bool NamesMaxPoolSize(string connectionString)
    {
        var given = new DbConnectionStringBuilder { ConnectionString = connectionString };
        return given.Keys.Cast<string>()
            .Select(key => key.Replace(" ", "", StringComparison.Ordinal))
            .Any(key => key.Equals("MaximumPoolSize", StringComparison.OrdinalIgnoreCase) || key.Equals("MaxPoolSize", StringComparison.OrdinalIgnoreCase));
    }

    public static NpgsqlConnectionStringBuilder Parse(string connectionString, string description)
    {
        ArgumentNullException.ThrowIfNull(connectionString);
        NpgsqlConnectionStringBuilder settings;
        try
        {
            settings = new NpgsqlConnectionStringBuilder(connectionString);
        }
        catch (Exception e) when (e is ArgumentException or FormatException or KeyNotFoundException or InvalidOperationException)
        {
            throw new StoreUnavailableException(
                $"The {description} connection string is not a valid PostgreSQL (Npgsql) connection string: {e.Message}", e);
        }

        if (string.IsNullOrWhiteSpace(settings.Host))
        {
            throw new StoreUnavailableException(
                $"The {description} connection string names no server; PostgreSQL needs 'Host=...;Database=...;Username=...'.");
        }

        return settings;
    }

    /// <summary>A pooled connection, opened. Fails with <see cref="StoreUnavailableException"/> when the server or database cannot be reached.</summary>
    public async Task<NpgsqlConnection> OpenConnectionAsync(CancellationToken cancellationToken)
    {
        try
        {
            return await _dataSource.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (NpgsqlException e) when (IsUnavailable(e))
        {
            throw Unavailable("open", e);
        }
    }

    /// <summary>The blocking form of <see cref="OpenConnectionAsync"/>, for a thread that must not wait on the thread pool.</summary>
    public NpgsqlConnection OpenConnection()
    {
        try
        {
            return _dataSource.OpenConnection();
        }
        catch (NpgsqlException e) when (IsUnavailable(e))
        {
            throw Unavailable("open", e);
        }
    }

    /// <summary>
    /// Opens a connection, creating the database first if it does not exist yet. Several nodes may
    /// race to create it: whoever loses finds it there, which is just as good.
    /// </summary>
    public async Task<NpgsqlConnection> OpenOrCreateAsync(CancellationToken cancellationToken)
    {
        try
        {
            return await _dataSource.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.InvalidCatalogName)
        {
            await CreateAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (NpgsqlException e) when (IsUnavailable(e))
        {
            throw Unavailable("open", e);
        }

        return await OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// A connection of its own, outside the pool, for a session that must end when this process
    /// lets go of it (or dies), never live on in a pool: closed, its session is gone.
    /// </summary>
    public NpgsqlConnection CreateUnpooledConnection(string applicationName) =>
        new(new NpgsqlConnectionStringBuilder(_settings.ConnectionString) { Pooling = false, ApplicationName = applicationName }.ConnectionString);

    /// <summary>Closes the pool's idle connections now (busy ones close when they come back).</summary>
    public void ClearIdleConnections() => _dataSource.Clear();

    public ValueTask DisposeAsync() => _dataSource.DisposeAsync();

    /// <summary>
    /// The error to throw when an operation failed: <see cref="StoreUnavailableException"/> when the
    /// database could not be reached or used, otherwise an <see cref="InvalidOperationException"/>
    /// saying what it refused. Either way no raw Npgsql exception leaves the store.
    /// </summary>
    public Exception Failure(string action, NpgsqlException e) => IsUnavailable(e)
        ? Unavailable($"{action} in", e)
        : new InvalidOperationException($"The PostgreSQL {_description} '{Name}' on {Server} refused to {action}: {Describe(e)}.", e);

    /// <summary>"Cannot {action} the PostgreSQL farm database 'x' on host:port: why."</summary>
    public StoreUnavailableException Unavailable(string action, NpgsqlException e)
    {
        var hint = e is PostgresException { SqlState: PostgresErrorCodes.InvalidCatalogName }
            ? " Create it first, or check the Database in the connection string."
            : "";
        return new StoreUnavailableException($"Cannot {action} the PostgreSQL {_description} '{Name}' on {Server}: {Describe(e)}.{hint}", e);
    }

    /// <summary>SQLSTATE 25P03, which Npgsql's PostgresErrorCodes does not name.</summary>
    private const string IdleInTransactionSessionTimeout = "25P03";

    /// <summary>
    /// Errors that mean the server or the database cannot be reached or used now (no connection,
    /// refused login, missing database, shutting down, out of space), as opposed to errors in what
    /// was asked (constraints, bad SQL). Errors without a SQLSTATE are I/O failures and timeouts.
    /// </summary>
    public static bool IsUnavailable(NpgsqlException e)
    {
        if (e is not PostgresException postgres)
        {
            return true;
        }

        var state = postgres.SqlState;
        return state.StartsWith("08", StringComparison.Ordinal) // connection exception
            || state.StartsWith("28", StringComparison.Ordinal) // invalid authorization (bad password, unknown role)
            || state.StartsWith("53", StringComparison.Ordinal) // insufficient resources (disk full, too many connections)
            || state.StartsWith("57", StringComparison.Ordinal) // operator intervention (shutdown, cannot connect now)
            || state.StartsWith("58", StringComparison.Ordinal) // system error (I/O)
            || state is PostgresErrorCodes.InvalidCatalogName // database does not exist
                or PostgresErrorCodes.LockNotAvailable // held by another session for now (lock_timeout)
                or PostgresErrorCodes.ReadOnlySqlTransaction // a standby, or a read-only server
                or IdleInTransactionSessionTimeout // the server ended a transaction we left waiting
                or PostgresErrorCodes.DataCorrupted
                or PostgresErrorCodes.IndexCorrupted;
    }

    private async Task CreateAsync(CancellationToken cancellationToken)
    {
        // A one-off connection: no pool to the maintenance database is left behind.
        var maintenance = new NpgsqlConnectionStringBuilder(_settings.ConnectionString)
        {
            Database = MaintenanceDatabase,
            Pooling = false,
        };
        try
        {
            await using var connection = new NpgsqlConnection(maintenance.ConnectionString);
            await connection.OpenAsync(cancellationToken).ConfigureAwait(false);
            await using var command = new NpgsqlCommand(PostgresSql.Server.CreateDatabase(Name), connection);
            await command.ExecuteNonQueryAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (PostgresException e) when (e.SqlState is PostgresErrorCodes.DuplicateDatabase or PostgresErrorCodes.UniqueViolation)
        {
            // Another node created it first (a simultaneous CREATE can also trip the catalog's unique index).
        }
        catch (NpgsqlException e)
        {
            throw new StoreUnavailableException(
                $"Cannot create the PostgreSQL {_description} '{Name}' on {Server} (through the '{MaintenanceDatabase}' database): {Describe(e)}.", e);
        }
    }

    private static string Describe(NpgsqlException e) => e switch
    {
        PostgresException postgres => $"{postgres.MessageText} (SQLSTATE {postgres.SqlState})",
        { InnerException: { } inner } => $"{e.Message.TrimEnd('.')}: {inner.Message.TrimEnd('.')}",
        _ => e.Message.TrimEnd('.'),
    };
}
