using Farm.Broker.Node;
using Farm.ContainerStore.Sqlite;
using Farm.Testing;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// A node whose process has begun to stop takes nothing more: `farm down` stops every node at once,
/// and a node still running its passes while a peer finished stopping took that peer's released
/// containers as orphans, only to release them again a moment later (seen as an epoch raised twice
/// across `farm down` and `farm up` in MultiNodeFarmTests). Real SQLite farm and container files,
/// nodes in this process.
/// </summary>
public sealed class StoppingNodeTests : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-stopping-node-tests", Guid.NewGuid().ToString("N"));
    private readonly List<BrokerNode> _nodes = [];

    private BrokerNode NewNode(long id)
    {
        var node = new BrokerNode(new SqliteStoreProvider(), new NodeOptions { NodeId = id, DataDirectory = _directory }, new BrokerOptions(), TimeProvider.System, NullLogger<BrokerNode>.Instance);
        _nodes.Add(node);
        return node;
    }

    [Fact]
    public async Task AStoppingNode_LeavesWhatAPeerReleasesOnItsWayOut_AndKeepsItsOwn()
    {
        var first = NewNode(1);
        await first.StartAsync("http://test-1", CancellationToken.None);
        var second = NewNode(2);
        await second.StartAsync("http://test-2", CancellationToken.None);
        var kept = (await first.Farm.ListContainersAsync(CancellationToken.None)).Single();
        await Eventually.UntilAsync(() => first.ServesContainer(kept.Id), Deadline, "node 1 serves the farm's first container");
        var released = await second.CreateContainerAsync(CancellationToken.None);
        Assert.True(second.ServesContainer(released.Id));

        // Both stop, node 1 a little later: node 2 releases its container while node 1's passes still run.
        first.StopTakingContainers();
        await second.DisposeAsync();
        _nodes.Remove(second);
        var atRelease = (await first.Farm.ListContainersAsync(CancellationToken.None)).Single(c => c.Id == released.Id);
        Assert.Null(atRelease.OwnerNode);
        await first.AssignAsync(first.Farm, CancellationToken.None);

        // Alone in the farm, node 1 is below its share of two: a node not stopping takes it at once.
        Assert.False(first.ServesContainer(released.Id));
        var left = (await first.Farm.ListContainersAsync(CancellationToken.None)).Single(c => c.Id == released.Id);
        Assert.Null(left.OwnerNode);
        Assert.Equal(atRelease.Epoch, left.Epoch);
        Assert.True(first.ServesContainer(kept.Id), "a stopping node keeps serving what it has until it releases it");

        // The container was there to take: a node that is not stopping takes it.
        var third = NewNode(3);
        await third.StartAsync("http://test-3", CancellationToken.None);
        await Eventually.UntilAsync(() => third.ServesContainer(released.Id), Deadline, "node 3 takes the released container");
        Assert.False(first.ServesContainer(released.Id));
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
