using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using Farm.Cli.Entities;
using Farm.Client;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm node drain N [--timeout 60s] [--no-wait]`: asks node N to hand its containers to the other
/// nodes one at a time (planned, graceful moves: clients only retry), after which its process exits
/// by itself with code 0. Unless --no-wait, waits until node N owns no container and its process is
/// gone, printing each container as it lands on its new owner, then records the node as stopped in
/// farm.json; `farm node start N` brings it back and rebalancing gives it its share again.
/// </summary>
public static partial class NodeCommands
{
    /// <summary>How long `farm node drain` waits by default for the node to hand everything over and exit.</summary>
    public static readonly TimeSpan DefaultDrainTimeout = TimeSpan.FromSeconds(60);

    private static readonly TimeSpan DrainPollInterval = TimeSpan.FromMilliseconds(250);

    private static Command DrainCommand()
    {
        var id = new Argument<int>("N") { Description = "The node's id (1 for the first node)" };
        var timeout = new Option<string>("--timeout")
        {
            Description = "How long to wait for the node to hand over every container and exit (e.g. 60s, 2m)",
            HelpName = "DURATION",
            DefaultValueFactory = _ => "60s",
        };
        var noWait = new Option<bool>("--no-wait") { Description = "Start the drain and return at once; the node exits by itself when it is done" };
        var command = new Command("drain", "Hand node N's containers to the other nodes one at a time, then let it exit (planned, no failed client calls)")
        {
            id,
            timeout,
            noWait,
        };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var data = new FarmDataDirectory(CliContext.ResolveDataDirectory(parseResult));
            var nodeId = parseResult.GetValue(id);
            if (nodeId < 1)
            {
                throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"Node id must be 1 or more, not {nodeId}."));
            }

            var deadline = CliValues.ParseDuration("--timeout", parseResult.GetValue(timeout) ?? "60s");
            var state = FarmStateFile.Read(data);
            var node = state.Nodes.FirstOrDefault(n => n.Id == nodeId)
                ?? throw new CliException(
                    ExitCodes.BadInput,
                    string.Create(CultureInfo.InvariantCulture, $"The farm on {data.Root} has no node {nodeId}; its nodes are {string.Join(", ", state.Nodes.Select(n => n.Id))}."));
            var pid = RunningPid(data, node, "drain");
            return await DrainAsync(data, CliContext.ResolveConnectionString(parseResult), node, pid, deadline, parseResult.GetValue(noWait), cancellationToken);
        });
        return command;
    }

    private static async Task<int> DrainAsync(FarmDataDirectory data, string connection, FarmNodeEntry node, int pid, TimeSpan deadline, bool noWait, CancellationToken cancellationToken)
    {
        using var admin = new FarmAdministrationClient(connection);
        var status = await admin.GetFarmStatusAsync(cancellationToken);
        var self = status.Nodes.FirstOrDefault(n => n.Id == node.Id);
        var others = status.Nodes.Where(n => n.Id != node.Id && n.State == StatusView.ActiveState && NodeProcessIsUp(n, data)).Select(n => n.Id).Order().ToList();
        var owned = status.Containers.Where(c => c.OwnerNode == node.Id).ToDictionary(c => c.Id);

        // With no other node to take them, its containers would be left without an owner.
        if (others.Count == 0 && self?.State != NodeStates.Draining)
        {
            throw new CliException(
                ExitCodes.Error,
                string.Create(CultureInfo.InvariantCulture, $"Node {node.Id} is the only live node, so no node could take its containers; start another node first, or stop the farm with ./farm down."));
        }

        await admin.DrainNodeAsync(node.Id, cancellationToken);
        await Console.Out.WriteLineAsync(string.Create(
            CultureInfo.InvariantCulture,
            $"node {node.Id} (pid {pid}) draining: handing {Plural(owned.Count, "container")} ({Ids(owned.Keys)}) to node{(others.Count == 1 ? string.Empty : "s")} {Ids(others)}"));
        if (noWait)
        {
            await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"not waiting: node {node.Id} exits by itself once it owns nothing; see ./farm status"));
            return ExitCodes.Ok;
        }

        var clock = Stopwatch.StartNew();
        var stillOwned = owned.Keys.ToHashSet();
        var processGone = false;
        string? lastError = null;
        while (true)
        {
            // The draining node's gateway goes away at the end; the client fails over to the others.
            try
            {
                var containers = await admin.GetContainersAsync(cancellationToken);
                foreach (var container in containers.Where(c => c.OwnerNode is { } owner && owner != node.Id).OrderBy(c => c.Id))
                {
                    if (stillOwned.Remove(container.Id))
                    {
                        await Console.Out.WriteLineAsync(string.Create(
                            CultureInfo.InvariantCulture,
                            $"container {container.Id}: node {node.Id} -> node {container.OwnerNode} (epoch {owned[container.Id].Epoch} -> {container.Epoch})"));
                    }
                }

                // One that moved here while the drain began (a planned move, a takeover) counts too.
                foreach (var container in containers.Where(c => c.OwnerNode == node.Id))
                {
                    if (stillOwned.Add(container.Id))
                    {
                        owned[container.Id] = container;
                    }
                }

                lastError = null;
            }
            catch (FarmException ex) when (ex.IsTransient || ex.Reason is FarmFailureReason.ServiceCommunicationProblem or FarmFailureReason.ServiceTimeout)
            {
                lastError = ex.Message;
            }

            processGone = processGone || !NodeProcesses.IsFarmNode(pid);
            if (stillOwned.Count == 0 && processGone)
            {
                break;
            }

            if (clock.Elapsed >= deadline)
            {
                var waiting = new List<string>();
                if (stillOwned.Count > 0)
                {
                    waiting.Add($"it still owns container{(stillOwned.Count == 1 ? string.Empty : "s")} {Ids(stillOwned)}");
                }

                if (!processGone)
                {
                    waiting.Add(string.Create(CultureInfo.InvariantCulture, $"its process {pid} still runs"));
                }

                if (lastError is not null)
                {
                    waiting.Add($"the farm last answered: {lastError}");
                }

                throw new CliException(
                    ExitCodes.Error,
                    string.Create(CultureInfo.InvariantCulture, $"Node {node.Id} did not finish draining within {CliValues.FormatDuration(deadline)}: {string.Join("; ", waiting)}. It keeps draining; see ./farm status."));
            }

            await Task.Delay(DrainPollInterval, cancellationToken);
        }

        await using (await data.AcquireLockAsync(LockWait, cancellationToken))
        {
            // Record it as stopped, unless someone started it again meanwhile.
            if (FarmStateFile.TryRead(data) is { } current
                && current.Nodes.FirstOrDefault(n => n.Id == node.Id) is { } entry
                && (entry.Pid is null || entry.Pid == pid || !NodeProcesses.IsFarmNode(entry.Pid.Value)))
            {
                Forget(data, current, entry);
            }
        }

        await Console.Out.WriteLineAsync(string.Create(
            CultureInfo.InvariantCulture,
            $"node {node.Id} drained in {clock.Elapsed.TotalSeconds:0.0} s: it owns no container and its process {pid} has exited; ./farm node start {node.Id} brings it back"));
        return ExitCodes.Ok;
    }

    /// <summary>False for a node of the local farm whose process is gone (the farm database may not know yet).</summary>
    private static bool NodeProcessIsUp(FarmNodeProperties node, FarmDataDirectory data)
    {
        if (node.ProcessId != 0 && FarmStateFile.TryRead(data)?.Nodes.Any(e => e.Id == node.Id
            && string.Equals(e.Address.TrimEnd('/'), node.Address.TrimEnd('/'), StringComparison.OrdinalIgnoreCase)) == true)
        {
            return NodeProcesses.IsFarmNode(node.ProcessId);
        }

        return node.HeartbeatAge < TimeSpan.FromSeconds(10);
    }

    private static string Ids(IEnumerable<long> ids)
    {
        var list = ids.Order().Select(i => i.ToString(CultureInfo.InvariantCulture)).ToList();
        return list.Count == 0 ? "none" : string.Join(", ", list);
    }

    private static string Plural(int count, string noun)
        => string.Create(CultureInfo.InvariantCulture, $"{count} {noun}{(count == 1 ? string.Empty : "s")}");

    /// <summary>The farm database's node states, as status shows them.</summary>
    private static class NodeStates
    {
        public const string Draining = "draining";
    }
}
