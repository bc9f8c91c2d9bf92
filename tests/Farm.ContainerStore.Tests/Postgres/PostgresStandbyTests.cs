using Farm.ContainerStore.Containers;
using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Tests.Contracts;
using Npgsql;

namespace Farm.ContainerStore.Tests.Postgres;

/// <summary>
/// A container database this process released is kept with one connection, so taking the container
/// again starts on it (PostgresStandby): what a PostgreSQL failover's takes were waiting for.
/// </summary>
public sealed class PostgresStandbyTests : IAsyncLifetime
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);

    private readonly PostgresTestDatabases _databases = new();
    private readonly PostgresStoreProvider _provider = new();

    public Task InitializeAsync() => Task.CompletedTask;

    public async Task DisposeAsync() => await _databases.DisposeAsync();

    [PostgresFact]
    public async Task AReleasedDatabase_IsKeptWithOneConnection_AndTheNextOpenUsesIt()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 1);
        var first = await _provider.OpenContainerAsync(connectionString);
        Assert.True(await first.RaiseEpochAsync(1));
        // Reads side by side, until the pool holds several connections when the container is released.
        await Eventually.ValueAsync(async () =>
        {
            await Task.WhenAll(Enumerable.Range(0, 100).Select(_ => Task.Run(() => first.ReadEpochAsync())));
            return (await SessionsAsync(1)).Count > 1 ? "several" : null;
        }, Deadline, "the pool to open more than one connection");

        await first.DisposeAsync();

        await Eventually.ValueAsync(async () => PostgresStandby.Holds(connectionString) ? "kept" : null, Deadline, "the released database to be kept");
        var kept = Assert.Single(await SessionsAsync(1));

        var again = await _provider.OpenContainerAsync(connectionString);
        try
        {
            Assert.Equal(1, await again.ReadEpochAsync());
            // The open (its schema check) and the read ran on the kept session: no server process was started for them.
            Assert.Equal([kept], await SessionsAsync(1));
            Assert.False(PostgresStandby.Holds(connectionString));
        }
        finally
        {
            await again.DisposeAsync();
        }
    }

    [PostgresFact]
    public async Task AKeptConnectionTheServerEnded_TheNextOpenOpensAfresh()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 2);
        var first = await _provider.OpenContainerAsync(connectionString);
        Assert.True(await first.RaiseEpochAsync(4));
        await first.DisposeAsync();
        await Eventually.ValueAsync(async () => PostgresStandby.Holds(connectionString) ? "kept" : null, Deadline, "the released database to be kept");

        // As a server restart would.
        var ended = await QueryAsync($"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{Database(2)}'");
        Assert.Equal(1, ended);

        var again = await _provider.OpenContainerAsync(connectionString);
        try
        {
            Assert.Equal(4, await again.ReadEpochAsync());
            Assert.True(await again.RaiseEpochAsync(5));
        }
        finally
        {
            await again.DisposeAsync();
        }
    }

    [PostgresFact]
    public async Task AStoppingProcess_ClosesWhatItKept_AndKeepsNothingMore()
    {
        var kept = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 3);
        var servedAtTheStop = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 4);
        var released = await _provider.OpenContainerAsync(kept);
        var served = await _provider.OpenContainerAsync(servedAtTheStop);
        await released.DisposeAsync();
        await Eventually.ValueAsync(async () => PostgresStandby.Holds(kept) ? "kept" : null, Deadline, "the released database to be kept");

        try
        {
            PostgresStoreProvider.StopKeepingReleasedDatabases();
            await served.DisposeAsync();

            Assert.False(PostgresStandby.Holds(kept));
            await Eventually.ValueAsync(async () => (await SessionsAsync(3)).Count == 0 ? "closed" : null, Deadline, "the kept connection to close");
            await Eventually.ValueAsync(async () => (await SessionsAsync(4)).Count == 0 ? "closed" : null, Deadline, "the last served database's connections to close");
            Assert.False(PostgresStandby.Holds(servedAtTheStop));
        }
        finally
        {
            PostgresStandby.ResumeForTests();
        }
    }

    [PostgresFact]
    public async Task APreparedDatabase_IsOpenedWithOneConnection_AndTheTakeUsesIt()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 5);
        await CreateContainerDatabaseAsync(connectionString);

        // Served elsewhere: this process may have to take it when its owner dies.
        _provider.PrepareContainer(connectionString);

        await Eventually.ValueAsync(async () => PostgresStandby.Holds(connectionString) ? "kept" : null, Deadline, "the prepared database to be kept");
        var kept = Assert.Single(await SessionsAsync(5));
        var taken = await _provider.OpenContainerAsync(connectionString);
        try
        {
            Assert.True(await taken.RaiseEpochAsync(2));
            Assert.Equal([kept], await SessionsAsync(5));
        }
        finally
        {
            await taken.DisposeAsync();
        }
    }

    [PostgresFact]
    public async Task PreparingADatabaseThatIsNotThere_CreatesNothing_AndKeepsNothing()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 6);

        _provider.PrepareContainer(connectionString);

        await Eventually.ValueAsync(async () => PostgresStandby.IsPreparing(connectionString) ? null : "done", Deadline, "the prepare to end");
        Assert.False(PostgresStandby.Holds(connectionString));
        Assert.Equal(0, await QueryAsync($"SELECT count(*) FROM pg_database WHERE datname = '{Database(6)}'"));
    }

    /// <summary>Creates (and migrates) the container's database, leaving no connection to it.</summary>
    private async Task CreateContainerDatabaseAsync(string connectionString)
    {
        await (await _provider.OpenContainerAsync(connectionString)).DisposeAsync();
        await Eventually.ValueAsync(async () => PostgresStandby.Holds(connectionString) ? "kept" : null, Deadline, "the released database to be kept");
        await PostgresStandby.Take(connectionString)!.DisposeAsync();
    }

    private string Database(long containerId) => $"{_databases.FarmDatabase}_container_{containerId}";

    /// <summary>The server processes connected to the container's database.</summary>
    private async Task<List<int>> SessionsAsync(long containerId)
    {
        await using var connection = new NpgsqlConnection(PostgresTestServer.ConnectionString("postgres", b => b.Pooling = false));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand("SELECT pid FROM pg_stat_activity WHERE datname = $1 ORDER BY pid", connection)
        {
            Parameters = { new NpgsqlParameter<string> { TypedValue = Database(containerId) } },
        };
        var pids = new List<int>();
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            pids.Add(reader.GetInt32(0));
        }
        return pids;
    }

    private static async Task<long> QueryAsync(string sql)
    {
        await using var connection = new NpgsqlConnection(PostgresTestServer.ConnectionString("postgres", b => b.Pooling = false));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(sql, connection);
        return (long)(await command.ExecuteScalarAsync())!;
    }
}
