using System.Collections.Frozen;
using Dapper;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// Applies the embedded migration scripts (Migrations/{schema}/NNNN_name.sql) in order, each
/// recorded in schema_version, all in one write transaction: two processes opening the same new
/// file at once cannot both migrate it, and reopening a current file changes nothing.
/// </summary>
internal static class SqliteMigrator
{
    public const string FarmSchema = "farm";
    public const string ContainerSchema = "container";

    private static readonly FrozenDictionary<string, IReadOnlyList<MigrationScript>> Migrations =
        new[] { FarmSchema, ContainerSchema }.ToFrozenDictionary(s => s, s => MigrationScript.Load(typeof(SqliteMigrator), s));

    public static async Task MigrateAsync(SqliteDatabaseFile file, SqliteConnection connection, string schema, CancellationToken cancellationToken)
    {
        var migrations = Migrations[schema];
        try
        {
            using var transaction = connection.BeginTransaction(deferred: false);
            await connection.ExecuteAsync(new CommandDefinition(SqliteSql.Schema.CreateVersionTable, transaction: transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            var current = await connection.ExecuteScalarAsync<long>(new CommandDefinition(SqliteSql.Schema.CurrentVersion, transaction: transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            var latest = migrations[^1].Version;
            if (current > latest)
            {
                throw new StoreUnavailableException(
                    $"The {schema} database '{file.Path}' has schema version {current}, newer than this build knows ({latest}); upgrade Farm.");
            }

            foreach (var migration in migrations.Where(m => m.Version > current))
            {
                await connection.ExecuteAsync(new CommandDefinition(migration.Sql, transaction: transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
                await connection.ExecuteAsync(new CommandDefinition(SqliteSql.Schema.RecordVersion, new { migration.Version, migration.Name }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            }

            transaction.Commit();
        }
        catch (SqliteException e) when (SqliteDatabaseFile.IsUnavailable(e))
        {
            throw file.Unavailable("open", e);
        }
    }
}
