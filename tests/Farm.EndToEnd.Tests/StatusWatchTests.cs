using Farm.Client;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// `farm status --watch` on a real 3-node farm: a node killed with SIGKILL is said to stop
/// heartbeating, and its container is said to fail over to a survivor, with how long it was
/// without a live owner (issue "Watch and steer the farm").
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class StatusWatchTests(ITestOutputHelper output)
{
    [Fact]
    public async Task StatusWatch_SaysANodeWasKilled_AndWhereItsContainerWent()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateContainerAsync();
        await admin.CreateContainerAsync();
        var container = await LocalFarm.WaitForContainerOwnedByAsync(admin, node: 2);

        // Redirected, it prints the status once, then one line per change: a timeline.
        // Killed only once the watch has had its first look: a SQLite farm's survivors take a killed
        // node's containers within a fraction of a second, before a watch that starts late would look.
        var firstLook = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var watching = farm.RunWatchingAsync(
            line => { if (line.StartsWith("Containers per live node", StringComparison.Ordinal)) firstLook.TrySetResult(); },
            "status", "--watch", "--interval", "0.25", "--count", "60");
        await Task.WhenAny(firstLook.Task, watching).WaitAsync(TimeSpan.FromSeconds(60));
        Assert.True(firstLook.Task.IsCompleted, $"the watch printed no status: {(watching.IsCompleted ? await watching : null)}");
        await farm.KillNodeAsync(2);
        var result = await watching;
        output.WriteLine(result.Stdout);

        Assert.True(result.ExitCode == 0, result.ToString());
        Assert.Contains("CONTAINER  OWNER", result.Stdout, StringComparison.Ordinal);
        Assert.Matches(@"\d\d:\d\d:\d\d\.\d{3}  node 2 stopped heartbeating", result.Stdout);
        Assert.Matches($@"\d\d:\d\d:\d\d\.\d{{3}}  container {container.Id}: node 2 -> node [13] at epoch \d+, failed over; without a live owner for about \d+\.\d s", result.Stdout);
        // A SQLite farm's survivors tell the crash by node 2's process lock, not only by its heartbeats lapsing.
        var survivorLogs = string.Join('\n', new[] { 1, 3 }.Select(n => File.ReadAllText(Path.Combine(farm.DataDirectory, "logs", $"node-{n}.log"))));
        Assert.Contains("Node 2's process", survivorLogs, StringComparison.Ordinal);
        Assert.Contains("is gone (its lock is free): released its containers", survivorLogs, StringComparison.Ordinal);
    }

    [Fact]
    public async Task StatusWatch_WithJson_PrintsOneLookPerLine_AndRefusesABadInterval()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 1);

        var looks = await farm.RunAsync("status", "--watch", "--json", "--interval", "0.2", "--count", "3");
        var refused = await farm.RunAsync("status", "--watch", "--interval", "0");

        Assert.True(looks.ExitCode == 0, looks.ToString());
        var lines = looks.Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal(3, lines.Length);
        Assert.All(lines, line =>
        {
            using var look = System.Text.Json.JsonDocument.Parse(line);
            Assert.Equal(1, look.RootElement.GetProperty("status").GetProperty("nodes").GetArrayLength());
            Assert.Equal(System.Text.Json.JsonValueKind.Array, look.RootElement.GetProperty("changes").ValueKind);
        });
        Assert.NotEqual(0, refused.ExitCode);
        Assert.Contains("--interval must be between 0.1 and 3600 seconds", refused.Stderr, StringComparison.Ordinal);
    }
}
