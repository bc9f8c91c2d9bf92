using System.Data.Common;
using Dapper;
using Farm.ContainerStore.FarmDatabase;
using Npgsql;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// The farm database on a PostgreSQL server, shared by nodes on different hosts. Each call takes a
/// pooled connection of its own; lease and heartbeat times come from the server's clock, so the
/// nodes' clocks never need to agree. The operations are <see cref="FarmStore"/>'s; this says how
/// PostgreSQL runs them.
/// </summary>
internal sealed class PostgresFarmStore : FarmStore
{
    private readonly PostgresDatabase _database;

    /// <summary>
    /// The lease renewals' and heartbeats' own pool (their one thread's blocking calls, <see cref="Run"/>):
    /// they never wait for a connection behind a burst of other farm-database work on the bounded
    /// shared pool, which would let a busy node's leases run out.
    /// </summary>
    private readonly PostgresDatabase _renewals;
    private int _disposed;

    private PostgresFarmStore(PostgresDatabase database, PostgresDatabase renewals) : base(PostgresSql.Farm)
    {
        _database = database;
        _renewals = renewals;
    }

    /// <summary>
    /// The farm database must exist already: it is named by the operator, and a typo in its name
    /// must not quietly start a second, empty farm.
    /// </summary>
    public static async Task<PostgresFarmStore> OpenAsync(string connectionString, CancellationToken cancellationToken)
    {
        var database = PostgresDatabase.Resolve(connectionString, "farm database");
        try
        {
            await using (var connection = await database.OpenConnectionAsync(cancellationToken).ConfigureAwait(false))
            {
                await PostgresMigrator.MigrateAsync(database, connection, PostgresMigrator.FarmSchema, cancellationToken).ConfigureAwait(false);
            }

            var store = new PostgresFarmStore(database, PostgresDatabase.Resolve(connectionString, "farm database"));
            await store.EnsureManageAccessPolicyAsync(cancellationToken).ConfigureAwait(false);
            return store;
        }
        catch
        {
            await database.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>One conditional UPDATE ... RETURNING decides and reads back.</summary>
    protected override Task<ContainerRow?> TakeContainerAsync(DbConnection connection, DbTransaction transaction, object parameters, CancellationToken cancellationToken) =>
        connection.QuerySingleOrDefaultAsync<ContainerRow>(Command(Sql.TryAcquireContainer, parameters, transaction, cancellationToken));

    public override INodeSessionLock CreateNodeSessionLock(long nodeId) => new PostgresNodeSessionLock(_database, nodeId);

    public override async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 0)
        {
            await _database.DisposeAsync().ConfigureAwait(false);
            await _renewals.DisposeAsync().ConfigureAwait(false);
        }
    }

    protected override async ValueTask<DbTransaction> BeginWriteAsync(DbConnection connection, CancellationToken cancellationToken) =>
        await ((NpgsqlConnection)connection).BeginTransactionAsync(cancellationToken).ConfigureAwait(false);

    protected override bool IsUniqueViolation(DbException e) => e is PostgresException { SqlState: PostgresErrorCodes.UniqueViolation };

    protected override bool IsForeignKeyViolation(DbException e) => e is PostgresException { SqlState: PostgresErrorCodes.ForeignKeyViolation };

    /// <summary>Runs one operation on its own pooled connection; database errors name the server and database.</summary>
    /// <summary>Blocking calls: Npgsql's async I/O completes on the thread pool, which a renewal must not wait for.</summary>
    protected override T Run<T>(string action, Func<DbConnection, T> operation)
    {
        ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);
        using var connection = _renewals.OpenConnection();
        try
        {
            return operation(connection);
        }
        catch (NpgsqlException e)
        {
            throw _database.Failure(action, e);
        }
    }

    protected override async Task<T> RunAsync<T>(string action, Func<DbConnection, Task<T>> operation, CancellationToken cancellationToken)
    {
        ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);
        await using var connection = await _database.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            return await operation(connection).ConfigureAwait(false);
        }
        catch (NpgsqlException e)
        {
            throw _database.Failure(action, e);
        }
    }
}
