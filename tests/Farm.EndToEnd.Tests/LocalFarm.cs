using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Farm.Client;
using Farm.Testing;

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

    /// <summary>Every node's address, in node order, from the connection string.</summary>
    public IReadOnlyList<string> Endpoints => ConnectionString["Endpoint=".Length..].Split(';')[0].Split(',');

    /// <summary>A data directory with no farm on it yet.</summary>
    public static LocalFarm Create() =>
        new(Directory.CreateTempSubdirectory("farm-e2e-").FullName);

    /// <summary>A farm to be kept in <paramref name="dataDirectory"/> (deleted with it at the end).</summary>
    public static LocalFarm On(string dataDirectory) => new(dataDirectory);

    /// <summary>A farm of <paramref name="nodes"/> node processes that is up (detached).</summary>
    public static async Task<LocalFarm> StartAsync(int nodes = 1)
    {
        var farm = Create();
        try
        {
            await farm.UpAsync(nodes);
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

    /// <summary>Runs `farm ARGS --data DIR`, handing each line of its output to <paramref name="onOutputLine"/> as it comes.</summary>
    public Task<ProcessResult> RunWatchingAsync(Action<string> onOutputLine, params string[] arguments) =>
        RunCliAsync([.. arguments, "--data", DataDirectory], onOutputLine);

    /// <summary>Runs `farm ARGS` as is, in an empty environment as far as Farm is concerned.</summary>
    public static Task<ProcessResult> RunCliAsync(IEnumerable<string> arguments, Action<string>? onOutputLine = null) =>
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
            },
            onOutputLine);

    /// <summary>`farm up --detach --port 0 [--nodes N]`; asserts it succeeded and keeps the connection string.</summary>
    public async Task UpAsync(int nodes = 1)
    {
        var result = nodes == 1
            ? await RunAsync("up", "--detach", "--port", "0")
            : await RunAsync("up", "--detach", "--port", "0", "--nodes", nodes.ToString(CultureInfo.InvariantCulture));
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

    /// <summary>Once every container has an owner, one that node <paramref name="node"/> owns (within 60 s).</summary>
    public static async Task<ContainerProperties> WaitForContainerOwnedByAsync(FarmAdministrationClient admin, long node)
    {
        ContainerProperties? owned = null;
        await Eventually.UntilAsync(async () =>
        {
            try
            {
                var containers = await admin.GetContainersAsync();
                owned = containers.All(c => c.OwnerNode is not null) ? containers.FirstOrDefault(c => c.OwnerNode == node) : null;
            }
            catch (FarmException e) when (e.IsTransient)
            {
                // The node asked is starting or between owners: ask again.
            }
            return owned is not null;
        }, TimeSpan.FromSeconds(60), $"node {node} to own a container");
        return owned!;
    }

    /// <summary>`farm node kill N` (SIGKILL); asserts it succeeded and the process is gone.</summary>
    public async Task KillNodeAsync(int nodeId)
    {
        var pid = NodePid(nodeId) ?? throw new InvalidOperationException($"farm.json names no pid for node {nodeId}.");
        await RunNodeCommandAsync("kill", nodeId);
        Assert.False(IsRunning(pid), $"node {nodeId} (pid {pid}) still runs after farm node kill");
    }

    /// <summary>`farm node start N`; asserts it succeeded and returns the node's new pid.</summary>
    public async Task<int> StartNodeAsync(int nodeId)
    {
        await RunNodeCommandAsync("start", nodeId);
        var pid = NodePid(nodeId) ?? throw new InvalidOperationException($"farm node start {nodeId} recorded no pid.");
        Assert.True(IsRunning(pid), $"node {nodeId} (pid {pid}) is not running after farm node start");
        return pid;
    }

    /// <summary>`farm node pause N` (SIGSTOP); asserts it succeeded.</summary>
    public Task PauseNodeAsync(int nodeId) => RunNodeCommandAsync("pause", nodeId);

    /// <summary>
    /// `farm node pause N`, landing outside a SQLite write: a node frozen inside a write transaction
    /// holds that database's write lock, and on a SQLite farm nobody else can write it (take its
    /// containers included) until it resumes (a known limit of a shared database file, in
    /// docs/how-farm-works.md). Tests of what survivors do about a frozen node mean the frozen node
    /// of a farm that can still act: while the paused process holds a POSIX write lock (as
    /// /proc/locks shows it), it is resumed and paused again.
    /// </summary>
    public async Task PauseNodeOutsideAWriteAsync(int nodeId)
    {
        var pid = NodePid(nodeId) ?? throw new InvalidOperationException($"farm.json names no pid for node {nodeId}.");
        for (var attempt = 1; ; attempt++)
        {
            await PauseNodeAsync(nodeId);
            var held = WriteLocksHeldBy(pid);
            if (held.Count == 0)
            {
                return;
            }
            Assert.True(attempt < 50, $"node {nodeId} (pid {pid}) held a write lock at each of {attempt} pauses: {string.Join("; ", held)}");
            await ResumeNodeAsync(nodeId);
        }
    }

    /// <summary>Whether <paramref name="pid"/> is stopped by a signal (state T in /proc/PID/stat), as `farm node pause` leaves it.</summary>
    public static bool IsProcessStopped(int pid)
    {
        var stat = File.ReadAllText($"/proc/{pid.ToString(CultureInfo.InvariantCulture)}/stat");
        // "1234 (name) T ...": the state follows the command name, which may itself hold spaces or parentheses.
        var state = stat[(stat.LastIndexOf(')') + 2)..].Split(' ', 2)[0];
        return state is "T" or "t";
    }

    /// <summary>The POSIX (fcntl) write locks <paramref name="pid"/> holds, as /proc/locks lines: SQLite's, while it writes.</summary>
    public static IReadOnlyList<string> WriteLocksHeldBy(int pid) =>
        [.. File.ReadAllLines("/proc/locks").Where(line =>
        {
            var fields = line.Split(' ', StringSplitOptions.RemoveEmptyEntries);
            // "1: POSIX  ADVISORY  WRITE 1234 fe:00:42 120 120"; flock()s (the node's own process lock) are FLOCK.
            return fields.Length > 4 && fields[1] is "POSIX" or "OFDLCK" && fields[3] == "WRITE"
                && fields[4] == pid.ToString(CultureInfo.InvariantCulture);
        })];

    /// <summary>The last <paramref name="lines"/> lines of node N's log, for a failure message.</summary>
    public string NodeLogTail(int nodeId, int lines = 60)
    {
        var log = Path.Combine(DataDirectory, "logs", $"node-{nodeId}.log");
        return File.Exists(log)
            ? $"--- node-{nodeId}.log ---\n" + string.Join('\n', File.ReadLines(log).TakeLast(lines))
            : $"--- node-{nodeId}.log: none ---";
    }

    /// <summary>`farm node resume N` (SIGCONT); asserts it succeeded.</summary>
    public Task ResumeNodeAsync(int nodeId) => RunNodeCommandAsync("resume", nodeId);

    private async Task RunNodeCommandAsync(string verb, int nodeId)
    {
        var result = await RunAsync("node", verb, nodeId.ToString(CultureInfo.InvariantCulture));
        Assert.True(result.ExitCode == 0, $"farm node {verb} {nodeId} failed: {result}");
    }

    /// <summary>Node N's pid as farm.json records it; null when it has none (killed, stopped, or no such node).</summary>
    public int? NodePid(int nodeId)
    {
        var farmFile = Path.Combine(DataDirectory, "farm.json");
        if (!File.Exists(farmFile))
        {
            return null;
        }

        using var document = JsonDocument.Parse(File.ReadAllText(farmFile));
        foreach (var node in document.RootElement.GetProperty("nodes").EnumerateArray())
        {
            if (node.GetProperty("id").GetInt32() == nodeId)
            {
                return node.TryGetProperty("pid", out var pid) && pid.ValueKind == JsonValueKind.Number ? pid.GetInt32() : null;
            }
        }

        return null;
    }

    /// <summary>`farm status --json`, parsed; asserts it succeeded.</summary>
    public async Task<JsonDocument> StatusJsonAsync()
    {
        var result = await RunAsync("status", "--json");
        Assert.True(result.ExitCode == 0, $"farm status --json failed: {result}");
        return JsonDocument.Parse(result.Stdout);
    }

    /// <summary>The Prometheus text of a one-node farm's node (its metrics URL from `farm status`).</summary>
    public async Task<string> SingleNodeMetricsAsync()
    {
        using var status = await StatusJsonAsync();
        var metrics = new Uri(status.RootElement.GetProperty("nodes").EnumerateArray().Single().GetProperty("metrics_url").GetString()!);
        using var http = new HttpClient();
        return await http.GetStringAsync(metrics);
    }

    /// <summary>Calls of the Messaging method <paramref name="method"/> a one-node farm's node has finished (ASP.NET Core's request count on its /metrics).</summary>
    public async Task<double> MessagingCallsAsync(string method)
    {
        var text = await SingleNodeMetricsAsync();
        var count = new System.Text.RegularExpressions.Regex(
            $@"^http_server_request_duration_seconds_count\{{[^}}]*http_route=""/farm\.v1\.Messaging/{method}""[^}}]*\}} ([0-9.eE+]+)",
            System.Text.RegularExpressions.RegexOptions.Multiline);
        return count.Matches(text).Sum(m => double.Parse(m.Groups[1].Value, CultureInfo.InvariantCulture));
    }

    /// <summary>The state letter in /proc/PID/stat (R, S, T for stopped by SIGSTOP, Z, ...); null when the process is gone.</summary>
    public static char? ProcessStateLetter(int pid)
    {
        try
        {
            var text = File.ReadAllText($"/proc/{pid}/stat");
            var afterName = text.LastIndexOf(')');
            return afterName >= 0 && afterName + 2 < text.Length ? text[afterName + 2] : null;
        }
        catch (IOException)
        {
            return null;
        }
    }

    /// <summary>The pids farm.json names (running or not).</summary>
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
        IReadOnlyList<int> pids;
        try
        {
            pids = NodePids();
        }
        catch (JsonException)
        {
            // farm.json is not a record (what the test may be about): no pid to kill from it.
            pids = [];
        }
        foreach (var pid in pids)
        {
            KillIfOurs(pid);
        }

        KeepLogs();
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

    /// <summary>With FARM_TEST_KEEP_LOGS=DIR, the nodes' logs are copied to DIR/&lt;data directory name&gt;/ before the data goes: for chasing a failure after the run.</summary>
    private void KeepLogs()
    {
        var logs = Path.Combine(DataDirectory, "logs");
        if (Environment.GetEnvironmentVariable("FARM_TEST_KEEP_LOGS") is not { Length: > 0 } keep || !Directory.Exists(logs))
        {
            return;
        }
        var target = Directory.CreateDirectory(Path.Combine(keep, Path.GetFileName(DataDirectory))).FullName;
        foreach (var file in Directory.EnumerateFiles(logs))
        {
            File.Copy(file, Path.Combine(target, Path.GetFileName(file)), overwrite: true);
        }
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
