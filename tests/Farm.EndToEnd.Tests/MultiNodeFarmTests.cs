using Farm.Testing;
using System.Diagnostics;
using System.Text.Json;
using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// `farm up --nodes 3` and `farm node kill|start|pause|resume N` with real processes. These prove
/// the CLI's side only (processes, pids, farm.json, status); containers moving between nodes are
/// the chaos tests' business.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class MultiNodeFarmTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    [Fact]
    public async Task UpWithThreeNodes_StartsThreeProcesses_ListsThreeEndpoints_AndDownStopsThemAll()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);

        Assert.Equal(3, farm.Endpoints.Count);
        Assert.All(farm.Endpoints, e => Assert.StartsWith("http://127.0.0.1:", e, StringComparison.Ordinal));
        Assert.Equal(3, farm.Endpoints.Distinct().Count());

        var pids = new List<int>();
        using (var record = JsonDocument.Parse(await File.ReadAllTextAsync(Path.Combine(farm.DataDirectory, "farm.json"))))
        {
            Assert.Equal(farm.ConnectionString, record.RootElement.GetProperty("connection_string").GetString());
            var nodes = record.RootElement.GetProperty("nodes").EnumerateArray().ToList();
            Assert.Equal([1, 2, 3], nodes.Select(n => n.GetProperty("id").GetInt32()));
            Assert.Equal(farm.Endpoints, nodes.Select(n => n.GetProperty("address").GetString()));
            foreach (var node in nodes)
            {
                var pid = node.GetProperty("pid").GetInt32();
                Assert.True(LocalFarm.IsRunning(pid), $"node {node.GetProperty("id")} (pid {pid}) is not running");
                Assert.EndsWith(":" + node.GetProperty("port").GetInt32(), node.GetProperty("address").GetString(), StringComparison.Ordinal);
                Assert.True(File.Exists(node.GetProperty("log_file").GetString()), "the node's log file is missing");
                pids.Add(pid);
            }
        }

        Assert.Equal(3, pids.Distinct().Count());

        using (var status = await farm.StatusJsonAsync())
        {
            var nodes = status.RootElement.GetProperty("nodes").EnumerateArray().ToList();
            Assert.Equal([1L, 2L, 3L], nodes.Select(n => n.GetProperty("id").GetInt64()));
            Assert.All(nodes, n => Assert.Equal("active", n.GetProperty("state").GetString()));
            Assert.All(nodes, n => Assert.Equal("running", n.GetProperty("process_state").GetString()));
            Assert.Equal(pids, nodes.Select(n => n.GetProperty("pid").GetInt32()));
            Assert.Equal(farm.Endpoints, nodes.Select(n => n.GetProperty("address").GetString()!.TrimEnd('/')));
            Assert.All(nodes, n => Assert.Equal(JsonValueKind.Number, n.GetProperty("heartbeat_age_ms").ValueKind));

            // Every container is counted once: on its owner or as unowned.
            var containers = status.RootElement.GetProperty("containers").GetArrayLength();
            var byNode = status.RootElement.GetProperty("containers_by_node").EnumerateArray().ToList();
            Assert.Equal([1L, 2L, 3L], byNode.Where(n => n.GetProperty("live").GetBoolean()).Select(n => n.GetProperty("node_id").GetInt64()));
            Assert.Equal(containers, byNode.Sum(n => n.GetProperty("containers").GetInt64()) + status.RootElement.GetProperty("unowned_containers").GetInt64());
        }

        var table = await farm.RunAsync("status");
        Assert.True(table.ExitCode == 0, table.ToString());
        Assert.Contains("Containers per live node: node 1: ", table.Stdout, StringComparison.Ordinal);
        Assert.Contains("PROCESS", table.Stdout, StringComparison.Ordinal);

        // Every endpoint serves the farm, not only the first.
        foreach (var endpoint in farm.Endpoints)
        {
            using var admin = new FarmAdministrationClient("Endpoint=" + endpoint);
            var farmStatus = await admin.GetFarmStatusAsync();
            Assert.Equal(3, farmStatus.Nodes.Count);
        }

        await farm.DownAsync(kill: false);
        Assert.DoesNotContain(pids, LocalFarm.IsRunning);
        using (var record = JsonDocument.Parse(await File.ReadAllTextAsync(Path.Combine(farm.DataDirectory, "farm.json"))))
        {
            Assert.Equal("stopped", record.RootElement.GetProperty("state").GetString());
        }
    }

    /// <summary>
    /// A 3-node farm started again (`farm down`, then `farm up --nodes 3`) is balanced as soon as it
    /// is up: its nodes start together and wait for each other, so each takes its share, once (each
    /// container's epoch one higher), and nothing is handed over afterwards. Before, node 1 came up
    /// first, took all six and handed four back one at a time over about 20 s (epochs two higher).
    /// </summary>
    [Fact]
    public async Task UpAgainWithThreeNodes_IsBalancedAtOnce_EachContainerTakenOnce()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        var created = await farm.RunAsync("container", "create", "--count", "5");
        Assert.True(created.ExitCode == 0, $"farm container create failed: {created}");
        Dictionary<long, (long Owner, long Epoch)> before = [];
        await Eventually.UntilAsync(async () =>
        {
            using var status = await farm.StatusJsonAsync();
            before = Containers(status);
            return before.Count == 6 && before.Values.GroupBy(c => c.Owner).All(g => g.Key > 0 && g.Count() == 2) && before.Values.Select(c => c.Owner).Distinct().Count() == 3;
        }, TimeSpan.FromSeconds(60), "six containers, two on each node");
        await farm.DownAsync(kill: false);

        await farm.UpAsync(nodes: 3);

        using var after = await farm.StatusJsonAsync();
        var now = Containers(after);
        Assert.Equal([2, 2, 2], now.Values.GroupBy(c => c.Owner).Where(g => g.Key > 0).Select(g => g.Count()));
        Assert.Equal(before.ToDictionary(c => c.Key, c => c.Value.Epoch + 1), now.ToDictionary(c => c.Key, c => c.Value.Epoch));

        static Dictionary<long, (long Owner, long Epoch)> Containers(JsonDocument status) =>
            status.RootElement.GetProperty("containers").EnumerateArray().ToDictionary(
                c => c.GetProperty("id").GetInt64(),
                c => (c.GetProperty("owner_node") is { ValueKind: JsonValueKind.Number } owner ? owner.GetInt64() : 0, c.GetProperty("epoch").GetInt64()));
    }

    [Fact]
    public async Task NodeKill_ThenNodeStart_BringsTheNodeBackOnItsPort_WithANewPid()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        var oldPid = farm.NodePid(2)!.Value;
        var others = new[] { farm.NodePid(1)!.Value, farm.NodePid(3)!.Value };

        await farm.KillNodeAsync(2);

        Assert.Null(farm.NodePid(2));
        Assert.All(others, pid => Assert.True(LocalFarm.IsRunning(pid), $"pid {pid} died with node 2"));
        using (var status = await farm.StatusJsonAsync())
        {
            var node2 = NodeOf(status, 2);
            Assert.Equal("exited", node2.GetProperty("process_state").GetString());
        }

        var again = await farm.RunAsync("node", "kill", "2");
        CliErrorTests.AssertOneLineError(again, 1);
        Assert.Contains("not running", again.Stderr, StringComparison.Ordinal);

        var newPid = await farm.StartNodeAsync(2);

        Assert.NotEqual(oldPid, newPid);
        await WaitForStatusAsync(farm, status =>
        {
            var node2 = NodeOf(status, 2);
            return node2.GetProperty("pid").GetInt32() == newPid
                && node2.GetProperty("state").GetString() == "active"
                && node2.GetProperty("process_state").GetString() == "running"
                && node2.GetProperty("address").GetString()!.TrimEnd('/') == farm.Endpoints[1];
        }, "node 2 is active again with its new pid on its old address");

        using (var admin = new FarmAdministrationClient("Endpoint=" + farm.Endpoints[1]))
        {
            Assert.Equal(3, (await admin.GetFarmStatusAsync()).Nodes.Count);
        }

        var twice = await farm.RunAsync("node", "start", "2");
        CliErrorTests.AssertOneLineError(twice, 1);
        Assert.Contains("already running", twice.Stderr, StringComparison.Ordinal);
        Assert.Equal(newPid, farm.NodePid(2));

        await farm.DownAsync(kill: false);
        Assert.False(LocalFarm.IsRunning(newPid));
    }

    [Fact]
    public async Task NodePause_StopsTheProcess_NodeResume_RunsItAgain_AndDownStopsAPausedNode()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        var pid = farm.NodePid(2)!.Value;

        await farm.PauseNodeAsync(2);

        Assert.Equal('T', LocalFarm.ProcessStateLetter(pid));
        using (var status = await farm.StatusJsonAsync())
        {
            Assert.Equal("paused", NodeOf(status, 2).GetProperty("process_state").GetString());
            Assert.Equal("running", NodeOf(status, 1).GetProperty("process_state").GetString());
        }

        await farm.ResumeNodeAsync(2);

        Assert.NotEqual('T', LocalFarm.ProcessStateLetter(pid));
        Assert.Equal(pid, farm.NodePid(2));
        using (var status = await farm.StatusJsonAsync())
        {
            Assert.Equal("running", NodeOf(status, 2).GetProperty("process_state").GetString());
        }

        // Running again means serving again.
        using (var admin = new FarmAdministrationClient("Endpoint=" + farm.Endpoints[1]))
        {
            Assert.Equal(3, (await admin.GetFarmStatusAsync()).Nodes.Count);
        }

        // A paused node is resumed by 'farm down' so it stops gracefully rather than after the timeout.
        await farm.PauseNodeAsync(3);
        Assert.Equal('T', LocalFarm.ProcessStateLetter(farm.NodePid(3)!.Value));
        var pids = farm.NodePids();
        var down = await farm.RunAsync("down");
        Assert.True(down.ExitCode == 0, down.ToString());
        Assert.DoesNotContain("killed", down.Stdout, StringComparison.Ordinal);
        Assert.DoesNotContain(pids, LocalFarm.IsRunning);
    }

    [Fact]
    public async Task NodeCommands_WithBadNodeIds_ExitWith2_AndNotRunningNodes_ExitWith1()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        var pids = farm.NodePids();

        foreach (var verb in new[] { "kill", "pause", "resume", "stop", "start" })
        {
            var unknown = await farm.RunAsync("node", verb, "7");
            CliErrorTests.AssertOneLineError(unknown, 2);
            Assert.Contains("no node 7", unknown.Stderr, StringComparison.Ordinal);
        }

        CliErrorTests.AssertOneLineError(await farm.RunAsync("node", "kill", "0"), 2);
        CliErrorTests.AssertOneLineError(await farm.RunAsync("node", "kill", "two"), 2);
        CliErrorTests.AssertOneLineError(await farm.RunAsync("node", "kill"), 2);
        CliErrorTests.AssertOneLineError(await farm.RunAsync("node", "explode", "1"), 2);
        Assert.All(pids, pid => Assert.True(LocalFarm.IsRunning(pid), $"pid {pid} was hurt by a bad command"));

        var stop = await farm.RunAsync("node", "stop", "3");
        Assert.True(stop.ExitCode == 0, stop.ToString());
        var pause = await farm.RunAsync("node", "pause", "3");
        CliErrorTests.AssertOneLineError(pause, 1);
        Assert.Contains("not running", pause.Stderr, StringComparison.Ordinal);

        await farm.DownAsync(kill: true);
        var afterDown = await farm.RunAsync("node", "start", "1");
        CliErrorTests.AssertOneLineError(afterDown, 1);
        Assert.Contains("stopped", afterDown.Stderr, StringComparison.Ordinal);

        await using var empty = LocalFarm.Create();
        CliErrorTests.AssertOneLineError(await empty.RunAsync("node", "kill", "1"), 4);
    }

    private static JsonElement NodeOf(JsonDocument status, long nodeId)
        => status.RootElement.GetProperty("nodes").EnumerateArray().Single(n => n.GetProperty("id").GetInt64() == nodeId);

    /// <summary>Polls `farm status --json` until the condition holds or the deadline passes.</summary>
    private static async Task WaitForStatusAsync(LocalFarm farm, Func<JsonDocument, bool> condition, string what)
    {
        var last = string.Empty;
        var held = await Eventually.HoldsWithinAsync(async () =>
        {
            using var status = await farm.StatusJsonAsync();
            last = status.RootElement.GetRawText();
            return condition(status);
        }, Patience, poll: TimeSpan.FromMilliseconds(200));
        if (!held)
        {
            throw new TimeoutException($"Timed out after {Patience} waiting until {what}; last status: {last}");
        }
    }
}
