using Microsoft.Extensions.Time.Testing;
using Farm.Broker.Node;
using Farm.ContainerStore.Sqlite;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// Routing while a node drains: the draining node stops counting towards the shares, but it still
/// serves the containers it has not handed over yet, so the other nodes keep routing their calls
/// (above all its receivers' settlements, which only it can honour) to it.
/// </summary>
public sealed class DrainRoutingTests : IAsyncLifetime
{
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-broker-tests", Guid.NewGuid().ToString("N"));
    private readonly FakeTimeProvider _time = TestClock.Create();
    private readonly List<BrokerNode> _nodes = [];

    public Task InitializeAsync() => Task.CompletedTask;

    public async Task DisposeAsync()
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
            // Left for the OS to clean up.
        }
    }

    [Fact]
    public async Task AnotherNode_RoutesToADrainingOwner_UntilItHandsTheContainerOver()
    {
        var draining = await StartNodeAsync(1, "http://node-1");
        var other = await StartNodeAsync(2, "http://node-2");
        var container = (await draining.Farm.ListContainersAsync()).Single(c => c.OwnerNode == 1).Id;
        Assert.Equal("http://node-1", other.OwnerAddressOf(container));

        await draining.StartDrainAsync(CancellationToken.None);
        // Runs one ownership pass on the other node (the draining node's own passes wait for the manual clock).
        await other.CreateContainerAsync(CancellationToken.None);

        Assert.Equal("http://node-1", other.OwnerAddressOf(container));
        Assert.True(draining.TryGetContainer(container, out _));
    }

    private async Task<BrokerNode> StartNodeAsync(long id, string address)
    {
        var node = new BrokerNode(new SqliteStoreProvider(), new NodeOptions { NodeId = id, DataDirectory = _directory }, new BrokerOptions(), _time, NullLogger<BrokerNode>.Instance);
        _nodes.Add(node);
        await node.StartAsync(address, CancellationToken.None);
        return node;
    }
}
