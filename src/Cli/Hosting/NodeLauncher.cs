using System.Diagnostics;
using System.Globalization;

namespace Farm.Cli.Hosting;

/// <summary>A node process that 'farm up' started, listening on loopback at the port it was given.</summary>
public sealed class LaunchedNode(int nodeId, Process process, int port, string? logFile, long logOffset) : IDisposable
{
    public int NodeId { get; } = nodeId;

    public Process Process { get; } = process;

    public int Port { get; } = port;

    /// <summary>Where the node serves gRPC (a node started without --host listens on 127.0.0.1).</summary>
    public string Address => string.Create(CultureInfo.InvariantCulture, $"http://127.0.0.1:{Port}");

    /// <summary>Where a detached node's output goes; null when it shares our terminal.</summary>
    public string? LogFile { get; } = logFile;

    /// <summary>Length of the log before this start, so a failure shows only this run's lines.</summary>
    public long LogOffset { get; } = logOffset;

    public void Dispose() => Process.Dispose();
}

/// <summary>
/// Finds the node host (Farm.Gateway.dll) and starts node processes:
/// <c>dotnet Farm.Gateway.dll --node-id N --data DIR --port P [--metrics-port P] [--amqp-port P] [--store postgres --farm-connection CS]</c>.
/// </summary>
public static class NodeLauncher
{
    public const string NodeDllEnvironmentVariable = "FARM_NODE_DLL";
    public const string NodeDllName = "Farm.Gateway.dll";

    /// <summary>This CLI's own farm.dll, which the nodes run for the dashboard's process controls.</summary>
    private static string CliDll => Path.Combine(AppContext.BaseDirectory, "farm.dll");

    /// <summary>
    /// $FARM_NODE_DLL; else next to farm.dll (a single publish folder); else the build layout
    /// src/Cli/bin/&lt;Configuration&gt;/&lt;tfm&gt;/farm.dll -> src/Gateway/bin/&lt;Configuration&gt;/&lt;tfm&gt;/Farm.Gateway.dll.
    /// </summary>
    public static string FindNodeDll()
    {
        var fromEnvironment = Environment.GetEnvironmentVariable(NodeDllEnvironmentVariable);
        if (!string.IsNullOrWhiteSpace(fromEnvironment))
        {
            return File.Exists(fromEnvironment)
                ? Path.GetFullPath(fromEnvironment)
                : throw new CliException(ExitCodes.Error, $"{NodeDllEnvironmentVariable}={fromEnvironment} does not exist.");
        }

        var cliDirectory = new DirectoryInfo(AppContext.BaseDirectory);
        var candidates = new List<string> { Path.Combine(cliDirectory.FullName, NodeDllName) };

        var tfm = cliDirectory;
        var configuration = tfm.Parent;
        var srcDirectory = configuration?.Parent?.Parent?.Parent;
        if (configuration is not null && srcDirectory is not null)
        {
            candidates.Add(Path.Combine(srcDirectory.FullName, "Gateway", "bin", configuration.Name, tfm.Name, NodeDllName));
        }

        return candidates.FirstOrDefault(File.Exists)
            ?? throw new CliException(
                ExitCodes.Error,
                $"The node host {NodeDllName} was not found (looked in {string.Join(", ", candidates)}); build it with ./farm, or set {NodeDllEnvironmentVariable}.");
    }

    /// <summary>
    /// Starts a node that outlives this command: its own session (setsid), so a Ctrl+C or a closed
    /// terminal does not reach it, stdin from /dev/null and its output appended to its log file.
    /// The shell execs setsid, which execs dotnet, so the pid we get is the node's.
    /// </summary>
    public static LaunchedNode StartDetached(string nodeDll, int nodeId, FarmDataDirectory data, int port, NodeStore store, int metricsPort = 0, MessageCacheSizes? messageCache = null, int amqpPort = 0, int expectedNodes = 1)
    {
        if (OperatingSystem.IsWindows())
        {
            throw new CliException(ExitCodes.Error, "farm up --detach needs a Unix shell; run farm up in the foreground instead.");
        }

        Directory.CreateDirectory(data.LogsDirectory);
        var logFile = data.LogFile(nodeId);
        var header = string.Create(CultureInfo.InvariantCulture, $"--- farm up: node {nodeId} starting at {DateTimeOffset.UtcNow:O} ---{Environment.NewLine}");
        var logOffset = File.Exists(logFile) ? new FileInfo(logFile).Length : 0;
        File.AppendAllText(logFile, header);

        var setsid = FindOnPath("setsid");
        var startInfo = new ProcessStartInfo("/bin/sh") { UseShellExecute = false };
        startInfo.ArgumentList.Add("-c");
        startInfo.ArgumentList.Add(setsid is null
            ? "log=$1; shift; exec \"$@\" </dev/null >>\"$log\" 2>&1"
            : "log=$1; shift; exec \"$0\" \"$@\" </dev/null >>\"$log\" 2>&1");
        startInfo.ArgumentList.Add(setsid ?? "farm-node");
        startInfo.ArgumentList.Add(logFile);
        AddNodeCommand(startInfo, nodeDll, nodeId, data, port, store, metricsPort, messageCache, amqpPort, expectedNodes);

        var process = Process.Start(startInfo)
            ?? throw new CliException(ExitCodes.Error, $"Could not start node {nodeId}.");
        return new LaunchedNode(nodeId, process, port, logFile, logOffset);
    }

    /// <summary>
    /// Starts a node as our child in our process group (a Ctrl+C reaches it too). Its log lines go
    /// to our stderr as they come, so stdout carries only the connection string.
    /// </summary>
    public static LaunchedNode StartForeground(string nodeDll, int nodeId, FarmDataDirectory data, int port, NodeStore store, int metricsPort = 0, MessageCacheSizes? messageCache = null, int amqpPort = 0, int expectedNodes = 1)
    {
        var startInfo = new ProcessStartInfo(DotnetHost())
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        startInfo.ArgumentList.Add(nodeDll);
        AddNodeArguments(startInfo, nodeId, data, port, store, metricsPort, messageCache, amqpPort, expectedNodes);

        var process = new Process { StartInfo = startInfo };
        process.OutputDataReceived += (_, e) => ForwardLine(e.Data);
        process.ErrorDataReceived += (_, e) => ForwardLine(e.Data);
        if (!process.Start())
        {
            process.Dispose();
            throw new CliException(ExitCodes.Error, $"Could not start node {nodeId}.");
        }

        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        return new LaunchedNode(nodeId, process, port, logFile: null, logOffset: 0);
    }

    private static void ForwardLine(string? line)
    {
        if (line is not null)
        {
            Console.Error.WriteLine(line);
        }
    }

    /// <summary>The last lines a node wrote in this run, for an error report.</summary>
    public static IReadOnlyList<string> ReadLogTail(LaunchedNode node, int maxLines = 20)
    {
        if (node.LogFile is null || !File.Exists(node.LogFile))
        {
            return [];
        }

        using var stream = new FileStream(node.LogFile, FileMode.Open, FileAccess.Read, FileShare.ReadWrite);
        stream.Seek(Math.Min(node.LogOffset, stream.Length), SeekOrigin.Begin);
        using var reader = new StreamReader(stream);
        var lines = new Queue<string>();
        while (reader.ReadLine() is { } line)
        {
            lines.Enqueue(line);
            if (lines.Count > maxLines)
            {
                lines.Dequeue();
            }
        }

        return [.. lines];
    }

    private static void AddNodeCommand(ProcessStartInfo startInfo, string nodeDll, int nodeId, FarmDataDirectory data, int port, NodeStore store, int metricsPort, MessageCacheSizes? messageCache, int amqpPort, int expectedNodes)
    {
        startInfo.ArgumentList.Add(DotnetHost());
        startInfo.ArgumentList.Add(nodeDll);
        AddNodeArguments(startInfo, nodeId, data, port, store, metricsPort, messageCache, amqpPort, expectedNodes);
    }

    private static void AddNodeArguments(ProcessStartInfo startInfo, int nodeId, FarmDataDirectory data, int port, NodeStore store, int metricsPort, MessageCacheSizes? messageCache, int amqpPort, int expectedNodes)
    {
        // Started together with others: it waits for them before taking its share (NodeOptions.ExpectedNodes).
        if (expectedNodes > 1)
        {
            startInfo.ArgumentList.Add("--expected-nodes");
            startInfo.ArgumentList.Add(expectedNodes.ToString(CultureInfo.InvariantCulture));
        }

        startInfo.ArgumentList.Add("--node-id");
        startInfo.ArgumentList.Add(nodeId.ToString(CultureInfo.InvariantCulture));
        startInfo.ArgumentList.Add("--data");
        startInfo.ArgumentList.Add(data.Root);
        startInfo.ArgumentList.Add("--port");
        startInfo.ArgumentList.Add(port.ToString(CultureInfo.InvariantCulture));
        // The dashboard's kill / pause / resume / stop / start run this CLI (farm node VERB N), as an operator would.
        if (File.Exists(CliDll))
        {
            startInfo.ArgumentList.Add("--farm-cli");
            startInfo.ArgumentList.Add(CliDll);
        }
        // Without one the node picks a free port for its Prometheus endpoint (farm status shows it).
        if (metricsPort > 0)
        {
            startInfo.ArgumentList.Add("--metrics-port");
            startInfo.ArgumentList.Add(metricsPort.ToString(CultureInfo.InvariantCulture));
        }

        // Without one the node's AMQP listener picks a free port (farm status and farm connection-string --amqp show it).
        if (amqpPort > 0)
        {
            startInfo.ArgumentList.Add("--amqp-port");
            startInfo.ArgumentList.Add(amqpPort.ToString(CultureInfo.InvariantCulture));
        }

        if (messageCache?.PerEntityMb is { } perEntityMb)
        {
            startInfo.ArgumentList.Add("--message-cache-size-per-entity");
            startInfo.ArgumentList.Add(perEntityMb.ToString(CultureInfo.InvariantCulture));
        }
        if (messageCache?.PerNodeMb is { } perNodeMb)
        {
            startInfo.ArgumentList.Add("--message-cache-size-per-node");
            startInfo.ArgumentList.Add(perNodeMb.ToString(CultureInfo.InvariantCulture));
        }

        // The SQLite default adds nothing, so a SQLite node's command line is what it always was.
        if (store.IsPostgres)
        {
            startInfo.ArgumentList.Add("--store");
            startInfo.ArgumentList.Add(NodeStore.Postgres);
            startInfo.ArgumentList.Add("--farm-connection");
            startInfo.ArgumentList.Add(store.FarmConnection!);
        }
    }

    /// <summary>The dotnet host running us (so the node runs on the same runtime), else dotnet on PATH.</summary>
    private static string DotnetHost()
    {
        var self = Environment.ProcessPath;
        if (self is not null && Path.GetFileNameWithoutExtension(self).Equals("dotnet", StringComparison.OrdinalIgnoreCase))
        {
            return self;
        }

        var root = Environment.GetEnvironmentVariable("DOTNET_ROOT");
        if (!string.IsNullOrEmpty(root))
        {
            var candidate = Path.Combine(root, OperatingSystem.IsWindows() ? "dotnet.exe" : "dotnet");
            if (File.Exists(candidate))
            {
                return candidate;
            }
        }

        return FindOnPath(OperatingSystem.IsWindows() ? "dotnet.exe" : "dotnet") ?? "dotnet";
    }

    private static string? FindOnPath(string program)
    {
        var path = Environment.GetEnvironmentVariable("PATH") ?? string.Empty;
        foreach (var directory in path.Split(Path.PathSeparator, StringSplitOptions.RemoveEmptyEntries))
        {
            var candidate = Path.Combine(directory, program);
            if (File.Exists(candidate))
            {
                return candidate;
            }
        }

        return null;
    }
}
