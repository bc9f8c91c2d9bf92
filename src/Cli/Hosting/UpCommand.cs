using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using Farm.Cli.EmulatorConfig;
using Farm.Client;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm up [--nodes N] [--port P] [--metrics-port P] [--amqp-port P] [--detach] [--store sqlite|postgres --farm-connection CS]`: starts the farm's node processes on a data
/// directory (node 1 first, then the others together, all sharing the directory), waits until they
/// serve, records them in farm.json and prints the connection string listing every node's endpoint
/// (the only thing written to stdout, so <c>export FARM_CONNECTION=$(./farm up --detach)</c> works).
/// </summary>
public static class UpCommand
{
    public const int DefaultPort = 5480;

    /// <summary>Node 1's AMQP port when --port is the default: AMQP's own port, as Azure's emulator uses.</summary>
    public const int DefaultAmqpPort = 5672;

    /// <summary>How long the nodes get to start serving.</summary>
    public static readonly TimeSpan StartTimeout = TimeSpan.FromSeconds(60);

    /// <summary>The largest --message-cache-size-per-entity and --message-cache-size-per-node, in MB (the node refuses more).</summary>
    public const int MaxMessageCacheMb = 65536;

    /// <summary>At most this many nodes: ports P..P+8, and node ids stay one digit.</summary>
    public const int MaxNodes = 9;

    public static Command Create()
    {
        var nodes = new Option<int>("--nodes")
        {
            Description = "Number of broker nodes, 1 to 9 (each its own process on the same data directory)",
            HelpName = "N",
            DefaultValueFactory = _ => 1,
        };
        var port = new Option<int>("--port")
        {
            Description = "Port of node 1 (node N listens on port + N - 1); 0 lets each node pick a free port",
            HelpName = "PORT",
            DefaultValueFactory = _ => DefaultPort,
        };
        var metricsPort = new Option<int>("--metrics-port")
        {
            Description = "Port of node 1's Prometheus endpoint (node N serves it on metrics-port + N - 1); 0 (the default) lets each node pick a free port, shown by farm status",
            HelpName = "PORT",
            DefaultValueFactory = _ => 0,
        };
        var amqpPort = new Option<int?>("--amqp-port")
        {
            Description = $"Port of node 1's AMQP 1.0 listener (node N listens on amqp-port + N - 1); 0 lets each node pick a free port. Default: {DefaultAmqpPort} with the default --port, else 0",
            HelpName = "PORT",
        };
        var detach = new Option<bool>("--detach")
        {
            Description = "Start the farm in the background and return once it is ready",
        };
        var store = new Option<string>("--store")
        {
            Description = "Where the farm keeps its databases: sqlite (files in the data directory) or postgres (a server; needs --farm-connection)",
            HelpName = "sqlite|postgres",
            DefaultValueFactory = _ => NodeStore.Sqlite,
        };
        var farmConnection = new Option<string?>("--farm-connection")
        {
            Description = "With --store postgres: the farm database's connection string (Host=...;Database=...;Username=...;Password=...). The database must exist; container databases are created next to it",
            HelpName = "CONNECTION_STRING",
        };

        var messageCache = new Option<int?>("--message-cache-size-per-entity")
        {
            Description = "MB of messages each queue or subscription keeps in memory (its head; the rest of a deeper queue stays in its database until read back), for every node of the farm; default 8",
            HelpName = "MB",
        };
        var nodeCache = new Option<int?>("--message-cache-size-per-node")
        {
            Description = "MB of messages all entities of a node keep in memory together (past it, each keeps a small floor and reads the rest back as needed), for every node of the farm; default 256",
            HelpName = "MB",
        };
        var emulatorConfig = ConfigCommands.UpOption();

        var command = new Command("up", "Stand up a farm on the data directory and print its connection string")
        {
            nodes,
            port,
            metricsPort,
            amqpPort,
            detach,
            store,
            farmConnection,
            messageCache,
            nodeCache,
            emulatorConfig,
        };
        command.SetAction((parseResult, cancellationToken) => RunAsync(
            new FarmDataDirectory(CliContext.ResolveDataDirectory(parseResult)),
            parseResult.GetValue(nodes),
            new NodePorts(parseResult.GetValue(port), parseResult.GetValue(metricsPort), AmqpPortFor(parseResult.GetValue(port), parseResult.GetValue(amqpPort))),
            parseResult.GetValue(detach),
            NodeStore.FromOptions(parseResult.GetValue(store), parseResult.GetValue(farmConnection)),
            new MessageCacheSizes(parseResult.GetValue(messageCache), parseResult.GetValue(nodeCache)),
            ConfigCommands.Load(parseResult.GetValue(emulatorConfig)),
            cancellationToken));
        return command;
    }

    /// <summary>
    /// Says where the dashboard is (every node serves it on its HTTP address, beside /metrics), on
    /// stderr so stdout stays the connection string alone. A farm that cannot say is no reason to fail.
    /// </summary>
    private static async Task PrintDashboardAsync(string connectionString, CancellationToken cancellationToken)
    {
        try
        {
            using var admin = new FarmAdministrationClient(connectionString);
            var status = await admin.GetFarmStatusAsync(cancellationToken);
            var urls = status.Nodes.Where(n => !string.IsNullOrEmpty(n.MetricsUrl)).OrderBy(n => n.Id)
                .Select(n => $"node {n.Id}: {DashboardUrl.Of(n.MetricsUrl!)}").ToList();
            if (urls.Count > 0)
            {
                await Console.Error.WriteLineAsync($"dashboard: {string.Join(", ", urls)}");
            }
        }
        catch (Exception e) when (e is FarmException or Grpc.Core.RpcException or TimeoutException)
        {
            await Console.Error.WriteLineAsync($"dashboard: not known yet ({e.Message}); farm status shows it");
        }
    }

    /// <summary>
    /// Says each node's AMQP connection string (signed with RootManageSharedAccessKey), on stderr
    /// beside the dashboard. A node registers its AMQP address in the farm database before it says
    /// it serves, so once every node serves, what the farm database has is what each node does: a
    /// node without an address does not listen for AMQP, and waiting longer would not change that.
    /// </summary>
    private static async Task PrintAmqpAsync(string connectionString, CancellationToken cancellationToken)
    {
        try
        {
            using var admin = new FarmAdministrationClient(connectionString);
            var status = await admin.GetFarmStatusAsync(cancellationToken);
            var root = (await admin.GetSharedAccessPoliciesAsync(cancellationToken)).FirstOrDefault(p => p.Name == RootPolicyName);
            foreach (var node in status.Nodes.Where(n => n.State == StatusView.ActiveState).OrderBy(n => n.Id))
            {
                await Console.Error.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"amqp: node {node.Id}: ") + (node.AmqpAddress, root) switch
                {
                    ({ } address, { } policy) => Security.AmqpConnectionString.For(address, policy),
                    ({ } address, null) => $"{address} (no {RootPolicyName} policy: farm connection-string --amqp --policy NAME)",
                    _ => "not listening for AMQP",
                });
            }
        }
        catch (Exception e) when (e is FarmException or Grpc.Core.RpcException or TimeoutException or CliException)
        {
            await Console.Error.WriteLineAsync($"amqp: not known yet ({e.Message}); farm connection-string --amqp says it");
        }
    }

    private const string RootPolicyName = "RootManageSharedAccessKey";

    /// <summary>
    /// Node 1's AMQP port: the one given; else <see cref="DefaultAmqpPort"/> for a farm on the default
    /// --port, and 0 (each node picks a free port) for any other, so farms started side by side with
    /// --port 0 or ports of their own never collide on 5672.
    /// </summary>
    internal static int AmqpPortFor(int grpcPort, int? amqpPort) => amqpPort ?? (grpcPort == DefaultPort ? DefaultAmqpPort : 0);

    /// <summary>The first node's gRPC and metrics ports; node N listens on each + N - 1 (0: any free port).</summary>
    private static int MetricsPortOf(NodePorts ports, int nodeId) => ports.Metrics == 0 ? 0 : ports.Metrics + nodeId - 1;

    /// <summary>Node N's AMQP port, as <see cref="MetricsPortOf"/>.</summary>
    private static int AmqpPortOf(NodePorts ports, int nodeId) => ports.Amqp == 0 ? 0 : ports.Amqp + nodeId - 1;

    private readonly record struct NodePorts(int Grpc, int Metrics, int Amqp);

    private static async Task<int> RunAsync(FarmDataDirectory data, int nodeCount, NodePorts ports, bool detach, NodeStore store, MessageCacheSizes messageCache, EmulatorConfigFile? emulatorConfig, CancellationToken cancellationToken)
    {
        if (messageCache.PerEntityMb is < 1 or > MaxMessageCacheMb)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--message-cache-size-per-entity must be from 1 to {MaxMessageCacheMb} MB, not {messageCache.PerEntityMb}."));
        }
        if (messageCache.PerNodeMb is < 1 or > MaxMessageCacheMb)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--message-cache-size-per-node must be from 1 to {MaxMessageCacheMb} MB, not {messageCache.PerNodeMb}."));
        }

        var port = ports.Grpc;
        if (nodeCount is < 1 or > MaxNodes)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--nodes must be from 1 to {MaxNodes}, not {nodeCount}."));
        }

        if (port is < 0 or > 65535)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--port must be between 0 and 65535, not {port}."));
        }

        if (port > 0 && port + nodeCount - 1 > 65535)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--port {port} with --nodes {nodeCount} would need ports up to {port + nodeCount - 1}, past 65535; pick a lower --port, or --port 0."));
        }

        if (ports.Metrics is < 0 or > 65535 || (ports.Metrics > 0 && ports.Metrics + nodeCount - 1 > 65535))
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--metrics-port must be 0, or a port from which {nodeCount} ports up to 65535 follow; got {ports.Metrics}."));
        }

        if (port > 0 && ports.Metrics > 0 && ports.Metrics < port + nodeCount && port < ports.Metrics + nodeCount)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--metrics-port {ports.Metrics} overlaps the gRPC ports {port}-{port + nodeCount - 1}; pick ports apart."));
        }

        if (ports.Amqp is < 0 or > 65535 || (ports.Amqp > 0 && ports.Amqp + nodeCount - 1 > 65535))
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--amqp-port must be 0, or a port from which {nodeCount} ports up to 65535 follow; got {ports.Amqp}."));
        }

        if (port > 0 && ports.Amqp > 0 && ports.Amqp < port + nodeCount && port < ports.Amqp + nodeCount)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--amqp-port {ports.Amqp} overlaps the gRPC ports {port}-{port + nodeCount - 1}; pick ports apart."));
        }

        if (ports.Metrics > 0 && ports.Amqp > 0 && ports.Amqp < ports.Metrics + nodeCount && ports.Metrics < ports.Amqp + nodeCount)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--amqp-port {ports.Amqp} overlaps the metrics ports {ports.Metrics}-{ports.Metrics + nodeCount - 1}; pick ports apart."));
        }

        var nodeDll = NodeLauncher.FindNodeDll();
        using var dataLock = data.AcquireLock();
        RefuseIfRunning(data);
        RefuseIfPortsTaken(port, nodeCount);
        RefuseIfPortsTaken(ports.Metrics, nodeCount, "--metrics-port");
        RefuseIfPortsTaken(ports.Amqp, nodeCount, "--amqp-port");
        // The node ports are chosen here, so the CLI knows every address before a node starts
        // and learns that it serves from its health service; "any free port" is picked now.
        var nodePorts = port == 0 ? PickFreePorts(nodeCount) : [.. Enumerable.Range(port, nodeCount)];

        // A farm that ran here before on the same store has its farm database and containers: its
        // nodes can start together.
        var ranBefore = nodeCount > 1 && TryReadState(data) is { } previous
            && previous.Store == store.Name && previous.FarmConnection == store.FarmConnection;
        var launched = new List<LaunchedNode>();
        FarmStateRecord Record() => new()
        {
            ConnectionString = "Endpoint=" + string.Join(',', launched.Select(n => n.Address)),
            State = FarmState.Running,
            Nodes = [.. launched.Select(n => new FarmNodeEntry(
                n.NodeId,
                n.Process.Id,
                n.Address,
                n.Port,
                n.LogFile,
                MetricsPortOf(ports, n.NodeId) is var metrics and > 0 ? metrics : null,
                AmqpPortOf(ports, n.NodeId) is var amqp and > 0 ? amqp : null))],
            StartedAt = DateTimeOffset.UtcNow,
            Detached = detach,
            Store = store.Name,
            FarmConnection = store.FarmConnection,
            MessageCacheSizePerEntityMb = messageCache.PerEntityMb,
            MessageCacheSizePerNodeMb = messageCache.PerNodeMb,
        };
        try
        {
            LaunchedNode Launch(int nodeId, int expectedNodes)
            {
                var nodePort = nodePorts[nodeId - 1];
                var nodeMetricsPort = MetricsPortOf(ports, nodeId);
                var nodeAmqpPort = AmqpPortOf(ports, nodeId);
                var node = detach
                    ? NodeLauncher.StartDetached(nodeDll, nodeId, data, nodePort, store, nodeMetricsPort, messageCache, nodeAmqpPort, expectedNodes)
                    : NodeLauncher.StartForeground(nodeDll, nodeId, data, nodePort, store, nodeMetricsPort, messageCache, nodeAmqpPort, expectedNodes);
                launched.Add(node);
                // Recorded at once: a 'farm up' interrupted from here on leaves nodes that
                // 'farm down' finds and a second 'farm up' refuses to start over.
                FarmStateFile.Write(data, Record());
                return node;
            }

            if (ranBefore)
            {
                // All at once, each told how many start with it: they wait for each other, then each
                // takes its share of the containers, instead of node 1 taking them all and handing
                // them back one at a time (about 5 s each).
                await WaitUntilReadyAsync([.. Enumerable.Range(1, nodeCount).Select(id => Launch(id, nodeCount))], launched, cancellationToken);
            }
            else
            {
                // Node 1 first: it creates the farm database and the first container; the others join it.
                var first = Launch(1, expectedNodes: 1);
                await WaitUntilReadyAsync([first], launched, cancellationToken);
                if (nodeCount > 1)
                {
                    var others = Enumerable.Range(2, nodeCount - 1).Select(id => Launch(id, expectedNodes: 1)).ToList();
                    await WaitUntilReadyAsync(others, launched, cancellationToken);
                }
            }

            var record = Record();
            FarmStateFile.Write(data, record);
            await ConfigCommands.ApplyOnUpAsync(emulatorConfig, record.ConnectionString, cancellationToken);
            await Console.Out.WriteLineAsync(record.ConnectionString);
            await PrintDashboardAsync(record.ConnectionString, cancellationToken);
            await PrintAmqpAsync(record.ConnectionString, cancellationToken);

            if (detach)
            {
                if (store.IsPostgres)
                {
                    await Console.Error.WriteLineAsync($"store: {store.Describe()}");
                }

                foreach (var node in launched)
                {
                    await Console.Error.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.NodeId}: pid {node.Process.Id}, log {node.LogFile}"));
                }

                return ExitCodes.Ok;
            }

            // The lock is only for starting; 'farm down' from another terminal may stop this farm.
            await dataLock.DisposeAsync();
            return nodeCount == 1
                ? await RunInForegroundAsync(data, record, launched, cancellationToken)
                : await RunFarmInForegroundAsync(data, launched, cancellationToken);
        }
        catch
        {
            // A farm that did not come up must not be left half-running.
            await StopLaunchedAsync(launched);
            if (launched.Count > 0)
            {
                FarmStateFile.Write(data, Record() with { State = FarmState.Stopped, StoppedAt = DateTimeOffset.UtcNow, Nodes = [.. Record().Nodes.Select(n => n with { Pid = null })] });
            }

            throw;
        }
        finally
        {
            foreach (var node in launched)
            {
                node.Dispose();
            }
        }
    }

    private static void RefuseIfRunning(FarmDataDirectory data)
    {
        var running = new List<string>();
        var state = FarmStateFile.TryRead(data);
        foreach (var node in state?.Nodes ?? [])
        {
            if (node.Pid is { } pid && NodeProcesses.IsFarmNode(pid))
            {
                running.Add(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} pid {pid} at {node.Address}"));
            }
        }

        if (running.Count > 0)
        {
            throw new CliException(ExitCodes.Error, $"A farm is already running on {data.Root} ({string.Join("; ", running)}); stop it with ./farm down first.");
        }
    }

    /// <summary>A taken port would only show as a node crash; say so up front instead.</summary>
    internal static void RefuseIfPortsTaken(int port, int nodeCount, string option = "--port")
    {
        if (port == 0)
        {
            return;
        }

        for (var nodePort = port; nodePort < port + nodeCount; nodePort++)
        {
            try
            {
                var listener = new TcpListener(IPAddress.Loopback, nodePort);
                listener.Start();
                listener.Stop();
            }
            catch (SocketException)
            {
                throw new CliException(ExitCodes.Error, string.Create(CultureInfo.InvariantCulture, $"Port {nodePort} is already in use (another farm?); pick a free one with {option}, or {option} 0 for any."));
            }
        }
    }

    /// <summary>
    /// <paramref name="count"/> ports free right now, for the nodes of a `--port 0` farm. They are
    /// taken below the kernel's ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range):
    /// a port from that range, released here and bound by the node a moment later, could meanwhile
    /// be handed to any outgoing connection or port-0 listener, another node's among them (it
    /// happened: "address already in use"). Below the range only an explicit bind can take it.
    /// </summary>
    private static int[] PickFreePorts(int count)
    {
        var (low, _) = EphemeralRange();
        const int lowest = 10000;
        var ports = new List<int>();
        for (var attempt = 0; attempt < 1000 && ports.Count < count && low - lowest > 100; attempt++)
        {
            var candidate = Random.Shared.Next(lowest, low);
            if (!ports.Contains(candidate) && IsFree(candidate))
            {
                ports.Add(candidate);
            }
        }

        if (ports.Count < count)
        {
            // No room below the range: the OS's free ports, held together so they differ.
            var listeners = Enumerable.Range(0, count - ports.Count).Select(_ => new TcpListener(IPAddress.Loopback, 0)).ToList();
            try
            {
                listeners.ForEach(l => l.Start());
                ports.AddRange(listeners.Select(l => ((IPEndPoint)l.LocalEndpoint).Port));
            }
            finally
            {
                listeners.ForEach(l => l.Stop());
            }
        }

        return [.. ports];
    }

    private static (int Low, int High) EphemeralRange()
    {
        try
        {
            var parts = File.ReadAllText("/proc/sys/net/ipv4/ip_local_port_range").Split((char[])['\t', ' ', '\n'], StringSplitOptions.RemoveEmptyEntries);
            return (int.Parse(parts[0], CultureInfo.InvariantCulture), int.Parse(parts[1], CultureInfo.InvariantCulture));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException)
        {
            // Not Linux, or not readable: the range IANA suggests.
            return (49152, 65535);
        }
    }

    private static bool IsFree(int port)
    {
        try
        {
            var listener = new TcpListener(IPAddress.Loopback, port);
            listener.Start();
            listener.Stop();
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    /// <summary>
    /// Waits until each node of <paramref name="waitFor"/> answers SERVING on the standard gRPC
    /// health service at its address. Fails as soon as any node of <paramref name="watch"/> exits,
    /// with the end of its log.
    /// </summary>
    internal static async Task WaitUntilReadyAsync(IReadOnlyList<LaunchedNode> waitFor, IReadOnlyList<LaunchedNode> watch, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        var serving = new bool[waitFor.Count];
        while (true)
        {
            cancellationToken.ThrowIfCancellationRequested();
            foreach (var node in watch.Concat(waitFor).Distinct())
            {
                if (node.Process.HasExited)
                {
                    throw NodeFailed(node, string.Create(CultureInfo.InvariantCulture, $"exited with code {node.Process.ExitCode} before it was ready"));
                }
            }

            var remaining = StartTimeout - clock.Elapsed;
            var probeTimeout = TimeSpan.FromSeconds(Math.Clamp(remaining.TotalSeconds, 0.5, 5));
            var probes = Enumerable.Range(0, waitFor.Count)
                .Where(i => !serving[i])
                .Select(async i => serving[i] = await FarmProbe.IsServingAsync(waitFor[i].Address, probeTimeout, cancellationToken));
            await Task.WhenAll(probes);
            if (serving.All(s => s))
            {
                return;
            }

            if (clock.Elapsed >= StartTimeout)
            {
                throw NodeFailed(waitFor[Array.FindIndex(serving, s => !s)], string.Create(CultureInfo.InvariantCulture, $"was not ready within {StartTimeout.TotalSeconds:0} s"));
            }

            await Task.Delay(TimeSpan.FromMilliseconds(100), cancellationToken);
        }
    }

    internal static CliException NodeFailed(LaunchedNode node, string what)
    {
        var message = string.Create(CultureInfo.InvariantCulture, $"Node {node.NodeId} {what}.");
        var tail = NodeLauncher.ReadLogTail(node);
        if (tail.Count > 0)
        {
            // The one error line stays last and readable; the log goes before it.
            Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture, $"--- last lines of {node.LogFile} ---"));
            foreach (var line in tail)
            {
                Console.Error.WriteLine(line);
            }

            Console.Error.WriteLine("---");
            message += $" See {node.LogFile}.";
        }

        return new CliException(ExitCodes.Error, message);
    }

    /// <summary>Serves until Ctrl+C / SIGTERM (then stops the nodes gracefully) or until a node dies.</summary>
    private static async Task<int> RunInForegroundAsync(FarmDataDirectory data, FarmStateRecord record, IReadOnlyList<LaunchedNode> launched, CancellationToken cancellationToken)
    {
        await Console.Error.WriteLineAsync("The farm is running; press Ctrl+C to stop it.");
        var anyExited = Task.WhenAny(launched.Select(n => n.Process.WaitForExitAsync(CancellationToken.None)));
        var cancelled = Task.Delay(Timeout.Infinite, cancellationToken);
        var first = await Task.WhenAny(anyExited, cancelled);

        var exitCode = ExitCodes.Ok;
        if (first == anyExited)
        {
            // Exit code 0 is a node that was asked to stop (e.g. 'farm down' from another terminal).
            var dead = launched.First(n => n.Process.HasExited);
            if (dead.Process.ExitCode == 0)
            {
                await Console.Error.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"Node {dead.NodeId} stopped; stopping the farm."));
            }
            else
            {
                await Console.Error.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"error: node {dead.NodeId} exited with code {dead.Process.ExitCode}; stopping the farm."));
                exitCode = ExitCodes.Error;
            }
        }
        else
        {
            await Console.Error.WriteLineAsync("Stopping the farm...");
        }

        await StopLaunchedAsync(launched);
        FarmStateFile.Write(data, record with { State = FarmState.Stopped, StoppedAt = DateTimeOffset.UtcNow });
        return exitCode;
    }

    /// <summary>
    /// A farm of several nodes in the foreground: a node that dies (e.g. 'farm node kill 2') is
    /// reported and the farm keeps serving, since that is what several nodes are for; 'farm node
    /// start' may start it again. Serves until Ctrl+C / SIGTERM (then stops every node gracefully,
    /// the restarted ones too) or until no node is left (e.g. 'farm down' from another terminal).
    /// </summary>
    private static async Task<int> RunFarmInForegroundAsync(FarmDataDirectory data, IReadOnlyList<LaunchedNode> launched, CancellationToken cancellationToken)
    {
        await Console.Error.WriteLineAsync("The farm is running; press Ctrl+C to stop it.");
        var reported = new HashSet<int>();
        var exitCode = ExitCodes.Ok;
        while (!cancellationToken.IsCancellationRequested)
        {
            foreach (var node in launched)
            {
                if (node.Process.HasExited && reported.Add(node.NodeId))
                {
                    await Console.Error.WriteLineAsync(node.Process.ExitCode == 0
                        ? string.Create(CultureInfo.InvariantCulture, $"Node {node.NodeId} stopped.")
                        : string.Create(CultureInfo.InvariantCulture, $"Node {node.NodeId} exited with code {node.Process.ExitCode}; the other nodes keep serving (./farm node start {node.NodeId} starts it again)."));
                }
            }

            if (LiveNodePids(data, launched).Count == 0)
            {
                var state = TryReadState(data);
                var stoppedByDown = state?.State == FarmState.Stopped;
                exitCode = stoppedByDown || launched.All(n => n.Process.ExitCode == 0) ? ExitCodes.Ok : ExitCodes.Error;
                await Console.Error.WriteLineAsync(exitCode == ExitCodes.Ok
                    ? "Every node has stopped; the farm is down."
                    : "error: every node has exited; the farm is down.");
                break;
            }

            try
            {
                await Task.Delay(TimeSpan.FromMilliseconds(250), cancellationToken);
            }
            catch (OperationCanceledException)
            {
                break;
            }
        }

        if (cancellationToken.IsCancellationRequested)
        {
            await Console.Error.WriteLineAsync("Stopping the farm...");
        }

        var pids = LiveNodePids(data, launched);
        if (pids.Count > 0)
        {
            // Not cancellable: this runs when the command is already being cancelled.
            await NodeProcesses.StopAsync(pids, kill: false, CancellationToken.None);
        }

        if (TryReadState(data) is { } current)
        {
            FarmStateFile.Write(data, current with
            {
                State = FarmState.Stopped,
                StoppedAt = current.State == FarmState.Running ? DateTimeOffset.UtcNow : current.StoppedAt,
                Nodes = [.. current.Nodes.Select(n => n with { Pid = null })],
            });
        }

        return exitCode;
    }

    /// <summary>The live node processes of this farm: the ones we started and the ones farm.json names now.</summary>
    private static List<int> LiveNodePids(FarmDataDirectory data, IReadOnlyList<LaunchedNode> launched)
    {
        var pids = new List<int>();
        foreach (var node in launched)
        {
            if (!node.Process.HasExited)
            {
                pids.Add(node.Process.Id);
            }
        }

        foreach (var node in TryReadState(data)?.Nodes ?? [])
        {
            if (node.Pid is { } pid && !pids.Contains(pid) && NodeProcesses.IsFarmNode(pid))
            {
                pids.Add(pid);
            }
        }

        return pids;
    }

    /// <summary>farm.json while the farm runs; a file another command is replacing counts as absent for this round.</summary>
    private static FarmStateRecord? TryReadState(FarmDataDirectory data)
    {
        try
        {
            return FarmStateFile.TryRead(data);
        }
        catch (Exception ex) when (ex is CliException or IOException)
        {
            return null;
        }
    }

    private static async Task StopLaunchedAsync(IReadOnlyList<LaunchedNode> launched)
    {
        var pids = new List<int>();
        foreach (var node in launched)
        {
            try
            {
                if (!node.Process.HasExited)
                {
                    pids.Add(node.Process.Id);
                }
            }
            catch (InvalidOperationException)
            {
                // Never started.
            }
        }

        if (pids.Count > 0)
        {
            // Not cancellable: this runs when the command is already being cancelled.
            await NodeProcesses.StopAsync(pids, kill: false, CancellationToken.None);
        }
    }
}
