using System.Collections.Concurrent;
using System.Diagnostics;
using System.Reflection;

namespace Farm.Perf;

/// <summary>
/// One farm node as the real process (<c>dotnet Farm.Gateway.dll --node-id N --data DIR --port P</c>,
/// as `farm up` starts it). It serves once it has written <c>DIR/nodes/node-N.json</c>
/// (<c>{"address","pid"}</c>). Every node process started here is also killed when the load
/// generator exits, however it exits.
/// </summary>
internal sealed class NodeProcess : IDisposable
{
    private static readonly TimeSpan StartTimeout = TimeSpan.FromSeconds(60);
    private static readonly ConcurrentDictionary<NodeProcess, byte> Live = new();
    private const int LogLinesKept = 40;

    /// <summary>When set, every node's log lines are also appended to DIR/node-N.log (they carry timestamps): to see where a figure's time went.</summary>
    private static readonly string? LogDirectory = Environment.GetEnvironmentVariable("FARM_PERF_NODE_LOGS");

    /// <summary>
    /// <c>FARM_PERF_NODE_ENV="NAME=VALUE;NAME=VALUE"</c>: environment variables for the nodes only (a
    /// runtime setting such as <c>DOTNET_GCgen0size</c> compared on the node without changing the
    /// load generator, which the nodes otherwise inherit from).
    /// </summary>
    private static readonly string? NodeEnvironment = Environment.GetEnvironmentVariable("FARM_PERF_NODE_ENV");

    private readonly Process _process;
    private readonly Queue<string> _log = new();

    static NodeProcess()
    {
        // Ctrl+C, SIGTERM, an unhandled exception: no node outlives the load generator.
        AppDomain.CurrentDomain.ProcessExit += (_, _) => KillAll();
        AppDomain.CurrentDomain.UnhandledException += (_, _) => KillAll();
    }

    private NodeProcess(long nodeId, Process process)
    {
        NodeId = nodeId;
        _process = process;
    }

    public long NodeId { get; }

    /// <summary>The node's gRPC address (http://127.0.0.1:port), known once it serves.</summary>
    public string Address { get; private set; } = string.Empty;

    public int ProcessId => _process.Id;

    public bool HasExited => _process.HasExited;

    /// <summary>Starts node <paramref name="nodeId"/> and waits until it serves.</summary>
    public static async Task<NodeProcess> StartAsync(long nodeId, string dataDirectory, int port, CancellationToken cancellationToken, IReadOnlyList<string>? extraArguments = null)
    {
        var nodeDll = NodeDllPath();
        if (!File.Exists(nodeDll))
        {
            throw new InvalidOperationException($"the node host {nodeDll} is not built; run: dotnet build src/Gateway -c Release");
        }

        // The port is chosen here (a free one for 0), so the address is known before the node
        // starts; it serves once its standard gRPC health service says SERVING.
        if (port == 0)
        {
            port = FreePortBelowEphemeralRange();
        }

        var address = $"http://127.0.0.1:{port}";
        var startInfo = new ProcessStartInfo("dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            // Not the data directory: the node's host watches its working directory (its content
            // root) for configuration changes, and every write to a container database there would
            // wake that watcher (about 5% of a core under load). --data says where the data goes.
            WorkingDirectory = Path.GetDirectoryName(Path.GetFullPath(nodeDll)) ?? dataDirectory,
        };
        foreach (var argument in new[] { nodeDll, "--node-id", nodeId.ToString(System.Globalization.CultureInfo.InvariantCulture), "--data", dataDirectory, "--port", port.ToString(System.Globalization.CultureInfo.InvariantCulture) })
        {
            startInfo.ArgumentList.Add(argument);
        }

        foreach (var argument in extraArguments ?? [])
        {
            startInfo.ArgumentList.Add(argument);
        }

        startInfo.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        foreach (var setting in (NodeEnvironment ?? "").Split(';', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
        {
            var equals = setting.IndexOf('=', StringComparison.Ordinal);
            if (equals <= 0)
            {
                throw new InvalidOperationException($"FARM_PERF_NODE_ENV: '{setting}' is not NAME=VALUE");
            }
            startInfo.Environment[setting[..equals]] = setting[(equals + 1)..];
        }
        var process = Process.Start(startInfo) ?? throw new InvalidOperationException($"could not start node {nodeId}");
        var node = new NodeProcess(nodeId, process);
        Live[node] = 0;
        process.ErrorDataReceived += (_, e) => node.Keep(e.Data);
        process.OutputDataReceived += (_, e) => node.Keep(e.Data);
        process.BeginErrorReadLine();
        process.BeginOutputReadLine();

        try
        {
            var clock = Stopwatch.StartNew();
            while (clock.Elapsed < StartTimeout)
            {
                if (process.HasExited)
                {
                    throw new InvalidOperationException($"node {nodeId} exited with code {process.ExitCode} before serving: {node.LogTail()}");
                }

                if (await IsServingAsync(address, cancellationToken).ConfigureAwait(false))
                {
                    node.Address = address;
                    return node;
                }

                await Task.Delay(50, cancellationToken).ConfigureAwait(false);
            }

            throw new TimeoutException($"node {nodeId} did not serve within {StartTimeout.TotalSeconds} s: {node.LogTail()}");
        }
        catch
        {
            node.Dispose();
            throw;
        }
    }

    /// <summary>SIGKILL: no goodbye, no handover; returns once the process is gone.</summary>
    public void Kill()
    {
        try
        {
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: false);
            }

            _process.WaitForExit(10_000);
        }
        catch (InvalidOperationException)
        {
            // Already gone.
        }
    }

    /// <summary>The last lines the node printed (stdout and stderr), for error messages.</summary>
    public string LogTail()
    {
        lock (_log)
        {
            return string.Join(Environment.NewLine, _log).Trim();
        }
    }

    public void Dispose()
    {
        Kill();
        Live.TryRemove(this, out _);
        _process.Dispose();
    }

    private static void KillAll()
    {
        foreach (var node in Live.Keys)
        {
            try
            {
                node.Kill();
            }
            catch (Exception e) when (e is InvalidOperationException or System.ComponentModel.Win32Exception)
            {
                // Best effort while the process exits.
            }
        }
    }

    private void Keep(string? line)
    {
        if (line is null)
        {
            return;
        }

        lock (_log)
        {
            if (LogDirectory is not null)
            {
                Directory.CreateDirectory(LogDirectory);
                File.AppendAllText(Path.Combine(LogDirectory, $"node-{NodeId}.log"), line + Environment.NewLine);
            }
            _log.Enqueue(line);
            while (_log.Count > LogLinesKept)
            {
                _log.Dequeue();
            }
        }
    }

    /// <summary>
    /// A free port below the kernel's ephemeral range: one from that range, released here and bound
    /// by the node a moment later, could meanwhile go to any outgoing connection (as `farm up` found).
    /// </summary>
    private static int FreePortBelowEphemeralRange()
    {
        var low = 32768;
        try
        {
            low = int.Parse(File.ReadAllText("/proc/sys/net/ipv4/ip_local_port_range").Split((char[])['\t', ' ', '\n'], StringSplitOptions.RemoveEmptyEntries)[0], System.Globalization.CultureInfo.InvariantCulture);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException)
        {
            // Not Linux: the usual lower bound.
        }
        for (var attempt = 0; attempt < 1000 && low > 10100; attempt++)
        {
            var candidate = Random.Shared.Next(10000, low);
            try
            {
                var listener = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, candidate);
                listener.Start();
                listener.Stop();
                return candidate;
            }
            catch (System.Net.Sockets.SocketException)
            {
                // Taken: try another.
            }
        }
        var probe = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, 0);
        probe.Start();
        var port = ((System.Net.IPEndPoint)probe.LocalEndpoint).Port;
        probe.Stop();
        return port;
    }

    private static async Task<bool> IsServingAsync(string address, CancellationToken cancellationToken)
    {
        using var channel = Farm.Contracts.FarmChannels.Create(new Uri(address));
        try
        {
            var answer = await new Grpc.Health.V1.Health.HealthClient(channel).CheckAsync(
                new Grpc.Health.V1.HealthCheckRequest(), deadline: DateTime.UtcNow.AddSeconds(2), cancellationToken: cancellationToken).ConfigureAwait(false);
            return answer.Status == Grpc.Health.V1.HealthCheckResponse.Types.ServingStatus.Serving;
        }
        catch (Grpc.Core.RpcException) when (!cancellationToken.IsCancellationRequested)
        {
            return false;
        }
    }

    /// <summary>
    /// The node to start: <c>FARM_PERF_NODE_DLL</c> when set (to compare another build of the node
    /// with the same load generator), else the Farm.Gateway.dll built along with this project.
    /// </summary>
    private static string NodeDllPath()
    {
        if (Environment.GetEnvironmentVariable("FARM_PERF_NODE_DLL") is { Length: > 0 } overridden)
        {
            return overridden;
        }

        var fromBuild = typeof(NodeProcess).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .FirstOrDefault(a => a.Key == "FarmNodeDll")?.Value;
        return fromBuild ?? Path.Combine(AppContext.BaseDirectory, "Farm.Gateway.dll");
    }
}
