using Farm.Broker.Node;
using Farm.ContainerStore.Sqlite;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class StarvedThreadPoolCollection
{
    /// <summary>Tests that block the process's thread pool on purpose: they run alone.</summary>
    public const string Name = "starved thread pool";
}

/// <summary>
/// An overloaded node keeps its containers: its lease renewals do not wait behind the work queued on
/// its thread pool. Real SQLite farm and container files, the real clock, a pool whose every thread
/// is blocked for longer than a lease.
/// </summary>
[Collection(StarvedThreadPoolCollection.Name)]
public sealed class LeaseRenewalTests : IAsyncDisposable
{
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-lease-renewal-tests", Guid.NewGuid().ToString("N"));
    private BrokerNode? _node;

    [Fact]
    public async Task ANodeWhoseThreadPoolIsBlockedForLongerThanALease_KeepsRenewingItsLeases()
    {
        var options = new NodeOptions { NodeId = 1, DataDirectory = _directory };
        _node = new BrokerNode(new SqliteStoreProvider(), options, new BrokerOptions(), TimeProvider.System, NullLogger<BrokerNode>.Instance);
        await _node.StartAsync("http://test-1", CancellationToken.None);
        var container = Assert.Single(await _node.Farm.ListContainersAsync());
        Assert.Equal(1, container.OwnerNode);

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
            lapses = WatchTheLease(_node, options);
        }
        finally
        {
            release.Set();
        }

        Assert.Empty(lapses);
        Assert.True(_node.ServesContainer(container.Id), "the node stopped serving its container");
    }

    /// <summary>
    /// Reads the container's lease from this thread for twice a lease and returns every reading that
    /// found it lapsing. Blocking on purpose: the pool is blocked, and the farm store's SQLite calls
    /// complete on the calling thread, so reading the lease needs no pool thread.
    /// </summary>
    private static List<string> WatchTheLease(BrokerNode node, NodeOptions options)
    {
        var lapses = new List<string>();
        var watchUntil = DateTime.UtcNow + 2 * options.LeaseDuration;
        using var tick = new ManualResetEventSlim();
        while (DateTime.UtcNow < watchUntil)
        {
            var now = DateTime.UtcNow;
            var lease = node.Farm.ListContainersAsync().GetAwaiter().GetResult().Single();
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
