using System.CommandLine;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Farm.Client;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm status [--json]`: the farm's nodes and containers as the farm database sees them, plus,
/// for a farm this machine runs (its farm.json names the node), how the CLI sees each node's
/// process (running, paused by SIGSTOP, exited), and how many containers each live node owns.
/// </summary>
public static class StatusCommand
{
    public static Command Create()
    {
        var json = new Option<bool>("--json")
        {
            Description = "Print JSON (stable snake_case names) instead of tables",
        };

        var command = new Command("status", "Show the farm's nodes (state, address, heartbeat, process) and containers (owner, epoch, entities)")
        {
            json,
        };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var connection = CliContext.ResolveConnectionString(parseResult);
            using var admin = new FarmAdministrationClient(connection);
            var status = await admin.GetFarmStatusAsync(cancellationToken);
            var view = StatusView.From(status, LocalFarmRecord(parseResult));
            await Console.Out.WriteAsync(parseResult.GetValue(json)
                ? JsonSerializer.Serialize(view, FarmStateFile.JsonOptions) + Environment.NewLine
                : view.ToText());
            return ExitCodes.Ok;
        });
        return command;
    }

    /// <summary>The local farm.json, if there is a readable one; status works without it.</summary>
    private static FarmStateRecord? LocalFarmRecord(ParseResult parseResult)
    {
        try
        {
            return FarmStateFile.TryRead(new FarmDataDirectory(CliContext.ResolveDataDirectory(parseResult)));
        }
        catch (Exception ex) when (ex is CliException or IOException or UnauthorizedAccessException)
        {
            return null;
        }
    }
}

/// <summary>What `farm status --json` prints; its names are a contract for scripts.</summary>
public sealed record StatusView(
    string Version,
    long EntityCount,
    IReadOnlyList<NodeView> Nodes,
    IReadOnlyList<ContainerView> Containers,
    IReadOnlyList<NodeContainersView> ContainersByNode,
    long UnownedContainers)
{
    /// <summary>The farm database's state of a node that serves and may own containers.</summary>
    public const string ActiveState = "active";

    /// <summary>Where the farm keeps its databases: sqlite or postgres.</summary>
    public string Store { get; init; } = NodeStore.Sqlite;

    /// <summary>The PostgreSQL farm database (password hidden) for a local postgres farm; null otherwise.</summary>
    public string? FarmDatabase { get; init; }

    public static StatusView From(FarmStatusProperties status, FarmStateRecord? local = null)
    {
        var nodes = status.Nodes.OrderBy(n => n.Id).Select(n => new NodeView(
            n.Id,
            n.State,
            n.Address,
            (long)n.HeartbeatAge.TotalMilliseconds,
            n.ProcessId == 0 ? null : n.ProcessId,
            ProcessStateOf(n, local),
            n.MetricsUrl)).ToList();
        var containers = status.Containers.OrderBy(c => c.Id)
            .Select(c => new ContainerView(c.Id, c.OwnerNode, c.Epoch, c.EntityCount, c.OwnedSince, c.Store)).ToList();

        // Every live node, with 0 if it owns nothing; a node that is not live but still owns some is listed too.
        var owned = containers.Where(c => c.OwnerNode is not null).GroupBy(c => c.OwnerNode!.Value).ToDictionary(g => g.Key, g => g.LongCount());
        var byNode = nodes
            .Where(n => n.State == ActiveState || owned.ContainsKey(n.Id))
            .Select(n => new NodeContainersView(n.Id, n.State == ActiveState, owned.GetValueOrDefault(n.Id)))
            .Concat(owned.Keys.Where(id => nodes.All(n => n.Id != id)).Select(id => new NodeContainersView(id, false, owned[id])))
            .OrderBy(n => n.NodeId)
            .ToList();
        // farm.json knows how the local farm was started; for another farm the containers say.
        var isLocal = local is not null && status.Nodes.Any(n => local.Nodes.Any(e => e.Id == n.Id
            && string.Equals(e.Address.TrimEnd('/'), n.Address.TrimEnd('/'), StringComparison.OrdinalIgnoreCase)));
        var store = isLocal
            ? local!.NodeStore
            : new NodeStore(containers.Select(c => c.Store).FirstOrDefault(s => !string.IsNullOrEmpty(s)) ?? NodeStore.Sqlite, null);
        return new StatusView(status.Version, status.EntityCount, nodes, containers, byNode, containers.LongCount(c => c.OwnerNode is null))
        {
            Store = store.Name,
            FarmDatabase = store.SafeFarmConnection(),
        };
    }

    /// <summary>
    /// running / paused / exited for a node of the local farm (farm.json names it with the same id
    /// and address), else null: the CLI cannot see another machine's processes.
    /// </summary>
    private static string? ProcessStateOf(FarmNodeProperties node, FarmStateRecord? local)
    {
        var entry = local?.Nodes.FirstOrDefault(e => e.Id == node.Id
            && string.Equals(e.Address.TrimEnd('/'), node.Address.TrimEnd('/'), StringComparison.OrdinalIgnoreCase));
        if (entry is null)
        {
            return null;
        }

        // The farm database has the pid of the node's latest registration; farm.json is the fallback.
        var pid = node.ProcessId != 0 ? node.ProcessId : entry.Pid;
        var state = pid is { } p && NodeProcesses.IsFarmNode(p) ? NodeProcesses.StateOf(p) : NodeProcessState.Exited;
        return state.ToString().ToLowerInvariant();
    }

    /// <summary>"containers per live node: 1: 2, 2: 2, 3: 2", plus those on nodes that are not live and those without an owner.</summary>
    public string Summary()
    {
        var live = ContainersByNode.Where(n => n.Live).Select(n => string.Create(CultureInfo.InvariantCulture, $"node {n.NodeId}: {n.Containers}"));
        var text = "Containers per live node: " + (ContainersByNode.Any(n => n.Live) ? string.Join(", ", live) : "none live");
        var notLive = ContainersByNode.Where(n => !n.Live).Select(n => string.Create(CultureInfo.InvariantCulture, $"node {n.NodeId}: {n.Containers}")).ToList();
        if (notLive.Count > 0)
        {
            text += "; on nodes not active: " + string.Join(", ", notLive);
        }

        return text + string.Create(CultureInfo.InvariantCulture, $"; unowned: {UnownedContainers}");
    }

    public string ToText()
    {
        var text = new StringBuilder();
        text.AppendLine(CultureInfo.InvariantCulture, $"Farm {Version}: {Nodes.Count} node(s), {Containers.Count} container(s), {EntityCount} entit{(EntityCount == 1 ? "y" : "ies")}");
        text.AppendLine(FarmDatabase is null ? $"Store: {Store}" : $"Store: {Store}, farm database {FarmDatabase}");
        text.AppendLine(Summary());
        text.AppendLine();
        AppendTable(
            text,
            ["NODE", "STATE", "ADDRESS", "HEARTBEAT", "PID", "PROCESS", "METRICS"],
            Nodes.Select(n => new[]
            {
                n.Id.ToString(CultureInfo.InvariantCulture),
                n.State,
                n.Address,
                n.HeartbeatAgeMs is { } ms ? (ms / 1000.0).ToString("0.0", CultureInfo.InvariantCulture) + " s ago" : "-",
                n.Pid?.ToString(CultureInfo.InvariantCulture) ?? "-",
                n.ProcessState ?? "-",
                n.MetricsUrl ?? "-",
            }));
        text.AppendLine();
        AppendTable(
            text,
            ["CONTAINER", "OWNER", "EPOCH", "ENTITIES", "SINCE"],
            Containers.Select(c => new[]
            {
                c.Id.ToString(CultureInfo.InvariantCulture),
                c.OwnerNode?.ToString(CultureInfo.InvariantCulture) ?? "-",
                c.Epoch.ToString(CultureInfo.InvariantCulture),
                c.EntityCount.ToString(CultureInfo.InvariantCulture),
                c.OwnedSince?.ToString("yyyy-MM-dd HH:mm:ss'Z'", CultureInfo.InvariantCulture) ?? "-",
            }));
        return text.ToString();
    }

    private static void AppendTable(StringBuilder text, string[] header, IEnumerable<string[]> rows)
    {
        var all = new List<string[]> { header };
        all.AddRange(rows);
        var widths = header.Select((_, column) => all.Max(row => row[column].Length)).ToArray();
        foreach (var row in all)
        {
            text.AppendLine(string.Join("  ", row.Select((cell, column) => cell.PadRight(widths[column]))).TrimEnd());
        }
    }
}

/// <summary>
/// A node: state, address, heartbeat age and Prometheus scrape URL from the farm database;
/// process_state as the CLI sees the pid here (null for a farm on another machine).
/// </summary>
public sealed record NodeView(long Id, string State, string Address, long? HeartbeatAgeMs, int? Pid, string? ProcessState, string? MetricsUrl = null);

/// <summary>How many containers a node owns; live is its farm-database state being active.</summary>
public sealed record NodeContainersView(long NodeId, bool Live, long Containers);

public sealed record ContainerView(long Id, long? OwnerNode, long Epoch, long EntityCount, DateTimeOffset? OwnedSince, string Store);
