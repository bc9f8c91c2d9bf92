using System.CommandLine;
using System.Globalization;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm node kill|pause|resume|stop|start|drain N`: chaos and repair for one node of the local farm,
/// by the pid farm.json records. kill is SIGKILL (a crash), pause / resume are SIGSTOP / SIGCONT
/// (a node frozen past its lease), stop is SIGTERM (graceful), start runs node N again with the
/// same id, port, data directory and store, drain hands its containers over one at a time (planned
/// moves) and lets it exit. Each updates farm.json.
/// </summary>
public static partial class NodeCommands
{
    /// <summary>How long a node command waits for another farm command to let go of the lock.</summary>
    private static readonly TimeSpan LockWait = UpCommand.StartTimeout + TimeSpan.FromSeconds(10);

    public static Command Create()
    {
        var node = new Command("node", "Kill, pause, resume, stop, start or drain one node of the local farm (chaos and repair)");
        node.Subcommands.Add(NodeCommand("kill", "Kill node N with SIGKILL (a crash); its containers go to the other nodes", KillAsync));
        node.Subcommands.Add(NodeCommand("pause", "Freeze node N with SIGSTOP (no heartbeats, no writes) until 'farm node resume N'", PauseAsync));
        node.Subcommands.Add(NodeCommand("resume", "Let a paused node N run again (SIGCONT)", ResumeAsync));
        node.Subcommands.Add(NodeCommand("stop", "Stop node N gracefully (SIGTERM; SIGKILL after 15 s)", StopAsync));
        node.Subcommands.Add(NodeCommand("start", "Start node N again (same id, port and data directory) after a kill, stop or drain", StartAsync));
        node.Subcommands.Add(DrainCommand());
        return node;
    }

    private delegate Task<int> NodeAction(FarmDataDirectory data, FarmStateRecord state, FarmNodeEntry node, CancellationToken cancellationToken);

    private static Command NodeCommand(string name, string description, NodeAction action)
    {
        var id = new Argument<int>("N") { Description = "The node's id (1 for the first node)" };
        var engine = new Option<string?>("--engine")
        {
            Description = "The farm runs in containers (deploy/compose.yaml): act on node N's container farm-nodeN through this engine instead of a local process",
            HelpName = "docker|podman",
        };
        var command = new Command(name, description) { id, engine };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var nodeId = parseResult.GetValue(id);
            if (nodeId < 1)
            {
                throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"Node id must be 1 or more, not {nodeId}."));
            }
            if (parseResult.GetValue(engine) is { } engineName)
            {
                return await ContainerNodes.RunAsync(engineName, name, nodeId, cancellationToken);
            }

            var data = new FarmDataDirectory(CliContext.ResolveDataDirectory(parseResult));

            // Before taking the lock, so naming a directory with no farm does not create it.
            _ = FarmStateFile.Read(data);

            await using var dataLock = await data.AcquireLockAsync(LockWait, cancellationToken);
            var state = FarmStateFile.Read(data);
            var node = state.Nodes.FirstOrDefault(n => n.Id == nodeId)
                ?? throw new CliException(
                    ExitCodes.BadInput,
                    string.Create(CultureInfo.InvariantCulture, $"The farm on {data.Root} has no node {nodeId}; its nodes are {string.Join(", ", state.Nodes.Select(n => n.Id))}."));
            return await action(data, state, node, cancellationToken);
        });
        return command;
    }

    private static async Task<int> KillAsync(FarmDataDirectory data, FarmStateRecord state, FarmNodeEntry node, CancellationToken cancellationToken)
    {
        var pid = RunningPid(data, node, "kill");
        await NodeProcesses.StopAsync([pid], kill: true, cancellationToken);
        Forget(data, state, node);
        await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} (pid {pid}) killed (SIGKILL)"));
        return ExitCodes.Ok;
    }

    private static async Task<int> StopAsync(FarmDataDirectory data, FarmStateRecord state, FarmNodeEntry node, CancellationToken cancellationToken)
    {
        var pid = RunningPid(data, node, "stop");
        var forced = await NodeProcesses.StopAsync([pid], kill: false, cancellationToken);
        Forget(data, state, node);
        var how = forced.Count > 0 ? "killed after the graceful timeout" : "stopped";
        await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} (pid {pid}) {how}"));
        return ExitCodes.Ok;
    }

    private static async Task<int> PauseAsync(FarmDataDirectory data, FarmStateRecord state, FarmNodeEntry node, CancellationToken cancellationToken)
    {
        var pid = RunningPid(data, node, "pause");
        if (NodeProcesses.StateOf(pid) == NodeProcessState.Paused)
        {
            await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} (pid {pid}) is already paused"));
            return ExitCodes.Ok;
        }

        await NodeProcesses.PauseAsync(pid, cancellationToken);
        await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} (pid {pid}) paused (SIGSTOP); resume it with ./farm node resume {node.Id}"));
        return ExitCodes.Ok;
    }

    private static async Task<int> ResumeAsync(FarmDataDirectory data, FarmStateRecord state, FarmNodeEntry node, CancellationToken cancellationToken)
    {
        var pid = RunningPid(data, node, "resume");
        if (NodeProcesses.StateOf(pid) != NodeProcessState.Paused)
        {
            await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} (pid {pid}) is not paused; nothing to resume"));
            return ExitCodes.Ok;
        }

        await NodeProcesses.ResumeAsync(pid, cancellationToken);
        await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} (pid {pid}) resumed (SIGCONT)"));
        return ExitCodes.Ok;
    }

    /// <summary>
    /// Starts node N detached, on the port and data directory farm.json records, waits until it
    /// serves, and records its new pid. The farm must be up (its other nodes may all be down).
    /// </summary>
    private static async Task<int> StartAsync(FarmDataDirectory data, FarmStateRecord state, FarmNodeEntry node, CancellationToken cancellationToken)
    {
        if (state.State != FarmState.Running)
        {
            throw new CliException(ExitCodes.Error, $"The farm on {data.Root} is stopped; start it with ./farm up.");
        }

        if (LivePid(data, node) is { } running)
        {
            throw new CliException(ExitCodes.Error, string.Create(CultureInfo.InvariantCulture, $"Node {node.Id} is already running (pid {running}); kill or stop it first."));
        }

        var port = node.ListenPort();
        UpCommand.RefuseIfPortsTaken(port, 1);
        UpCommand.RefuseIfPortsTaken(node.AmqpPort ?? 0, 1, "--amqp-port");
        var nodeDll = NodeLauncher.FindNodeDll();

        using var launched = NodeLauncher.StartDetached(nodeDll, node.Id, data, port, state.NodeStore, node.MetricsPort ?? 0, state.MessageCache, node.AmqpPort ?? 0);
        try
        {
            await UpCommand.WaitUntilReadyAsync([launched], [launched], cancellationToken);
        }
        catch
        {
            // A node that did not come up must not be left half-running.
            if (!launched.Process.HasExited)
            {
                await NodeProcesses.StopAsync([launched.Process.Id], kill: true, CancellationToken.None);
            }

            throw;
        }

        var started = node with { Pid = launched.Process.Id, Address = launched.Address, Port = port, LogFile = launched.LogFile };
        FarmStateFile.Write(data, state with { Nodes = [.. state.Nodes.Select(n => n.Id == node.Id ? started : n)] });
        await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"node {node.Id} started: pid {launched.Process.Id} at {launched.Address}, log {launched.LogFile}"));
        return ExitCodes.Ok;
    }

    /// <summary>The node's live pid, or exit 1 with a line saying it is not running and how to start it.</summary>
    private static int RunningPid(FarmDataDirectory data, FarmNodeEntry node, string verb)
        => LivePid(data, node) ?? throw new CliException(
            ExitCodes.Error,
            string.Create(CultureInfo.InvariantCulture, $"Node {node.Id} is not running, so there is nothing to {verb}; start it with ./farm node start {node.Id}."));

    /// <summary>The node's pid from farm.json, when that process is a live Farm node.</summary>
    private static int? LivePid(FarmDataDirectory data, FarmNodeEntry node)
        => node.Pid is { } pid && NodeProcesses.IsFarmNode(pid) ? pid : null;

    /// <summary>After a kill or stop: no pid in farm.json.</summary>
    private static void Forget(FarmDataDirectory data, FarmStateRecord state, FarmNodeEntry node)
        => FarmStateFile.Write(data, state with { Nodes = [.. state.Nodes.Select(n => n.Id == node.Id ? n with { Pid = null } : n)] });
}
