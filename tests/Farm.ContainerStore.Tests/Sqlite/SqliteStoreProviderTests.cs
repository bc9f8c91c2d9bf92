using Dapper;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.Sqlite;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Tests.Sqlite;

/// <summary>What is particular to SQLite: files, paths, and what happens when a file goes bad.</summary>
public sealed class SqliteStoreProviderTests : IDisposable
{
    private readonly SqliteTestDirectory _directory = new();
    private readonly SqliteStoreProvider _provider = new();

    public void Dispose() => _directory.Dispose();

    [Fact]
    public void NewContainerConnectionString_PutsTheFileInContainersBesideTheFarmDatabase()
    {
        var farm = $"Data Source={_directory.File("farm.db")};Cache=Shared";

        var container = new SqliteConnectionStringBuilder(_provider.NewContainerConnectionString(farm, 42));

        Assert.Equal(Path.Combine(_directory.Path, "containers", "container-42.db"), container.DataSource);
        Assert.Equal(SqliteCacheMode.Shared, container.Cache);
    }

    [Fact]
    public async Task OpenContainer_CreatesTheContainersDirectory()
    {
        var connectionString = _provider.NewContainerConnectionString(_directory.ConnectionString("farm.db"), 3);

        await using var database = await _provider.OpenContainerAsync(connectionString);

        Assert.True(File.Exists(Path.Combine(_directory.Path, "containers", "container-3.db")));
        Assert.Equal(connectionString, database.ConnectionString);
    }

    [Fact]
    public async Task Open_Twice_RecordsEachMigrationOnce()
    {
        var connectionString = _directory.ConnectionString("farm.db");
        await (await _provider.OpenFarmStoreAsync(connectionString)).DisposeAsync();
        await (await _provider.OpenFarmStoreAsync(connectionString)).DisposeAsync();

        await using var connection = new SqliteConnection(connectionString);
        var versions = (await connection.QueryAsync<long>("SELECT version FROM schema_version ORDER BY version")).ToList();
        var mode = await connection.ExecuteScalarAsync<string>("PRAGMA journal_mode");

        Assert.Equal([1L, 2L, 3L, 4L, 5L, 6L, 7L], versions);
        Assert.Equal("wal", mode);
    }

    /// <summary>
    /// Every create that places an entity, and every node's ownership pass, lists the containers
    /// with their entity counts: the count must come from an index alone, not a table lookup per
    /// entity (4.6 ms a list with 15,000 queues in a container; schema 7).
    /// </summary>
    [Fact]
    public async Task ListContainers_CountsEntitiesFromTheIndexAlone()
    {
        var connectionString = _directory.ConnectionString("farm.db");
        await (await _provider.OpenFarmStoreAsync(connectionString)).DisposeAsync();

        await using var connection = new SqliteConnection(connectionString);
        var plan = string.Join('\n', (await connection.QueryAsync<(long, long, long, string Detail)>(
            $"EXPLAIN QUERY PLAN {Farm.ContainerStore.Sqlite.SqliteSql.FarmDb.ListContainers}")).Select(r => r.Detail));

        Assert.Contains("COVERING INDEX entities_by_container_parent", plan, StringComparison.Ordinal);
    }

    /// <summary>
    /// A container's WAL is copied into the database file once it passes
    /// <see cref="SqliteSql.WalAutoCheckpointPages"/> pages, not SQLite's default 1,000 (see there
    /// why), and then starts over from its beginning: the file grows past 1,000 pages and never
    /// further than one commit past the setting.
    /// </summary>
    [Fact]
    public async Task AContainersWal_IsCheckpointedOnceItPassesTheSetting_NotSqlitesDefault()
    {
        var path = _directory.File("wal.db");
        await using var database = await _provider.OpenContainerAsync($"Data Source={path}");
        Assert.True(await database.RaiseEpochAsync(1));
        const int frameBytes = 4096 + 24;
        const int rowsPerCommit = 100;
        // 3,000 bytes: one row to a 4 KB page, so each commit adds a little over 100 pages.
        var payload = new byte[3000];
        var sequence = 0L;
        var largestWalPages = 0L;
        for (var commit = 0; commit < (SqliteSql.WalAutoCheckpointPages / rowsPerCommit) + 20; commit++)
        {
            var batch = new ContainerWriteBatch();
            for (var row = 0; row < rowsPerCommit; row++)
            {
                sequence++;
                batch.Inserts.Add(new MessageRecord { EntityId = 1, SequenceNumber = sequence, EnqueuedAtMs = sequence, Payload = payload, PayloadSize = payload.Length });
            }
            await database.CommitAsync(1, batch);
            largestWalPages = Math.Max(largestWalPages, new FileInfo(path + "-wal").Length / frameBytes);
        }

        Assert.InRange(largestWalPages, SqliteSql.WalAutoCheckpointPages, SqliteSql.WalAutoCheckpointPages + (2 * rowsPerCommit));
    }

    [Fact]
    public async Task Open_PathUnderARegularFile_ThrowsStoreUnavailableNamingThePath()
    {
        var blocker = _directory.File("not-a-directory");
        await File.WriteAllTextAsync(blocker, "x");
        var path = Path.Combine(blocker, "farm.db");

        var error = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenFarmStoreAsync($"Data Source={path}"));

        Assert.Contains(path, error.Message);
    }

    [Fact]
    public async Task Open_PathThatIsADirectory_ThrowsStoreUnavailableNamingThePath()
    {
        var path = Directory.CreateDirectory(_directory.File("a-directory.db")).FullName;

        var error = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenContainerAsync($"Data Source={path}"));

        Assert.Contains(path, error.Message);
        Assert.Contains("directory", error.Message);
    }

    [Fact]
    public async Task Open_FileThatIsNotASqliteDatabase_ThrowsStoreUnavailableNamingThePath()
    {
        var path = _directory.File("garbage.db");
        await File.WriteAllTextAsync(path, new string('x', 8192));

        var farmError = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenFarmStoreAsync($"Data Source={path}"));
        var containerError = await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenContainerAsync($"Data Source={path}"));

        Assert.Contains(path, farmError.Message);
        Assert.Contains("not a SQLite database", containerError.Message);
    }

    [Theory]
    [InlineData("")]
    [InlineData("Data Source=:memory:")]
    [InlineData("Nonsense Keyword=1")]
    public async Task Open_ConnectionStringWithoutAFile_ThrowsStoreUnavailable(string connectionString)
    {
        await Assert.ThrowsAsync<StoreUnavailableException>(() => _provider.OpenFarmStoreAsync(connectionString));
    }

    [Fact]
    public async Task Commit_AfterTheFileWasDeleted_ThrowsStoreUnavailable()
    {
        var path = _directory.File("container.db");
        await using var database = await _provider.OpenContainerAsync($"Data Source={path}");
        Assert.True(await database.RaiseEpochAsync(1));

        File.Delete(path);

        var error = await Assert.ThrowsAsync<StoreUnavailableException>(() => database.CommitAsync(1, Batch(1)));
        Assert.Contains(path, error.Message);
        // The writer does not quietly create an empty database in the file's place either.
        await Assert.ThrowsAsync<StoreUnavailableException>(() => database.CommitAsync(1, Batch(2)));
        Assert.False(File.Exists(path));
    }

    [Fact]
    public async Task Commit_WhileAnotherProcessHoldsTheWriteLock_ThrowsStoreUnavailableInsteadOfHanging()
    {
        var path = _directory.File("container.db");
        await using var database = await _provider.OpenContainerAsync($"Data Source={path};Default Timeout=1");
        Assert.True(await database.RaiseEpochAsync(1));

        await using (var intruder = new SqliteConnection($"Data Source={path};Pooling=False"))
        {
            await intruder.OpenAsync();
            using var transaction = intruder.BeginTransaction(deferred: false);

            var error = await Assert.ThrowsAsync<StoreUnavailableException>(() => database.CommitAsync(1, Batch(1)));
            Assert.Contains("locked", error.Message);
        }

        // Once the lock is gone the same handle writes again.
        await database.CommitAsync(1, Batch(1));
        Assert.Single((await database.LoadEntityAsync(1, 0)).Messages);
    }

    private static ContainerWriteBatch Batch(long sequenceNumber)
    {
        var batch = new ContainerWriteBatch();
        batch.Inserts.Add(new MessageRecord { EntityId = 1, SequenceNumber = sequenceNumber, EnqueuedAtMs = 1, Payload = [1, 2, 3], PayloadSize = 3 });
        return batch;
    }
}
