using Farm.Cli.Hosting;
using Farm.Client;

namespace Farm.Cli.Tests;

/// <summary>
/// Which nodes `farm status` counts as live: active and heartbeating within the node timeout. A
/// node whose process was killed where the CLI cannot see it (a container) keeps its "active" row
/// for a while; its stale heartbeat is what tells.
/// </summary>
public sealed class StatusViewTests
{
    private static FarmNodeProperties Node(long id, double heartbeatSeconds, string state = "active") => new()
    {
        Id = id,
        State = state,
        Address = $"http://node{id}:5480",
        HeartbeatAge = TimeSpan.FromSeconds(heartbeatSeconds),
        ProcessId = 1,
        MetricsUrl = $"http://node{id}:9100/metrics",
    };

    [Fact]
    public void ANodeWithAStaleHeartbeat_IsNotLive_AndTheSummaryAndDashboardLineSaySo()
    {
        var status = new FarmStatusProperties
        {
            Nodes = [Node(1, 0.2), Node(2, 12.5), Node(3, 0.4, state: "stopped")],
            Containers =
            [
                new ContainerProperties { Id = 1, OwnerNode = 1, Epoch = 1, Store = "postgres" },
                new ContainerProperties { Id = 2, OwnerNode = 2, Epoch = 1, Store = "postgres" },
            ],
        };

        var view = StatusView.From(status);

        Assert.Equal([(1L, true), (2L, false)], view.ContainersByNode.Select(n => (n.NodeId, n.Live)));
        Assert.Equal("Containers per live node: node 1: 1; on nodes not live: node 2: 1; unowned: 0", view.Summary());
        Assert.Contains("Dashboard: http://node1:9100/ ", view.ToText(), StringComparison.Ordinal);
    }
}
