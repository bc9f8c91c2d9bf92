using Farm.Broker.Node;
using Farm.ContainerStore;
using Farm.ContainerStore.Sqlite;
using Farm.Testing;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// The ownership pass names to the store every container served elsewhere, so the store can get
/// ready to take it at short notice (PostgreSQL keeps a connection open: PostgresStandby), and
/// never one this node serves. Real SQLite farm and container files, nodes in this process; the
/// store is wrapped only to see what it was told (InterceptedStoreProvider).
/// </summary>
public sealed class PreparedContainersTests : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-prepared-containers-tests", Guid.NewGuid().ToString("N"));
    private readonly List<BrokerNode> _nodes = [];

    [Fact]
    public async Task EachPass_PreparesTheContainersPeersServe_AndNoneOfItsOwn()
    {
        var firstStore = new InterceptedStoreProvider(new SqliteStoreProvider());
        var first = NewNode(1, firstStore);
        await first.StartAsync("http://test-1", CancellationToken.None);
        var own = (await first.Farm.ListContainersAsync(CancellationToken.None)).Single();
        await Eventually.UntilAsync(() => first.ServesContainer(own.Id), Deadline, "node 1 serves the farm's first container");
        var secondStore = new InterceptedStoreProvider(new SqliteStoreProvider());
        var second = NewNode(2, secondStore);
        await second.StartAsync("http://test-2", CancellationToken.None);
        var peers = await second.CreateContainerAsync(CancellationToken.None);
        Assert.True(second.ServesContainer(peers.Id));

        await first.AssignAsync(first.Farm, CancellationToken.None);

        Assert.True(first.ServesContainer(own.Id));
        Assert.Contains(peers.ConnectionString, firstStore.Prepared);
        Assert.DoesNotContain(own.ConnectionString, firstStore.Prepared);
        await Eventually.UntilAsync(() => secondStore.Prepared.Contains(own.ConnectionString), Deadline, "node 2 prepares the container node 1 serves");
        Assert.DoesNotContain(peers.ConnectionString, secondStore.Prepared);
    }

    private BrokerNode NewNode(long id, IStoreProvider store)
    {
        var node = new BrokerNode(store, new NodeOptions { NodeId = id, DataDirectory = _directory }, new BrokerOptions(), TimeProvider.System, NullLogger<BrokerNode>.Instance);
        _nodes.Add(node);
        return node;
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var node in _nodes)
        {
            await node.DisposeAsync();
        }
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // A file still open on a slow dispose is not worth failing a test for.
        }
    }
}
