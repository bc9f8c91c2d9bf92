using Farm.Cli.Hosting;

namespace Farm.Cli.Tests;

/// <summary>What `farm status --watch` says changed between two looks at the farm.</summary>
public sealed class StatusWatchTests
{
    private static readonly DateTimeOffset Start = new(2026, 11, 25, 7, 0, 0, TimeSpan.Zero);

    private static NodeView Node(long id, long heartbeatAgeMs, string state = "active", string? process = "running") =>
        new(id, state, $"http://127.0.0.1:548{id}", heartbeatAgeMs, 100 + (int)id, process);

    private static StatusView Farm(NodeView[] nodes, params (long Id, long? Owner, long Epoch)[] containers) =>
        new("test", 0, nodes, [.. containers.Select(c => new ContainerView(c.Id, c.Owner, c.Epoch, 1, null, "sqlite"))], [], 0);

    [Fact]
    public void TheFirstLook_ReportsNothing()
    {
        var watch = new StatusWatch();

        Assert.Empty(watch.Next(Farm([Node(1, 100)], (1, 1, 1)), Start));
    }

    [Fact]
    public void AFailover_SaysTheOwnerWentSilent_ThenWhoTookTheContainer_AndHowLongItWasWithoutOne()
    {
        var watch = new StatusWatch();
        watch.Next(Farm([Node(1, 100), Node(2, 200)], (1, 2, 1)), Start);

        var silent = watch.Next(Farm([Node(1, 100), Node(2, 3_500)], (1, 2, 1)), Start.AddSeconds(1));
        var taken = watch.Next(Farm([Node(1, 100), Node(2, 4_000)], (1, 1, 2)), Start.AddSeconds(1.5));

        Assert.Equal("node 2 stopped heartbeating (last 3.5 s ago)", Assert.Single(silent).Text);
        Assert.Equal("container 1: node 2 -> node 1 at epoch 2, failed over; without a live owner for about 4.0 s", Assert.Single(taken).Text);
    }

    [Fact]
    public void AFailoverBetweenTwoLooks_TakesTheDurationFromTheOldOwnersLastHeartbeat()
    {
        var watch = new StatusWatch();
        watch.Next(Farm([Node(1, 100), Node(2, 200)], (1, 2, 1)), Start);

        var changes = watch.Next(Farm([Node(1, 100), Node(2, 3_300)], (1, 1, 2)), Start.AddSeconds(5));

        Assert.Contains("container 1: node 2 -> node 1 at epoch 2, failed over; without a live owner for about 3.3 s", changes.Select(c => c.Text));
    }

    [Fact]
    public void AKilledNodesContainer_ReleasedThenTakenBeforeItsHeartbeatLapses_IsAFailover()
    {
        var watch = new StatusWatch();
        watch.Next(Farm([Node(1, 100), Node(2, 200)], (1, 2, 1)), Start);

        // Its process is gone; a survivor lets go of its container (the process lock told it), then one takes it.
        var exited = watch.Next(Farm([Node(1, 100), Node(2, 400, process: "exited")], (1, 2, 1)), Start.AddSeconds(0.25));
        var released = watch.Next(Farm([Node(1, 100), Node(2, 600, process: "exited")], (1, null, 1)), Start.AddSeconds(0.5));
        var taken = watch.Next(Farm([Node(1, 100), Node(2, 800, process: "exited")], (1, 1, 2)), Start.AddSeconds(0.75));

        Assert.Equal("node 2 process: running -> exited", Assert.Single(exited).Text);
        Assert.Equal("container 1: node 2 -> no owner (released: node 2 is not live)", Assert.Single(released).Text);
        Assert.Equal("container 1: node 2 -> node 1 at epoch 2, failed over; without a live owner for about 0.5 s", Assert.Single(taken).Text);
    }

    [Fact]
    public void AMoveFromALiveOwner_IsAPlannedMove()
    {
        var watch = new StatusWatch();
        watch.Next(Farm([Node(1, 100), Node(2, 200)], (1, 2, 1)), Start);

        var changes = watch.Next(Farm([Node(1, 100), Node(2, 100)], (1, 1, 2)), Start.AddSeconds(1));

        Assert.Equal("container 1: node 2 -> node 1 at epoch 2, moved (the old owner is live: a planned move)", Assert.Single(changes).Text);
    }

    [Fact]
    public void NodesJoiningPausingDrainingAndLeaving_AreSaid()
    {
        var watch = new StatusWatch();
        watch.Next(Farm([Node(1, 100), Node(2, 100)], (1, 1, 1)), Start);

        var changes = watch.Next(Farm([Node(1, 100, state: "draining"), Node(3, 100, process: "paused")], (1, 1, 1), (2, null, 0)), Start.AddSeconds(1));

        Assert.Equal(
            ["node 1: active -> draining", "node 3 joined at http://127.0.0.1:5483", "node 2 left the farm", "container 2 created"],
            changes.Select(c => c.Text));
        Assert.Equal("07:00:01.000  node 1: active -> draining", changes[0].ToString());
    }

    [Fact]
    public void APausedProcess_AndAReleasedContainer_AreSaid()
    {
        var watch = new StatusWatch();
        watch.Next(Farm([Node(1, 100), Node(2, 100)], (1, 2, 1)), Start);

        var changes = watch.Next(Farm([Node(1, 100), Node(2, 100, process: "paused")], (1, null, 1)), Start.AddSeconds(1));

        Assert.Equal(["node 2 process: running -> paused", "container 1: node 2 -> no owner (released)"], changes.Select(c => c.Text));
    }
}
