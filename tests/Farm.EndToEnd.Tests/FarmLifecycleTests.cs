using System.Diagnostics;
using System.Text.Json;

namespace Farm.EndToEnd.Tests;

/// <summary>`farm up`, `farm down` and `farm status` on a data directory.</summary>
[Collection(FarmCollection.Name)]
public sealed class FarmLifecycleTests
{
    [Fact]
    public async Task Up_WritesFarmJson_StatusShowsTheNode_DownStopsIt()
    {
        await using var farm = await LocalFarm.StartAsync();

        using (var record = JsonDocument.Parse(await File.ReadAllTextAsync(Path.Combine(farm.DataDirectory, "farm.json"))))
        {
            Assert.Equal(farm.ConnectionString, record.RootElement.GetProperty("connection_string").GetString());
            Assert.Equal("running", record.RootElement.GetProperty("state").GetString());
            var node = Assert.Single(record.RootElement.GetProperty("nodes").EnumerateArray());
            Assert.Equal(1, node.GetProperty("id").GetInt32());
            Assert.Equal(farm.Address, node.GetProperty("address").GetString());
            Assert.True(LocalFarm.IsRunning(node.GetProperty("pid").GetInt32()));
        }

        var status = await farm.RunAsync("status", "--json");
        Assert.True(status.ExitCode == 0, status.ToString());
        using (var json = JsonDocument.Parse(status.Stdout))
        {
            var node = Assert.Single(json.RootElement.GetProperty("nodes").EnumerateArray());
            Assert.Equal(1, node.GetProperty("id").GetInt64());
            Assert.Equal(farm.Address, node.GetProperty("address").GetString()!.TrimEnd('/'));
            Assert.True(json.RootElement.GetProperty("containers").GetArrayLength() >= 1);
        }

        var table = await farm.RunAsync("status");
        Assert.True(table.ExitCode == 0, table.ToString());
        Assert.Contains("NODE", table.Stdout, StringComparison.Ordinal);
        Assert.Contains("CONTAINER", table.Stdout, StringComparison.Ordinal);

        await farm.DownAsync(kill: false);
        using (var record = JsonDocument.Parse(await File.ReadAllTextAsync(Path.Combine(farm.DataDirectory, "farm.json"))))
        {
            Assert.Equal("stopped", record.RootElement.GetProperty("state").GetString());
        }

        var afterDown = await farm.RunAsync("status");
        CliErrorTests.AssertOneLineError(afterDown, 4);
    }

    /// <summary>
    /// `farm up` keeps its data under the directory it runs in (./.farm by default; these tests run
    /// it in the temporary directory that holds DataDirectory), and its nodes start there. A node must
    /// not watch that directory: the host watches its content root, and every directory under it, for
    /// configuration changes, so each container write woke the watcher (about 5% of a core a node).
    /// </summary>
    [Fact]
    public async Task Up_NodeWatchesNeitherTheDirectoryItStartedIn_NorItsData()
    {
        await using var farm = await LocalFarm.StartAsync();
        var pid = Assert.Single(farm.NodePids());
        Assert.Equal(Path.GetFullPath(Path.GetTempPath()).TrimEnd('/'), Path.GetFullPath(new FileInfo($"/proc/{pid}/cwd").LinkTarget!).TrimEnd('/'));

        var watched = InodesWatchedBy(pid);
        Assert.DoesNotContain(await InodeOfAsync(farm.DataDirectory), watched);
        Assert.DoesNotContain(await InodeOfAsync(Path.GetTempPath()), watched);
    }

    /// <summary>The inodes a process's inotify instances watch (/proc/PID/fdinfo of each inotify descriptor).</summary>
    private static HashSet<ulong> InodesWatchedBy(int pid)
    {
        var inodes = new HashSet<ulong>();
        foreach (var descriptor in Directory.EnumerateFiles($"/proc/{pid}/fd"))
        {
            if (new FileInfo(descriptor).LinkTarget != "anon_inode:inotify")
            {
                continue;
            }

            // "inotify wd:1 ino:2a0c1 sdev:fd00001 mask:..." per watch; ino is hexadecimal.
            foreach (var line in File.ReadLines($"/proc/{pid}/fdinfo/{Path.GetFileName(descriptor)}").Where(l => l.StartsWith("inotify ", StringComparison.Ordinal)))
            {
                var ino = line.Split(' ').Single(field => field.StartsWith("ino:", StringComparison.Ordinal))["ino:".Length..];
                inodes.Add(Convert.ToUInt64(ino, 16));
            }
        }

        return inodes;
    }

    private static async Task<ulong> InodeOfAsync(string path)
    {
        var stat = await ProcessRunner.RunAsync("stat", ["-c", "%i", path], TimeSpan.FromSeconds(10));
        Assert.True(stat.ExitCode == 0, stat.ToString());
        return ulong.Parse(stat.Stdout.Trim(), System.Globalization.CultureInfo.InvariantCulture);
    }

    [Fact]
    public async Task Up_RefusesWhileTheFarmRuns_AndDownTwiceIsHarmless()
    {
        await using var farm = await LocalFarm.StartAsync();
        var pids = farm.NodePids();

        var second = await farm.RunAsync("up", "--detach", "--port", "0");
        Assert.True(second.ExitCode == 1, second.ToString());
        Assert.Contains("already running", second.Stderr, StringComparison.Ordinal);
        Assert.Equal(pids.Order(), farm.NodePids().Order());

        await farm.DownAsync(kill: true);
        var again = await farm.RunAsync("down");
        Assert.True(again.ExitCode == 0, again.ToString());
    }

    /// <summary>
    /// `farm up` records each node in farm.json as it starts it (there is no ready file): a `farm up`
    /// killed before its farm serves leaves nodes that a second `farm up` refuses to start over and
    /// that `farm down` finds and stops.
    /// </summary>
    [Fact]
    public async Task Up_KilledBeforeTheFarmServes_LeavesItsNodesInFarmJson_AndDownStopsThem()
    {
        await using var farm = LocalFarm.Create();
        var startInfo = new ProcessStartInfo("dotnet") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var argument in new[] { TestPaths.FarmCliDll, "up", "--detach", "--port", "0", "--nodes", "3", "--data", farm.DataDirectory })
        {
            startInfo.ArgumentList.Add(argument);
        }

        startInfo.Environment.Remove("FARM_CONNECTION");
        using var up = Process.Start(startInfo)!;
        _ = up.StandardOutput.ReadToEndAsync();
        _ = up.StandardError.ReadToEndAsync();
        await ProcessRunner.WaitUntilAsync(() => farm.NodePids().Any(LocalFarm.IsRunning), LocalFarm.CommandTimeout, "farm.json names a running node");
        up.Kill();
        await up.WaitForExitAsync();
        var started = farm.NodePids();
        Assert.NotEmpty(started);

        var second = await farm.RunAsync("up", "--detach", "--port", "0");
        Assert.True(second.ExitCode == 1, second.ToString());
        Assert.Contains("already running", second.Stderr, StringComparison.Ordinal);

        var down = await farm.RunAsync("down", "--kill");
        Assert.True(down.ExitCode == 0, down.ToString());
        await ProcessRunner.WaitUntilAsync(() => !started.Any(LocalFarm.IsRunning), TimeSpan.FromSeconds(30), "every node farm.json named has stopped");
    }

    [Theory]
    [InlineData("0")]
    [InlineData("10")]
    public async Task Up_WithNodesOutsideOneToNine_IsRefused(string nodes)
    {
        await using var farm = LocalFarm.Create();

        var result = await farm.RunAsync("up", "--nodes", nodes, "--detach", "--port", "0");

        CliErrorTests.AssertOneLineError(result, 2);
        Assert.Contains("--nodes", result.Stderr, StringComparison.Ordinal);
        Assert.False(File.Exists(Path.Combine(farm.DataDirectory, "farm.json")));
    }
}
