using Farm.Broker.Node;
using Farm.ContainerStore.Sqlite;
using Farm.Testing;
using Microsoft.Extensions.Logging.Abstractions;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Broker.Tests;

/// <summary>
/// Nodes started together (<see cref="NodeOptions.ExpectedNodes"/>) wait for each other before
/// their first ownership pass; a node restarted into a farm that is running does not wait for
/// peers that may stay down. Real SQLite farm and container files, nodes in this process.
/// </summary>
public sealed class ExpectedNodesTests : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);
    /// <summary>Far longer than any test: a start that waits it out fails the test's deadline instead.</summary>
    private static readonly TimeSpan LongWait = TimeSpan.FromMinutes(10);
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-expected-nodes-tests", Guid.NewGuid().ToString("N"));
    private readonly List<BrokerNode> _nodes = [];

    private BrokerNode NewNode(long id, int expectedNodes, TimeProvider? leaseClock = null)
    {
        var options = new NodeOptions
        {
            NodeId = id,
            DataDirectory = _directory,
            ExpectedNodes = expectedNodes,
            ExpectedNodesWait = LongWait,
            // A node whose lease clock the test holds still writes no heartbeat: it stays live by its registration.
            NodeTimeout = LongWait,
        };
        var node = new BrokerNode(new SqliteStoreProvider(), options, new BrokerOptions(), TimeProvider.System, NullLogger<BrokerNode>.Instance, leaseClock);
        _nodes.Add(node);
        return node;
    }

    [Fact]
    public async Task ANodeRestartedIntoARunningFarm_StartsWithoutWaitingForAPeerThatIsDown()
    {
        // Node 1 serves the farm's container; node 2 of the three is down.
        var running = NewNode(1, expectedNodes: 1);
        await running.StartAsync("http://test-1", CancellationToken.None);
        var container = await running.CreateContainerAsync(CancellationToken.None);
        await Eventually.UntilAsync(() => running.ServesContainer(container.Id), Deadline, "node 1 serves the container");

        // Node 3, told three nodes start together, finds node 1 serving: it joins at once
        // (before, it waited for a third live node as long as ExpectedNodesWait).
        var restarted = NewNode(3, expectedNodes: 3);
        await restarted.StartAsync("http://test-3", CancellationToken.None).WaitAsync(Deadline);

        Assert.True(running.ServesContainer(container.Id));
    }

    [Fact]
    public async Task NodesStartedTogetherOnAFarmThatRanBefore_WaitForEachOther()
    {
        // The farm ran before: node 1 alone, which owned the container and stopped.
        var before = NewNode(1, expectedNodes: 1);
        await before.StartAsync("http://test-1", CancellationToken.None);
        var container = await before.CreateContainerAsync(CancellationToken.None);
        await Eventually.UntilAsync(() => before.ServesContainer(container.Id), Deadline, "node 1 serves the container");
        await before.DisposeAsync();
        _nodes.Remove(before);

        // Up again with two nodes. Node 1's wait runs on a clock the test moves: it looks again
        // each time the clock passes a fifth of a heartbeat, and only the second node ends it.
        var clock = new FakeTimeProvider(DateTimeOffset.UtcNow);
        var first = NewNode(1, expectedNodes: 2, leaseClock: clock);
        var firstStarted = first.StartAsync("http://test-1", CancellationToken.None);
        for (var i = 0; i < 5; i++)
        {
            await TestClock.AdvanceAndSettleAsync(clock, TimeSpan.FromMilliseconds(100));
            Assert.False(firstStarted.IsCompleted, "node 1 waits while it is the only live node and no peer serves anything");
        }
        Assert.False(first.ServesContainer(container.Id));

        var second = NewNode(2, expectedNodes: 2);
        await second.StartAsync("http://test-2", CancellationToken.None).WaitAsync(Deadline);
        await TestClock.AdvanceAndSettleAsync(clock, TimeSpan.FromMilliseconds(100));
        await firstStarted.WaitAsync(Deadline);
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
