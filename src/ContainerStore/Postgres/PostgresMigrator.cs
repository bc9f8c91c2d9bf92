using System.Collections.Frozen;
using Dapper;
using Npgsql;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// Applies the embedded migration scripts (Migrations/{schema}/NNNN_name.sql) in order, each
/// recorded in schema_version, in one transaction under an advisory lock: nodes opening the same
/// new database at once migrate it one at a time, and reopening a current one changes nothing.
/// PostgreSQL's DDL is transactional, so a failed migration leaves no half-made schema. A database
/// already at this build's version is recognised by one read, without the lock.
/// </summary>
internal static class PostgresMigrator
{
    public const string FarmSchema = "farm";
    public const string ContainerSchema = "container";

    private static readonly FrozenDictionary<string, IReadOnlyList<MigrationScript>> Migrations =
        new[] { FarmSchema, ContainerSchema }.ToFrozenDictionary(s => s, s => MigrationScript.Load(typeof(PostgresMigrator), s));

    public static async Task MigrateAsync(PostgresDatabase database, NpgsqlConnection connection, string schema, CancellationToken cancellationToken)
    {
        var migrations = Migrations[schema];
        try
        {
            // Reopening a current database (every take of a container) is one read, not the locked
            // transaction below: a takeover does not queue behind other nodes' checks of it.
            if (await ReadVersionUnlockedAsync(connection, cancellationToken).ConfigureAwait(false) == migrations[^1].Version)
            {
                return;
            }

            await using var transaction = await connection.BeginTransactionAsync(cancellationToken).ConfigureAwait(false);
            await connection.ExecuteAsync(Command(PostgresSql.Schema.LockForMigration, null, transaction, cancellationToken)).ConfigureAwait(false);
            await connection.ExecuteAsync(Command(PostgresSql.Schema.CreateVersionTable, null, transaction, cancellationToken)).ConfigureAwait(false);
            var current = await connection.ExecuteScalarAsync<long>(Command(PostgresSql.Schema.CurrentVersion, null, transaction, cancellationToken)).ConfigureAwait(false);
            var latest = migrations[^1].Version;
            if (current > latest)
            {
                throw new StoreUnavailableException(
                    $"The PostgreSQL {schema} database '{database.Name}' on {database.Server} has schema version {current}, newer than this build knows ({latest}); upgrade Farm.");
            }

            foreach (var migration in migrations.Where(m => m.Version > current))
            {
                await connection.ExecuteAsync(Command(migration.Sql, null, transaction, cancellationToken)).ConfigureAwait(false);
                await connection.ExecuteAsync(Command(PostgresSql.Schema.RecordVersion, new { migration.Version, migration.Name }, transaction, cancellationToken)).ConfigureAwait(false);
            }

            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (NpgsqlException e)
        {
            // Whatever stops the schema from being brought up to date (permissions included) makes the store unusable.
            throw database.Unavailable($"migrate the {schema} schema of", e);
        }
    }

    /// <summary>
    /// The schema version recorded, or null when the database has no schema_version table yet.
    /// Asks whether the table exists first: reading a missing table would be an ERROR line in the
    /// server's log for every new database, which an operator takes for a fault.
    /// </summary>
    private static async Task<long?> ReadVersionUnlockedAsync(NpgsqlConnection connection, CancellationToken cancellationToken)
    {
        if (!await connection.ExecuteScalarAsync<bool>(new CommandDefinition(PostgresSql.Schema.VersionTableExists, cancellationToken: cancellationToken)).ConfigureAwait(false))
        {
            return null;
        }

        try
        {
            return await connection.ExecuteScalarAsync<long>(new CommandDefinition(PostgresSql.Schema.CurrentVersion, cancellationToken: cancellationToken)).ConfigureAwait(false);
        }
        catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.UndefinedTable)
        {
            // Dropped between the two reads: as good as new.
            return null;
        }
    }

    private static CommandDefinition Command(string sql, object? parameters, NpgsqlTransaction transaction, CancellationToken cancellationToken) =>
        new(sql, parameters, transaction, cancellationToken: cancellationToken);
}
