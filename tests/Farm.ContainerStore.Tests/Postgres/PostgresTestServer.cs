using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Tests.Contracts;
using Npgsql;

namespace Farm.ContainerStore.Tests.Postgres;

/// <summary>
/// The real PostgreSQL server the tests run against, named by FARM_TEST_POSTGRES (an Npgsql
/// connection string of a user allowed to create databases; ./test.sh starts one and sets it).
/// Without it the PostgreSQL tests are skipped, except on CI, where its absence is a failure.
/// </summary>
internal static class PostgresTestServer
{
    public const string Variable = "FARM_TEST_POSTGRES";

    public static string? AdminConnectionString { get; } =
        Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } value ? value : null;

    /// <summary>Why the PostgreSQL tests are skipped; null when they run (and then fail if there is no server).</summary>
    public static string? SkipReason { get; } =
        AdminConnectionString is not null || string.Equals(Environment.GetEnvironmentVariable("CI"), "true", StringComparison.OrdinalIgnoreCase)
            ? null
            : $"{Variable} is not set: no PostgreSQL server to test against (./test.sh starts one).";

    public static string RequireAdminConnectionString() => AdminConnectionString ?? throw new InvalidOperationException(
        $"{Variable} is not set, but CI=true: the test script must start PostgreSQL and export {Variable} (see setup_postgres in ./test.sh).");

    /// <summary>The admin connection string pointed at another database.</summary>
    public static string ConnectionString(string database, Action<NpgsqlConnectionStringBuilder>? change = null)
    {
        var builder = new NpgsqlConnectionStringBuilder(RequireAdminConnectionString()) { Database = database };
        change?.Invoke(builder);
        return builder.ConnectionString;
    }

    public static async Task ExecuteAsync(string sql)
    {
        await using var connection = new NpgsqlConnection(ConnectionString("postgres", b => b.Pooling = false));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(sql, connection);
        await command.ExecuteNonQueryAsync();
    }

    /// <summary>
    /// Ends (pg_terminate_backend) every session holding the two-key advisory lock (<paramref name="space"/>,
    /// <paramref name="key"/>) in database <paramref name="database"/>, as a server restart would; returns how many.
    /// </summary>
    public static async Task<int> TerminateSessionsHoldingAdvisoryLockAsync(string database, int space, int key)
    {
        await using var connection = new NpgsqlConnection(ConnectionString("postgres", b => b.Pooling = false));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(
            """
            SELECT count(*) FILTER (WHERE pg_terminate_backend(l.pid))::int
            FROM pg_locks l JOIN pg_database d ON d.oid = l.database
            WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1 AND l.classid = $2::oid AND l.objid = $3::oid AND l.objsubid = 2
            """, connection)
        {
            Parameters =
            {
                new NpgsqlParameter<string> { TypedValue = database },
                new NpgsqlParameter<long> { TypedValue = (uint)space },
                new NpgsqlParameter<long> { TypedValue = (uint)key },
            },
        };
        return (int)(await command.ExecuteScalarAsync())!;
    }

    public static Task CreateDatabaseAsync(string name) => ExecuteAsync(PostgresSql.Server.CreateDatabase(name));

    /// <summary>Drops every database whose name starts with <paramref name="prefix"/>, ending sessions still in them.</summary>
    public static async Task DropDatabasesAsync(string prefix)
    {
        var names = new List<string>();
        await using (var connection = new NpgsqlConnection(ConnectionString("postgres", b => b.Pooling = false)))
        {
            await connection.OpenAsync();
            await using var command = new NpgsqlCommand("SELECT datname FROM pg_database WHERE starts_with(datname, $1)", connection)
            {
                Parameters = { new NpgsqlParameter<string> { TypedValue = prefix } },
            };
            await using var reader = await command.ExecuteReaderAsync();
            while (await reader.ReadAsync())
            {
                names.Add(reader.GetString(0));
            }
        }

        foreach (var name in names)
        {
            await ExecuteAsync(PostgresSql.Server.DropDatabase(name));
        }
    }
}

/// <summary>A [Fact] against the real PostgreSQL server, skipped with the reason when there is none.</summary>
public sealed class PostgresFactAttribute : FactAttribute
{
    public PostgresFactAttribute() => Skip = PostgresTestServer.SkipReason;
}

/// <summary>A [Theory] against the real PostgreSQL server, skipped with the reason when there is none.</summary>
public sealed class PostgresTheoryAttribute : TheoryAttribute
{
    public PostgresTheoryAttribute() => Skip = PostgresTestServer.SkipReason;
}

/// <summary>Runs a contract test class's [StoreFact]s only where there is a PostgreSQL server.</summary>
public sealed class RequiresPostgresAttribute : StoreAvailabilityAttribute
{
    public override string? SkipReason => PostgresTestServer.SkipReason;
}

/// <summary>
/// Fresh database names for one test ("farm_test_{random}" and the container databases named
/// after it), all dropped when the test ends.
/// </summary>
public sealed class PostgresTestDatabases : IAsyncDisposable
{
    public PostgresTestDatabases() => FarmDatabase = $"farm_test_{Guid.NewGuid():N}"[..26];

    public string FarmDatabase { get; }

    /// <summary>The farm database's connection string; the database is not created.</summary>
    public string FarmConnectionString => PostgresTestServer.ConnectionString(FarmDatabase);

    /// <summary>Creates the farm database (the provider never creates it) and returns its connection string.</summary>
    public async Task<string> CreateFarmDatabaseAsync()
    {
        await PostgresTestServer.CreateDatabaseAsync(FarmDatabase);
        return FarmConnectionString;
    }

    public async ValueTask DisposeAsync()
    {
        if (PostgresTestServer.AdminConnectionString is not null)
        {
            await PostgresTestServer.DropDatabasesAsync(FarmDatabase);
        }
    }
}
