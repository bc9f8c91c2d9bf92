using Farm.Broker.Node;
using Farm.ContainerStore;
using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Sqlite;
using Npgsql;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;

namespace Farm.Broker.Tests;

[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class StarvedThreadPoolCollection
{
    /// <summary>Tests that block the process's thread pool on purpose: they run alone.</summary>
    public const string Name = "starved thread pool";
}

/// <summary>
/// An overloaded node keeps its containers: its lease renewals do not wait behind the work queued on
/// its thread pool. Real farm and container databases (SQLite files; a PostgreSQL server where
/// FARM_TEST_POSTGRES names one, as ./test.sh does), the real clock, a pool whose every thread is
/// blocked for longer than a lease.
/// </summary>
[Collection(StarvedThreadPoolCollection.Name)]
public sealed class LeaseRenewalTests : IAsyncDisposable
{
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-lease-renewal-tests", Guid.NewGuid().ToString("N"));
    private PostgresFarmDatabase? _postgres;
    private BrokerNode? _node;
    /// <summary>What the node logged: a lapse names the renewals' failures (a flaky lapse on CI, 2026-12-01, left no trace).</summary>
    private readonly FakeLogger<BrokerNode> _log = new();

    [Fact]
    public async Task ANodeWhoseThreadPoolIsBlockedForLongerThanALease_KeepsRenewingItsLeases()
    {
        var options = new NodeOptions { NodeId = 1, DataDirectory = _directory };
        await StartAsync(new SqliteStoreProvider(), options);
        // The farm store's SQLite calls complete on the calling thread: reading the lease needs no pool thread.
        AssertLeaseHeldWhilePoolIsBlocked(options, () => _node!.Farm.ListContainersAsync().GetAwaiter().GetResult().Single() is var c
            ? (c.Id, c.OwnerNode, c.LeaseExpiresAt) : default);
    }

    /// <summary>
    /// The same on PostgreSQL, where the async calls' I/O completes on the pool: renewals use the
    /// store's blocking calls on their own thread. The test reads the lease with blocking calls on a
    /// connection of its own.
    /// </summary>
    [PostgresFact]
    public async Task OnPostgreSql_ANodeWhoseThreadPoolIsBlockedForLongerThanALease_KeepsRenewingItsLeases()
    {
        _postgres = await PostgresFarmDatabase.CreateAsync("farm_lease");
        var farmConnection = _postgres.ConnectionString;
        var options = new NodeOptions { NodeId = 1, DataDirectory = _directory, Store = "postgres", FarmConnectionString = farmConnection };
        await StartAsync(new PostgresStoreProvider(), options);

        using var reader = new NpgsqlConnection(new NpgsqlConnectionStringBuilder(farmConnection) { Pooling = false }.ConnectionString);
        reader.Open();
        AssertLeaseHeldWhilePoolIsBlocked(options, () =>
        {
            using var read = new NpgsqlCommand("SELECT id, owner_node, lease_expires_at FROM containers", reader);
            using var row = read.ExecuteReader();
            Assert.True(row.Read());
            return (row.GetInt64(0), row.IsDBNull(1) ? null : row.GetInt64(1), row.IsDBNull(2) ? null : new DateTimeOffset(row.GetDateTime(2), TimeSpan.Zero));
        });
    }

    private async Task StartAsync(IStoreProvider provider, NodeOptions options)
    {
        _node = new BrokerNode(provider, options, new BrokerOptions(), TimeProvider.System, _log);
        await _node.StartAsync("http://test-1", CancellationToken.None);
        var container = Assert.Single(await _node.Farm.ListContainersAsync());
        Assert.Equal(1, container.OwnerNode);
    }

    /// <summary>
    /// Blocks every pool thread for twice a lease while reading the lease from this thread, then
    /// asserts no reading found it lapsing and the node still serves its container.
    /// </summary>
    private void AssertLeaseHeldWhilePoolIsBlocked(NodeOptions options, Func<(long Id, long? OwnerNode, DateTimeOffset? LeaseExpiresAt)> readLease)
    {
        var containerId = readLease().Id;
        // Every pool thread, and every one the pool adds meanwhile (about two a second), blocks until
        // released: work queued on the pool, a timer's tick too, waits all that time. Never disposed:
        // the items still queued when the test ends wait on it (and return at once) after that.
        var release = new ManualResetEventSlim();
        for (var i = 0; i < 500; i++)
        {
            ThreadPool.UnsafeQueueUserWorkItem(static state => ((ManualResetEventSlim)state!).Wait(), release);
        }
        List<string> lapses;
        try
        {
            lapses = WatchTheLease(options, readLease);
        }
        finally
        {
            release.Set();
        }

        Assert.True(lapses.Count == 0, $"the lease lapsed: {string.Join("; ", lapses)}; the node logged: {Warnings()}");
        Assert.True(_node!.ServesContainer(containerId), $"the node stopped serving its container; it logged: {Warnings()}");
    }

    private string Warnings() => LoggedRecords.Describe(_log, LogLevel.Warning);

    /// <summary>
    /// Reads the container's lease from this thread for twice a lease and returns every reading that
    /// found it lapsing. Blocking on purpose: the pool is blocked.
    /// </summary>
    private static List<string> WatchTheLease(NodeOptions options, Func<(long Id, long? OwnerNode, DateTimeOffset? LeaseExpiresAt)> readLease)
    {
        var lapses = new List<string>();
        var watchUntil = DateTime.UtcNow + 2 * options.LeaseDuration;
        using var tick = new ManualResetEventSlim();
        while (DateTime.UtcNow < watchUntil)
        {
            var now = DateTime.UtcNow;
            var lease = readLease();
            // Renewed every heartbeat interval for a lease of LeaseDuration, its end is always well
            // ahead unless renewals stopped.
            if (lease.OwnerNode != 1 || lease.LeaseExpiresAt is not { } end || end - now < options.LeaseSafetyMargin)
            {
                lapses.Add($"{now:HH:mm:ss.fff}: owner {lease.OwnerNode}, lease until {lease.LeaseExpiresAt:HH:mm:ss.fff}");
            }
            tick.Wait(options.HeartbeatInterval / 2);
        }
        return lapses;
    }

    public async ValueTask DisposeAsync()
    {
        if (_node is not null)
        {
            await _node.DisposeAsync();
        }
        if (_postgres is not null)
        {
            await _postgres.DisposeAsync();
        }
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // Best effort.
        }
    }
}

/// <summary>A test that needs the PostgreSQL server FARM_TEST_POSTGRES names: skipped without one, except on CI (where it then fails).</summary>
public sealed class PostgresFactAttribute : FactAttribute
{
    public const string Variable = "FARM_TEST_POSTGRES";

    public PostgresFactAttribute()
    {
        if (AdminConnectionString is null && !string.Equals(Environment.GetEnvironmentVariable("CI"), "true", StringComparison.OrdinalIgnoreCase))
        {
            Skip = $"{Variable} is not set: no PostgreSQL server to test against (./test.sh starts one).";
        }
    }

    public static string? AdminConnectionString => Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } value ? value : null;
}
