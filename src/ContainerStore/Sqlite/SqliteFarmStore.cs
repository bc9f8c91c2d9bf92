using System.Data.Common;
using Dapper;
using Farm.ContainerStore.FarmDatabase;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// The farm database in one SQLite file. Each call takes a pooled connection of its own, so
/// nodes, gateways and the CLI in one process can use it concurrently; lease times come from
/// SQLite's clock. The operations are <see cref="FarmStore"/>'s; this says how SQLite runs them.
/// </summary>
internal sealed class SqliteFarmStore : FarmStore
{
    private const int SqliteConstraintUnique = 2067;
    private const int SqliteConstraintForeignKey = 787;

    private readonly SqliteDatabaseFile _file;
    private int _disposed;

    private SqliteFarmStore(SqliteDatabaseFile file) : base(SqliteSql.Farm) => _file = file;

    public static async Task<SqliteFarmStore> OpenAsync(string connectionString, CancellationToken cancellationToken)
    {
        var file = SqliteDatabaseFile.Resolve(connectionString, "farm database");
        await using (var connection = await file.OpenAsync(create: true, cancellationToken).ConfigureAwait(false))
        {
            file.EnableWal(connection);
            await SqliteMigrator.MigrateAsync(file, connection, SqliteMigrator.FarmSchema, cancellationToken).ConfigureAwait(false);
        }

        var store = new SqliteFarmStore(file);
        await store.EnsureManageAccessPolicyAsync(cancellationToken).ConfigureAwait(false);
        return store;
    }

    /// <summary>The UPDATE reports only how many rows it changed; the row is read back under the same write lock.</summary>
    protected override async Task<ContainerRow?> TakeContainerAsync(DbConnection connection, DbTransaction transaction, object parameters, CancellationToken cancellationToken)
    {
        var taken = await connection.ExecuteAsync(Command(Sql.TryAcquireContainer, parameters, transaction, cancellationToken)).ConfigureAwait(false);
        return taken == 0
            ? null
            : await connection.QuerySingleAsync<ContainerRow>(Command(Sql.GetContainer, parameters, transaction, cancellationToken)).ConfigureAwait(false);
    }

    public override ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 0)
        {
            _file.ClearPools();
        }

        return ValueTask.CompletedTask;
    }

    /// <summary>BEGIN IMMEDIATE: the write lock from the first statement, so reads in the transaction stay true until the commit.</summary>
    protected override ValueTask<DbTransaction> BeginWriteAsync(DbConnection connection, CancellationToken cancellationToken) =>
        ValueTask.FromResult<DbTransaction>(((SqliteConnection)connection).BeginTransaction(deferred: false));

    protected override bool IsUniqueViolation(DbException e) => e is SqliteException { SqliteExtendedErrorCode: SqliteConstraintUnique };

    protected override bool IsForeignKeyViolation(DbException e) => e is SqliteException { SqliteExtendedErrorCode: SqliteConstraintForeignKey };

    /// <summary>Runs one operation on its own pooled connection; unreachable-file errors name the path.</summary>
    protected override async Task<T> RunAsync<T>(string action, Func<DbConnection, Task<T>> operation, CancellationToken cancellationToken)
    {
        ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);

        // A pooled connection keeps working on a deleted file's orphaned inode; refuse instead.
        if (!File.Exists(_file.Path))
        {
            throw new StoreUnavailableException($"The farm database '{_file.Path}' was deleted or moved while open.");
        }

        await using var connection = await _file.OpenAsync(create: false, cancellationToken).ConfigureAwait(false);
        try
        {
            return await operation(connection).ConfigureAwait(false);
        }
        catch (SqliteException e) when (SqliteDatabaseFile.IsUnavailable(e))
        {
            throw _file.Unavailable("use", e);
        }
    }
}
