using System.Diagnostics;
using System.Text.Json;
using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A farm on a fresh temporary data directory, driven through the real `farm` command
/// (<c>dotnet farm.dll ... --data DIR</c>) on port 0. Disposing it kills whatever node is left
/// (SIGKILL) and deletes the directory, also when the test failed.
/// </summary>
internal sealed class LocalFarm : IAsyncDisposable
{
    public static readonly TimeSpan CommandTimeout = TimeSpan.FromSeconds(120);

    private LocalFarm(string dataDirectory) => DataDirectory = dataDirectory;

    public string DataDirectory { get; }

    /// <summary>The connection string the last successful 'farm up' printed.</summary>
    public string ConnectionString { get; private set; } = string.Empty;

    /// <summary>The node's address (http://127.0.0.1:port) from the connection string.</summary>
    public string Address => ConnectionString["Endpoint=".Length..].Split(';', ',')[0];

    /// <summary>A data directory with no farm on it yet.</summary>
    public static LocalFarm Create() =>
        new(Directory.CreateTempSubdirectory("farm-e2e-").FullName);

    /// <summary>A farm that is up (detached).</summary>
    public static async Task<LocalFarm> StartAsync()
    {
        var farm = Create();
        try
        {
            await farm.UpAsync();
            return farm;
        }
        catch
        {
            await farm.DisposeAsync();
            throw;
        }
    }

    /// <summary>Runs `farm ARGS --data DIR` with FARM_CONNECTION and FARM_HOME cleared.</summary>
    public Task<ProcessResult> RunAsync(params string[] arguments) => RunCliAsync([.. arguments, "--data", DataDirectory]);

    /// <summary>Runs `farm ARGS` as is, in an empty environment as far as Farm is concerned.</summary>
    public static Task<ProcessResult> RunCliAsync(IEnumerable<string> arguments) =>
        ProcessRunner.RunAsync(
            "dotnet",
            [TestPaths.FarmCliDll, .. arguments],
            CommandTimeout,
            workingDirectory: Path.GetTempPath(),
            environment: new Dictionary<string, string?>
            {
                ["FARM_CONNECTION"] = null,
                ["FARM_HOME"] = null,
                ["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1",
            });

    /// <summary>`farm up --detach --port 0`; asserts it succeeded and keeps the connection string.</summary>
    public async Task UpAsync()
    {
        var result = await RunAsync("up", "--detach", "--port", "0");
        Assert.True(result.ExitCode == 0, $"farm up --detach failed: {result}");
        var lines = result.Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        Assert.True(lines.Length == 1, $"farm up --detach should print only the connection string: {result}");
        Assert.StartsWith("Endpoint=http://", lines[0], StringComparison.Ordinal);
        ConnectionString = lines[0];
    }

    /// <summary>`farm down [--kill]`; asserts it succeeded and the node processes are gone.</summary>
    public async Task DownAsync(bool kill)
    {
        var pids = NodePids();
        var result = kill ? await RunAsync("down", "--kill") : await RunAsync("down");
        Assert.True(result.ExitCode == 0, $"farm down failed: {result}");
        foreach (var pid in pids)
        {
            Assert.False(IsRunning(pid), $"node pid {pid} is still running after farm down");
        }
    }

    /// <summary>The pids farm.json and the node files name (running or not).</summary>
    public IReadOnlyList<int> NodePids()
    {
        var pids = new HashSet<int>();
        var farmFile = Path.Combine(DataDirectory, "farm.json");
        if (File.Exists(farmFile))
        {
            using var document = JsonDocument.Parse(File.ReadAllText(farmFile));
            if (document.RootElement.TryGetProperty("nodes", out var nodes))
            {
                foreach (var node in nodes.EnumerateArray())
                {
                    if (node.TryGetProperty("pid", out var pid) && pid.ValueKind == JsonValueKind.Number)
                    {
                        pids.Add(pid.GetInt32());
                    }
                }
            }
        }

        var nodesDirectory = Path.Combine(DataDirectory, "nodes");
        if (Directory.Exists(nodesDirectory))
        {
            foreach (var file in Directory.EnumerateFiles(nodesDirectory, "node-*.json"))
            {
                try
                {
                    using var document = JsonDocument.Parse(File.ReadAllText(file));
                    if (document.RootElement.TryGetProperty("pid", out var pid) && pid.ValueKind == JsonValueKind.Number)
                    {
                        pids.Add(pid.GetInt32());
                    }
                }
                catch (JsonException)
                {
                    // Half-written by a node that was just killed.
                }
            }
        }

        return [.. pids];
    }

    /// <summary>The queue's message counts, straight from the management API.</summary>
    public async Task<QueueRuntimeProperties> GetQueueCountsAsync(string queue)
    {
        using var admin = new FarmAdministrationClient(ConnectionString);
        return await admin.GetQueueRuntimePropertiesAsync(queue);
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var pid in NodePids())
        {
            KillIfOurs(pid);
        }

        try
        {
            Directory.Delete(DataDirectory, recursive: true);
        }
        catch (IOException)
        {
            // A node that was still dying may hold a file; the temp directory is left behind.
        }

        await Task.CompletedTask;
    }

    /// <summary>True while the process runs (a zombie whose parent does not reap it counts as gone).</summary>
    public static bool IsRunning(int pid)
    {
        try
        {
            using var process = Process.GetProcessById(pid);
            if (process.HasExited)
            {
                return false;
            }
        }
        catch (ArgumentException)
        {
            return false;
        }

        var stat = $"/proc/{pid}/stat";
        if (!File.Exists(stat))
        {
            return !OperatingSystem.IsLinux();
        }

        try
        {
            var text = File.ReadAllText(stat);
            var afterName = text.LastIndexOf(')');
            return afterName < 0 || afterName + 2 >= text.Length || text[afterName + 2] != 'Z';
        }
        catch (IOException)
        {
            return false;
        }
    }

    /// <summary>Kills a leftover node, but only one running on this farm's data directory.</summary>
    private void KillIfOurs(int pid)
    {
        if (!IsRunning(pid))
        {
            return;
        }

        var cmdline = $"/proc/{pid}/cmdline";
        if (File.Exists(cmdline) && !File.ReadAllText(cmdline).Contains(DataDirectory, StringComparison.Ordinal))
        {
            return;
        }

        try
        {
            using var process = Process.GetProcessById(pid);
            process.Kill();
        }
        catch (Exception ex) when (ex is ArgumentException or InvalidOperationException)
        {
            // Gone meanwhile.
        }
    }
}
