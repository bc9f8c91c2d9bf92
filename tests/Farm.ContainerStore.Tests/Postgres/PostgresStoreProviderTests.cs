using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Tests.Contracts;
using Npgsql;
using Xunit.Abstractions;

namespace Farm.ContainerStore.Tests.Postgres;

/// <summary>What is particular to PostgreSQL: database names, a server that is not there, and two writers racing.</summary>
public sealed class PostgresStoreProviderTests(ITestOutputHelper output) : IAsyncLifetime
{
    /// <summary>Well under Npgsql's 15 s connect timeout: a refused login or connection must not wait it out.</summary>
    private static readonly TimeSpan Quickly = TimeSpan.FromSeconds(10);

    private readonly PostgresTestDatabases _databases = new();
    private readonly PostgresStoreProvider _provider = new();
    private readonly List<IAsyncDisposable> _opened = [];

    public Task InitializeAsync() => Task.CompletedTask;

    public async Task DisposeAsync()
    {
        foreach (var store in _opened)
        {
            await store.DisposeAsync();
        }

        await _databases.DisposeAsync();
    }

    [Theory]
    [InlineData("Host=db.example;Database=orders", PostgresDatabase.DefaultMaxPoolSize)]
    [InlineData("Host=db.example;Database=orders;Maximum Pool Size=50", 50)]
    [InlineData("Host=db.example;Database=orders;MaxPoolSize=3", 3)]
    [InlineData("Host=db.example;Database=orders;maximum pool size=100", 100)]
    public async Task APool_OpensAtMostTheDefaultNumberOfConnections_UnlessTheConnectionStringSays(string connectionString, int expected)
    {
        await using var database = PostgresDatabase.Resolve(connectionString, "farm database");

        Assert.Equal(expected, database.MaxPoolSize);
    }

    [PostgresFact]
    public async Task ABurstOfReads_QueuesOnTheBoundedPool_AndEveryOneIsAnswered()
    {
        // After a failover every send a client repeats looks up its record at once: a burst like
        // that must wait for the pool's few connections, not open a server process each.
        var database = await OpenContainerAsync(_provider.NewContainerConnectionString(_databases.FarmConnectionString, 9));
        Assert.True(await database.RaiseEpochAsync(3));

        var epochs = await Task.WhenAll(Enumerable.Range(0, 200).Select(_ => Task.Run(() => database.ReadEpochAsync())));

        Assert.All(epochs, epoch => Assert.Equal(3, epoch));
        var connections = (await QueryAsync("postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", r => r.GetInt64(0), $"{_databases.FarmDatabase}_container_9")).Single();
        Assert.InRange(connections, 1, PostgresDatabase.DefaultMaxPoolSize);
    }

    [Fact]
    public void NewContainerConnectionString_NamesTheDatabaseAfterTheFarmsAndKeepsTheRest()
    {
        var farm = "Host=db.example;Port=6543;Username=farm;Password=secret;Database=orders;Timeout=3";

        var container = new NpgsqlConnectionStringBuilder(_provider.NewContainerConnectionString(farm, 42));

        Assert.Equal(("orders_container_42", "db.example", 6543, "farm", "secret", 3),
            (container.Database, container.Host, container.Port, container.Username, container.Password, container.Timeout));
    }

    [Fact]
    public void NewContainerConnectionString_WithoutDatabase_NamesItAfterTheUser()
    {
        var container = new NpgsqlConnectionStringBuilder(_provider.NewContainerConnectionString("Host=h;Username=farm", 7));

        Assert.Equal("farm_container_7", container.Database);
    }

    [Fact]
    public void NewContainerConnectionString_NameLongerThanPostgresAllows_ThrowsInsteadOfLettingItBeCutShort()
    {
        var farm = $"Host=h;Username=u;Database={new string('f', 50)}";

        var error = Assert.Throws<StoreUnavailableException>(() => _provider.NewContainerConnectionString(farm, 1234567));

        Assert.Contains("63", error.Message);
    }

    [Theory]
    [InlineData("")]
    [InlineData("Database=farm")]
    [InlineData("Nonsense Keyword=1")]
    public async Task Open_ConnectionStringWithoutAServer_ThrowsStoreUnavailable(string connectionString)
    {
        await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenFarmStoreAsync(connectionString));
        await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenContainerAsync(connectionString));
    }

    [Fact]
    public async Task Open_ClosedPort_ThrowsStoreUnavailableNamingHostAndDatabaseQuickly()
    {
        var port = ClosedPort();
        var connectionString = $"Host=127.0.0.1;Port={port};Username=farm;Password=x;Database=farm_nowhere";
        var clock = Stopwatch.StartNew();

        var farmError = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenFarmStoreAsync(connectionString));
        var containerError = await Assert.ThrowsAsync<StoreUnavailableException>(
            () => _provider.OpenContainerAsync(_provider.NewContainerConnectionString(connectionString, 1)));

        Assert.True(clock.Elapsed < Quickly, $"took {clock.Elapsed}");
        Assert.Contains($"127.0.0.1:{port}", farmError.Message);
        Assert.Contains("farm_nowhere", farmError.Message);
        Assert.Contains("farm_nowhere_container_1", containerError.Message);
        output.WriteLine(farmError.Message);
    }

    [PostgresFact]
    public async Task Open_BadCredentials_ThrowsStoreUnavailableNamingTheDatabase()
    {
        var connectionString = PostgresTestServer.ConnectionString("postgres", b => (b.Username, b.Password) = ("farm_no_such_user", "wrong"));
        var clock = Stopwatch.StartNew();

        var farmError = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenFarmStoreAsync(connectionString));
        var containerError = await Assert.ThrowsAsync<StoreUnavailableException>(
            () => _provider.OpenContainerAsync(_provider.NewContainerConnectionString(connectionString, 1)));

        Assert.True(clock.Elapsed < Quickly, $"took {clock.Elapsed}");
        Assert.Contains("'postgres'", farmError.Message);
        Assert.Contains("farm_no_such_user", farmError.Message);
        Assert.IsAssignableFrom<PostgresException>(farmError.InnerException);
        Assert.StartsWith("28", ((PostgresException)farmError.InnerException!).SqlState, StringComparison.Ordinal);
        Assert.Contains("postgres_container_1", containerError.Message);
        output.WriteLine(farmError.Message);
    }

    [PostgresFact]
    public async Task OpenFarmStore_MissingDatabase_ThrowsStoreUnavailableAndCreatesNothing()
    {
        var error = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenFarmStoreAsync(_databases.FarmConnectionString));

        Assert.Contains($"'{_databases.FarmDatabase}'", error.Message);
        Assert.Contains("does not exist", error.Message);
        Assert.Empty(await DatabasesAsync());
        output.WriteLine(error.Message);
    }

    [PostgresFact]
    public async Task OpenContainer_ManyNodesAtOnce_AllOpenTheOneDatabaseTheyCreated()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 3);

        var opened = await Task.WhenAll(Enumerable.Range(0, 4).Select(_ => _provider.OpenContainerAsync(connectionString)));
        _opened.AddRange(opened);

        Assert.Equal([$"{_databases.FarmDatabase}_container_3"], await DatabasesAsync());
        Assert.True(await opened[0].RaiseEpochAsync(2));
        Assert.All(await Task.WhenAll(opened.Select(d => d.ReadEpochAsync())), epoch => Assert.Equal(2, epoch));
        Assert.Equal([1L, 2L, 3L, 4L, 5L, 6L, 7L], await SchemaVersionsAsync($"{_databases.FarmDatabase}_container_3"));
        Assert.Equal(connectionString, opened[0].ConnectionString);
    }

    [PostgresFact]
    public async Task OpenContainer_SchemaAlreadyCurrent_OpensWithoutWaitingForAnotherNodesMigrationLock()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 5);
        await (await _provider.OpenContainerAsync(connectionString)).DisposeAsync();
        // Another session holds the lock a migration takes (a node checking the schema, say): a
        // takeover reopening a current database must not queue behind it.
        await using var holder = new NpgsqlConnection(PostgresTestServer.ConnectionString($"{_databases.FarmDatabase}_container_5", b => b.Pooling = false));
        await holder.OpenAsync();
        await using (var hold = new NpgsqlCommand($"SELECT pg_advisory_lock({PostgresSql.Schema.MigrationLockKey})", holder))
        {
            await hold.ExecuteNonQueryAsync();
        }

        using var deadline = new CancellationTokenSource(Quickly);
        var reopened = await _provider.OpenContainerAsync(connectionString, deadline.Token);
        _opened.Add(reopened);

        Assert.True(await reopened.RaiseEpochAsync(1));
        Assert.Equal([1L, 2L, 3L, 4L, 5L, 6L, 7L], await SchemaVersionsAsync($"{_databases.FarmDatabase}_container_5"));
    }

    [PostgresFact]
    public async Task OpenContainer_NewDatabase_RunsNoStatementThatFails()
    {
        // A statement that fails is an ERROR line in the server's log, which an operator reads as
        // a fault; the server counts each one as a rolled-back transaction of the database it ran in.
        var database = $"{_databases.FarmDatabase}_container_8";
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 8);
        var opened = await _provider.OpenContainerAsync(connectionString);
        Assert.True(await opened.RaiseEpochAsync(1));
        await opened.DisposeAsync();
        // The process keeps the released database with one connection for a retake (PostgresStandby): close that too.
        await Eventually.ValueAsync(async () => PostgresStandby.Holds(connectionString) ? "kept" : null, TimeSpan.FromSeconds(30), "the released database to be kept");
        await PostgresStandby.Take(connectionString)!.DisposeAsync();

        // A session reports its counts when it ends; wait until the pool's sessions have gone and reported.
        var counts = await Eventually.ValueAsync(
            async () => (await QueryAsync(
                "postgres",
                "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1 AND numbackends = 0 AND xact_commit > 0",
                r => new[] { r.GetInt64(0), r.GetInt64(1) },
                database)).FirstOrDefault(),
            TimeSpan.FromSeconds(30),
            $"the sessions on {database} to end and report their transactions");

        Assert.True(counts[1] == 0, $"{counts[1]} transaction(s) of {counts[0] + counts[1]} on {database} rolled back: a statement failed while opening it");
    }

    [PostgresFact]
    public async Task OpenContainer_SchemaNewerThanThisBuild_IsRefusedNamingTheDatabase()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 6);
        await (await _provider.OpenContainerAsync(connectionString)).DisposeAsync();
        await QueryAsync($"{_databases.FarmDatabase}_container_6", "INSERT INTO schema_version (version, name) VALUES (999, 'from a later build') RETURNING version", r => r.GetInt64(0));

        var error = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenContainerAsync(connectionString));

        Assert.Contains("schema version 999", error.Message);
        Assert.Contains($"'{_databases.FarmDatabase}_container_6'", error.Message);
    }

    [PostgresFact]
    public async Task OpenFarmStore_ManyNodesAtOnce_MigrateOnce()
    {
        var connectionString = await _databases.CreateFarmDatabaseAsync();

        _opened.AddRange(await Task.WhenAll(Enumerable.Range(0, 4).Select(_ => _provider.OpenFarmStoreAsync(connectionString))));

        Assert.Equal([1L, 2L, 3L, 4L, 5L, 6L, 7L], await SchemaVersionsAsync(_databases.FarmDatabase));
    }

    [PostgresFact]
    public async Task TryAcquire_TakesTheLeaseFromTheServersClock()
    {
        var farm = await OpenFarmAsync();
        var container = await farm.CreateContainerAsync(id => _provider.NewContainerConnectionString(_databases.FarmConnectionString, id));
        var before = await ServerNowAsync();

        var acquired = await farm.TryAcquireContainerAsync(container.Id, 1, TimeSpan.FromSeconds(30));

        // Owned-since and expiry come from one server timestamp, so they differ by exactly the lease.
        Assert.Equal(TimeSpan.FromSeconds(30), acquired!.LeaseExpiresAt - acquired.OwnedSince);
        Assert.InRange(acquired.OwnedSince!.Value, before, before + TimeSpan.FromMinutes(1));
    }

    [PostgresFact]
    public async Task TwoNodes_RacingForAnExpiredLease_OnlyOneGetsIt()
    {
        var farm = await OpenFarmAsync();
        var container = await farm.CreateContainerAsync(id => _provider.NewContainerConnectionString(_databases.FarmConnectionString, id));

        var attempts = await Task.WhenAll(Enumerable.Range(1, 8).Select(node => farm.TryAcquireContainerAsync(container.Id, node, TimeSpan.FromMinutes(1))));

        var winner = Assert.Single(attempts, a => a is not null);
        Assert.Equal(1, winner!.Epoch);
    }

    [PostgresFact]
    public async Task ConcurrentCommits_FromTwoOwners_OnlyTheCurrentEpochWins()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 1);
        var former = await OpenContainerAsync(connectionString);
        var current = await OpenContainerAsync(connectionString);
        Assert.True(await former.RaiseEpochAsync(1));
        Assert.True(await current.RaiseEpochAsync(2));

        var results = await Task.WhenAll(
            Capture(former.CommitAsync(1, Batch(1))),
            Capture(current.CommitAsync(2, Batch(2))));

        Assert.Equal((1L, 2L), (Assert.IsType<StaleEpochException>(results[0]).ExpectedEpoch, ((StaleEpochException)results[0]!).ActualEpoch));
        Assert.Null(results[1]);
        Assert.Equal([2L], (await current.LoadEntityAsync(1, 0)).Messages.Select(m => m.SequenceNumber));
    }

    [PostgresFact]
    public async Task Commit_RacingARaiseEpoch_EitherLandsBeforeItOrWritesNothing()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 1);
        var former = await OpenContainerAsync(connectionString);
        var newOwner = await OpenContainerAsync(connectionString);

        var landed = 0;
        for (var epoch = 1; epoch <= 20; epoch++)
        {
            Assert.True(await former.RaiseEpochAsync(epoch));
            var commit = Capture(former.CommitAsync(epoch, Batch(epoch)));
            var raise = RaiseLikeTheOwnershipPassAsync(newOwner, epoch + 1);
            var (error, raised) = (await commit, await raise);

            Assert.True(raised);
            var stored = (await newOwner.LoadEntityAsync(1, 0)).Messages.Any(m => m.SequenceNumber == epoch);
            if (error is null)
            {
                Assert.True(stored);
                landed++;
            }
            else
            {
                Assert.IsType<StaleEpochException>(error);
                Assert.False(stored);
            }

            // Once the epoch moved on, the former owner can write nothing.
            await Assert.ThrowsAsync<StaleEpochException>(() => former.CommitAsync(epoch, Batch(1000 + epoch)));
        }

        Assert.Equal(landed, (await newOwner.LoadEntityAsync(1, 0)).Messages.Count);
        output.WriteLine($"{landed} of 20 commits landed before the raise");
    }

    [PostgresFact]
    public async Task RaiseEpoch_BehindAStrandedCommit_FailsRetryably_AndSucceedsOnceTheServerEndsThatTransaction()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 1);
        var newOwner = await OpenContainerAsync(connectionString);
        Assert.True(await newOwner.RaiseEpochAsync(1));

        // A former owner froze or lost its network in the middle of a commit: its transaction holds
        // the owner row and never says another word (its connection has the provider's session options).
        await using var former = PostgresDatabase.Resolve(connectionString, "container database");
        await using var connection = await former.OpenConnectionAsync(CancellationToken.None);
        await using var stranded = await connection.BeginTransactionAsync();
        await using (var lockEpoch = new NpgsqlCommand(PostgresSql.ContainerDb.LockEpoch, connection, stranded))
        {
            Assert.Equal(1L, await lockEpoch.ExecuteScalarAsync());
        }

        // The new owner does not wait on it (that would stall its ownership pass): a retryable failure...
        var busy = await Assert.ThrowsAsync<StoreUnavailableException>(() => newOwner.RaiseEpochAsync(2).WaitAsync(TimeSpan.FromSeconds(30)));
        output.WriteLine(busy.Message);

        // ...until the server ends the stranded transaction, and then the epoch goes up.
        await Eventually.ValueAsync(async () => await Capture(newOwner.RaiseEpochAsync(2)) is null ? "raised" : null,
            TimeSpan.FromSeconds(30), "the epoch to be raised past the stranded transaction");
        Assert.Equal(2, await newOwner.ReadEpochAsync());
        await Assert.ThrowsAnyAsync<NpgsqlException>(() => stranded.CommitAsync());
    }

    [PostgresFact]
    public async Task Commit_AfterTheDatabaseWasDropped_ThrowsStoreUnavailableNamingIt()
    {
        var connectionString = _provider.NewContainerConnectionString(_databases.FarmConnectionString, 1);
        var database = await OpenContainerAsync(connectionString);
        Assert.True(await database.RaiseEpochAsync(1));
        await database.CommitAsync(1, Batch(1));

        await PostgresTestServer.DropDatabasesAsync(_databases.FarmDatabase);

        var error = await Assert.ThrowsAsync<StoreUnavailableException>(() => database.CommitAsync(1, Batch(2)));
        Assert.Contains($"'{_databases.FarmDatabase}_container_1'", error.Message);
        output.WriteLine(error.Message);
    }

    [PostgresFact]
    public async Task Commit_RejectedBatch_ThrowsNamingTheDatabaseNotARawNpgsqlException()
    {
        var database = await OpenContainerAsync(_provider.NewContainerConnectionString(_databases.FarmConnectionString, 1));
        Assert.True(await database.RaiseEpochAsync(1));
        await database.CommitAsync(1, Batch(1));

        var error = await Assert.ThrowsAsync<InvalidOperationException>(() => database.CommitAsync(1, Batch(1)));

        Assert.Contains("_container_1", error.Message);
        Assert.IsType<PostgresException>(error.InnerException);
    }

    [PostgresFact]
    public async Task Commit_SameMessageUpdatedTwiceInOneBatch_EndsAsIfAppliedInOrder()
    {
        var database = await OpenContainerAsync(_provider.NewContainerConnectionString(_databases.FarmConnectionString, 1));
        Assert.True(await database.RaiseEpochAsync(1));
        var batch = Batch(1);
        batch.Updates.Add(new MessageUpdate(1, 1, SubQueue.Main, StoredMessageState.Deferred, 1, null, null, null, Payload: [4, 4]));
        batch.Updates.Add(new MessageUpdate(1, 1, SubQueue.Main, StoredMessageState.Active, 2, null, null, null, Payload: null));
        batch.Duplicates.Add(new DuplicateRecord(1, "m", 1_000));
        batch.Duplicates.Add(new DuplicateRecord(1, "m", 5_000));

        await database.CommitAsync(1, batch);

        var load = await database.LoadEntityAsync(1, 0);
        var message = Assert.Single(load.Messages);
        Assert.Equal((StoredMessageState.Active, 2, 2), (message.State, message.DeliveryCount, message.PayloadSize));
        Assert.Equal([4, 4], message.Payload);
        Assert.Equal([new DuplicateRecord(1, "m", 5_000)], load.DuplicateHistory);
    }

    /// <summary>
    /// Not a timing assertion: measures group-commit insert throughput (1 KB messages, 100 per
    /// commit, durable commits) and prints it; only checks that every row landed.
    /// </summary>
    [PostgresFact]
    public async Task Commit_TenThousandOneKilobyteMessagesInBatchesOfHundred_AllLand()
    {
        const int total = 10_000;
        const int perBatch = 100;
        var database = await OpenContainerAsync(_provider.NewContainerConnectionString(_databases.FarmConnectionString, 1));
        Assert.True(await database.RaiseEpochAsync(1));
        var payload = new byte[1024];
        Random.Shared.NextBytes(payload);

        var clock = Stopwatch.StartNew();
        for (var start = 1; start <= total; start += perBatch)
        {
            var batch = new ContainerWriteBatch();
            for (var sequence = start; sequence < start + perBatch; sequence++)
            {
                batch.Inserts.Add(new MessageRecord
                {
                    EntityId = 1,
                    SequenceNumber = sequence,
                    EnqueuedAtMs = 1_700_000_000_000 + sequence,
                    MessageId = $"m-{sequence}",
                    Payload = payload,
                    PayloadSize = payload.Length,
                });
            }

            batch.SequenceCounters[1] = start + perBatch;
            await database.CommitAsync(1, batch);
        }

        clock.Stop();
        output.WriteLine($"{total} x 1 KB in batches of {perBatch}: {clock.Elapsed.TotalMilliseconds:F0} ms, {total / clock.Elapsed.TotalSeconds:F0} rows/s");
        var load = await database.LoadEntityAsync(1, 0);
        Assert.Equal(total, load.Messages.Count);
        Assert.Equal(total + 1, load.NextSequenceNumber);
    }

    private static ContainerWriteBatch Batch(long sequenceNumber)
    {
        var batch = new ContainerWriteBatch();
        batch.Inserts.Add(new MessageRecord { EntityId = 1, SequenceNumber = sequenceNumber, EnqueuedAtMs = 1, Payload = [1, 2, 3], PayloadSize = 3 });
        return batch;
    }

    /// <summary>
    /// Raises the epoch as the ownership pass does: a raise that waited its lock timeout for a
    /// commit in flight (a slow fsync on a busy machine) fails retryably and is tried again;
    /// any other failure ends the test.
    /// </summary>
    private static async Task<bool> RaiseLikeTheOwnershipPassAsync(IContainerDatabase database, long epoch)
    {
        var giveUpAt = DateTime.UtcNow + TimeSpan.FromSeconds(30);
        while (true)
        {
            try
            {
                return await database.RaiseEpochAsync(epoch);
            }
            catch (StoreUnavailableException e) when (e.InnerException is PostgresException { SqlState: PostgresErrorCodes.LockNotAvailable } && DateTime.UtcNow < giveUpAt)
            {
                // The commit still holds the owner row: try again, as the next ownership pass would.
            }
        }
    }

    private static async Task<Exception?> Capture(Task task)
    {
        try
        {
            await task;
            return null;
        }
        catch (Exception e)
        {
            return e;
        }
    }

    private static int ClosedPort()
    {
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        return port;
    }

    private async Task<FarmDatabase.IFarmStore> OpenFarmAsync()
    {
        var store = await _provider.OpenFarmStoreAsync(await _databases.CreateFarmDatabaseAsync());
        _opened.Add(store);
        return store;
    }

    private async Task<IContainerDatabase> OpenContainerAsync(string connectionString)
    {
        var database = await _provider.OpenContainerAsync(connectionString);
        _opened.Add(database);
        return database;
    }

    private async Task<List<string>> DatabasesAsync() =>
        await QueryAsync("postgres", "SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname", r => r.GetString(0), _databases.FarmDatabase);

    private static Task<List<long>> SchemaVersionsAsync(string database) =>
        QueryAsync(database, "SELECT version FROM schema_version ORDER BY version", r => r.GetInt64(0));

    private static async Task<DateTime> ServerNowAsync() =>
        (await QueryAsync("postgres", "SELECT statement_timestamp()", r => r.GetDateTime(0)))[0];

    private static async Task<List<T>> QueryAsync<T>(string database, string sql, Func<NpgsqlDataReader, T> read, params string[] arguments)
    {
        await using var connection = new NpgsqlConnection(PostgresTestServer.ConnectionString(database, b => b.Pooling = false));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(sql, connection);
        foreach (var argument in arguments)
        {
            command.Parameters.Add(new NpgsqlParameter<string> { TypedValue = argument });
        }

        var rows = new List<T>();
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            rows.Add(read(reader));
        }

        return rows;
    }
}
