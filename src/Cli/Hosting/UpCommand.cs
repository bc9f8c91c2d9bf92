using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm up [--nodes N] [--port P] [--detach]`: starts the farm's node processes on a data
/// directory, waits until they serve, records them in farm.json and prints the connection string
/// (the only thing written to stdout, so <c>export FARM_CONNECTION=$(./farm up --detach)</c> works).
/// </summary>
public static class UpCommand
{
    public const int DefaultPort = 5480;

    /// <summary>How long the nodes get to start serving.</summary>
    public static readonly TimeSpan StartTimeout = TimeSpan.FromSeconds(60);

    // Issue 3 brings the 3-node farm; until then more than one node is refused up front.
    private const int MaxSupportedNodes = 1;

    public static Command Create()
    {
        var nodes = new Option<int>("--nodes")
        {
            Description = "Number of broker nodes",
            HelpName = "N",
            DefaultValueFactory = _ => 1,
        };
        var port = new Option<int>("--port")
        {
            Description = "Port of node 1 (node N listens on port + N - 1); 0 lets each node pick a free port",
            HelpName = "PORT",
            DefaultValueFactory = _ => DefaultPort,
        };
        var detach = new Option<bool>("--detach")
        {
            Description = "Start the farm in the background and return once it is ready",
        };

        var command = new Command("up", "Stand up a farm on the data directory and print its connection string")
        {
            nodes,
            port,
            detach,
        };
        command.SetAction((parseResult, cancellationToken) => RunAsync(
            new FarmDataDirectory(CliContext.ResolveDataDirectory(parseResult)),
            parseResult.GetValue(nodes),
            parseResult.GetValue(port),
            parseResult.GetValue(detach),
            cancellationToken));
        return command;
    }

    private static async Task<int> RunAsync(FarmDataDirectory data, int nodeCount, int port, bool detach, CancellationToken cancellationToken)
    {
        if (nodeCount < 1)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--nodes must be at least 1, not {nodeCount}."));
        }

        if (nodeCount > MaxSupportedNodes)
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--nodes {nodeCount} is not supported yet: this version runs a 1-node farm (--nodes 1)."));
        }

        if (port is < 0 or > 65535 || (port > 0 && port + nodeCount - 1 > 65535))
        {
            throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--port must be between 0 and 65535, not {port}."));
        }

        var nodeDll = NodeLauncher.FindNodeDll();
        using var dataLock = data.AcquireLock();
        RefuseIfRunning(data);
        RefuseIfPortsTaken(port, nodeCount);
        RemoveStaleNodeFiles(data);

        var launched = new List<LaunchedNode>();
        try
        {
            for (var nodeId = 1; nodeId <= nodeCount; nodeId++)
            {
                var nodePort = port == 0 ? 0 : port + nodeId - 1;
                launched.Add(detach
                    ? NodeLauncher.StartDetached(nodeDll, nodeId, data, nodePort)
                    : NodeLauncher.StartForeground(nodeDll, nodeId, data, nodePort));
            }

            var nodeFiles = await WaitUntilReadyAsync(data, launched, cancellationToken);
            var record = new FarmStateRecord
            {
                ConnectionString = "Endpoint=" + string.Join(',', nodeFiles.Select(n => n.Address)),
                State = FarmState.Running,
                Nodes = [.. nodeFiles.Select(n => new FarmNodeEntry(n.NodeId, n.Pid, n.Address))],
                StartedAt = DateTimeOffset.UtcNow,
                Detached = detach,
            };
            FarmStateFile.Write(data, record);
            await Console.Out.WriteLineAsync(record.ConnectionString);

            if (detach)
            {
                foreach (var node in launched)
                {
                    await Console.Error.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.NodeId}: pid {node.Process.Id}, log {node.LogFile}"));
                }

                return ExitCodes.Ok;
            }

            // The lock is only for starting; 'farm down' from another terminal may stop this farm.
            await dataLock.DisposeAsync();
            return await RunInForegroundAsync(data, record, launched, cancellationToken);
        }
        catch
        {
            // A farm that did not come up must not be left half-running.
            await StopLaunchedAsync(launched);
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

        // A node can be running without farm.json saying so, if an earlier 'farm up' died midway.
        foreach (var nodeId in data.ListNodeIds())
        {
            if (NodeFileRecord.TryRead(data.NodeFile(nodeId)) is { } file
                && NodeProcesses.IsFarmNode(file.Pid)
                && state?.Nodes.Any(n => n.Pid == file.Pid) != true)
            {
                running.Add(string.Create(CultureInfo.InvariantCulture, $"node {file.NodeId} pid {file.Pid} at {file.Address}"));
            }
        }

        if (running.Count > 0)
        {
            throw new CliException(ExitCodes.Error, $"A farm is already running on {data.Root} ({string.Join("; ", running)}); stop it with ./farm down first.");
        }
    }

    /// <summary>A taken port would only show as a node crash; say so up front instead.</summary>
    private static void RefuseIfPortsTaken(int port, int nodeCount)
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
                throw new CliException(ExitCodes.Error, string.Create(CultureInfo.InvariantCulture, $"Port {nodePort} is already in use (another farm?); pick a free one with --port, or --port 0 for any."));
            }
        }
    }

    private static void RemoveStaleNodeFiles(FarmDataDirectory data)
    {
        // After a crash the node files of the dead nodes remain; a new node writes its own.
        foreach (var nodeId in data.ListNodeIds())
        {
            File.Delete(data.NodeFile(nodeId));
        }
    }

    /// <summary>
    /// Waits until every node has written its node file and the farm answers GetStatus. Fails as soon
    /// as a node process exits, with the end of its log.
    /// </summary>
    private static async Task<IReadOnlyList<NodeFileRecord>> WaitUntilReadyAsync(FarmDataDirectory data, IReadOnlyList<LaunchedNode> launched, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        var files = new NodeFileRecord?[launched.Count];
        while (true)
        {
            cancellationToken.ThrowIfCancellationRequested();
            for (var i = 0; i < launched.Count; i++)
            {
                var node = launched[i];
                if (node.Process.HasExited)
                {
                    throw NodeFailed(node, string.Create(CultureInfo.InvariantCulture, $"exited with code {node.Process.ExitCode} before it was ready"));
                }

                files[i] ??= NodeFileRecord.TryRead(data.NodeFile(node.NodeId));
            }

            if (files.All(f => f is not null))
            {
                var ready = files.Select(f => f!).ToList();
                var remaining = StartTimeout - clock.Elapsed;
                if (await FarmProbe.IsServingAsync(ready[0].Address, TimeSpan.FromSeconds(Math.Clamp(remaining.TotalSeconds, 0.5, 5)), cancellationToken))
                {
                    return ready;
                }
            }

            if (clock.Elapsed >= StartTimeout)
            {
                var waitingFor = Array.FindIndex(files, f => f is null);
                throw NodeFailed(launched[Math.Max(waitingFor, 0)], string.Create(CultureInfo.InvariantCulture, $"was not ready within {StartTimeout.TotalSeconds:0} s"));
            }

            await Task.Delay(TimeSpan.FromMilliseconds(100), cancellationToken);
        }
    }

    private static CliException NodeFailed(LaunchedNode node, string what)
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
