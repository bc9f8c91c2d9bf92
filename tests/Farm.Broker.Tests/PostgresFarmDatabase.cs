using Npgsql;

namespace Farm.Broker.Tests;

/// <summary>
/// A farm database of its own for one test on the PostgreSQL server FARM_TEST_POSTGRES names
/// (<see cref="PostgresFactAttribute"/>); dropped with the container databases named after it.
/// </summary>
public sealed class PostgresFarmDatabase : IAsyncDisposable
{
    private readonly string _admin;
    private readonly string _name;

    private PostgresFarmDatabase(string admin, string name, string connectionString)
    {
        _admin = admin;
        _name = name;
        ConnectionString = connectionString;
    }

    public string ConnectionString { get; }

    public static async Task<PostgresFarmDatabase> CreateAsync(string prefix)
    {
        var admin = PostgresFactAttribute.AdminConnectionString ?? throw new InvalidOperationException(
            $"{PostgresFactAttribute.Variable} is not set, but CI=true: ./test.sh starts PostgreSQL and exports it.");
        var name = $"{prefix}_{Guid.NewGuid():N}"[..Math.Min(prefix.Length + 13, 40)];
        await using (var connection = new NpgsqlConnection(admin))
        {
            await connection.OpenAsync();
            await using var create = new NpgsqlCommand($"CREATE DATABASE \"{name}\"", connection);
            await create.ExecuteNonQueryAsync();
        }
        return new PostgresFarmDatabase(admin, name, new NpgsqlConnectionStringBuilder(admin) { Database = name }.ConnectionString);
    }

    /// <summary>A node whose farm and container databases are on the PostgreSQL server, in a farm database of its own.</summary>
    internal static async Task<(BrokerHarness Farm, PostgresFarmDatabase Postgres)> StartHarnessAsync(string prefix)
    {
        var postgres = await CreateAsync(prefix);
        var farm = await BrokerHarness.StartAsync(h =>
        {
            h.PostgresFarm = postgres.ConnectionString;
            h.Provider = new Farm.ContainerStore.Postgres.PostgresStoreProvider();
        });
        return (farm, postgres);
    }

    public async ValueTask DisposeAsync()
    {
        await using var connection = new NpgsqlConnection(_admin);
        await connection.OpenAsync();
        var names = new List<string>();
        await using (var list = new NpgsqlCommand("SELECT datname FROM pg_database WHERE starts_with(datname, $1)", connection) { Parameters = { new() { Value = _name } } })
        await using (var rows = await list.ExecuteReaderAsync())
        {
            while (await rows.ReadAsync())
            {
                names.Add(rows.GetString(0));
            }
        }
        foreach (var database in names)
        {
            await using var drop = new NpgsqlCommand($"DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)", connection);
            await drop.ExecuteNonQueryAsync();
        }
    }
}
