using System.CommandLine;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Farm.Client;

namespace Farm.Cli.Hosting;

/// <summary>
/// `farm status [--json] [--watch [--interval S] [--count N]]`: the farm's nodes and containers as
/// the farm database sees them, plus, for a farm this machine runs (its farm.json names the node),
/// how the CLI sees each node's process (running, paused by SIGSTOP, exited), and how many
/// containers each live node owns. --watch keeps looking and says what changed (<see cref="StatusWatch"/>).
/// </summary>
public static class StatusCommand
{
    /// <summary>Most changes a terminal --watch keeps on screen under the status.</summary>
    private const int ChangesShown = 15;

    /// <summary>The names of `farm status --json`, one look per line.</summary>
    private static readonly JsonSerializerOptions JsonLines = new(FarmStateFile.JsonOptions) { WriteIndented = false };

    public static Command Create()
    {
        var json = new Option<bool>("--json")
        {
            Description = "Print JSON (stable snake_case names) instead of tables; with --watch, one object per look and line",
        };
        var watch = new Option<bool>("--watch")
        {
            Description = "Keep looking until Ctrl+C, and say what changed: nodes joining, stopping, pausing; containers taken, moved, failed over, and how long each was without a live owner",
        };
        var interval = new Option<double>("--interval")
        {
            Description = "Seconds between two looks with --watch",
            DefaultValueFactory = _ => 1,
            HelpName = "SECONDS",
        };
        var count = new Option<int?>("--count")
        {
            Description = "With --watch: stop after this many looks (default: until Ctrl+C)",
            HelpName = "N",
        };

        var command = new Command("status", "Show the farm's nodes (state, address, heartbeat, process) and containers (owner, epoch, entities)")
        {
            json, watch, interval, count,
        };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var connection = CliContext.ResolveConnectionString(parseResult);
            using var admin = new FarmAdministrationClient(connection);
            if (parseResult.GetValue(watch))
            {
                var seconds = parseResult.GetValue(interval);
                if (!(seconds >= 0.1 && seconds <= 3600))
                {
                    throw new CliException(ExitCodes.BadInput, $"--interval must be between 0.1 and 3600 seconds, not {seconds.ToString(CultureInfo.InvariantCulture)}.");
                }
                if (parseResult.GetValue(count) is < 1)
                {
                    throw new CliException(ExitCodes.BadInput, $"--count must be at least 1, not {parseResult.GetValue(count)}.");
                }
                return await WatchAsync(admin, parseResult, TimeSpan.FromSeconds(seconds), parseResult.GetValue(count), parseResult.GetValue(json), cancellationToken);
            }
            var status = await admin.GetFarmStatusAsync(cancellationToken);
            var view = StatusView.From(status, LocalFarmRecord(parseResult));
            await Console.Out.WriteAsync(parseResult.GetValue(json)
                ? JsonSerializer.Serialize(view, FarmStateFile.JsonOptions) + Environment.NewLine
                : view.ToText());
            return ExitCodes.Ok;
        });
        return command;
    }

    /// <summary>
    /// Looks every <paramref name="interval"/>. On a terminal it redraws the status with the latest
    /// changes under it; redirected (a log, a pipe) it prints the status once and then one line per
    /// change, so the output reads as a timeline. A look that fails (the node asked is down) is said
    /// and the next one tries again: the connection string's other endpoints take over.
    /// </summary>
    private static async Task<int> WatchAsync(FarmAdministrationClient admin, ParseResult parseResult, TimeSpan interval, int? looks, bool asJson, CancellationToken cancellationToken)
    {
        var changes = new StatusWatch();
        var shown = new List<StatusWatch.Change>();
        var redraw = !asJson && !Console.IsOutputRedirected;
        using var timer = new PeriodicTimer(interval);
        var first = true;
        for (var look = 0; looks is null || look < looks; look++)
        {
            if (look > 0)
            {
                try
                {
                    await timer.WaitForNextTickAsync(cancellationToken);
                }
                catch (OperationCanceledException)
                {
                    break;
                }
            }
            StatusView view;
            var seenAt = DateTimeOffset.UtcNow;
            try
            {
                view = StatusView.From(await admin.GetFarmStatusAsync(cancellationToken), LocalFarmRecord(parseResult));
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                break;
            }
            catch (FarmException e)
            {
                await Console.Out.WriteLineAsync($"{seenAt.ToString("HH:mm:ss.fff", CultureInfo.InvariantCulture)}  could not look: {e.Message}");
                continue;
            }
            var found = changes.Next(view, seenAt);
            if (asJson)
            {
                await Console.Out.WriteLineAsync(JsonSerializer.Serialize(new WatchLook(seenAt, view, [.. found.Select(c => c.Text)]), JsonLines));
                continue;
            }
            shown.AddRange(found);
            if (redraw)
            {
                // Home and clear, then the whole picture: no scrolling history on a terminal.
                var text = new StringBuilder("\u001b[H\u001b[2J");
                text.AppendLine(CultureInfo.InvariantCulture, $"{seenAt:HH:mm:ss} (every {interval.TotalSeconds.ToString("0.#", CultureInfo.InvariantCulture)} s, Ctrl+C to stop)");
                text.Append(view.ToText());
                text.AppendLine();
                text.AppendLine("CHANGES");
                foreach (var change in shown.TakeLast(ChangesShown))
                {
                    text.AppendLine(change.ToString());
                }
                await Console.Out.WriteAsync(text.ToString());
            }
            else if (first)
            {
                await Console.Out.WriteAsync(view.ToText());
                await Console.Out.WriteLineAsync();
            }
            else
            {
                foreach (var change in found)
                {
                    await Console.Out.WriteLineAsync(change.ToString());
                }
            }
            first = false;
        }
        return ExitCodes.Ok;
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

/// <summary>One look of `farm status --watch --json`: when, the status, and what changed since the look before.</summary>
public sealed record WatchLook(DateTimeOffset SeenAt, StatusView Status, IReadOnlyList<string> Changes);

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

    /// <summary>
    /// Active and heartbeating within the farm's default node timeout, and, for a node of this
    /// machine, its process not gone: a killed or frozen node (a container killed by its engine,
    /// where the CLI sees no process) is not live, whatever its row says. (A SQLite farm's nodes
    /// tell a killed one the same way, by its process lock, and take its containers before its
    /// heartbeat lapses.)
    /// </summary>
    public static bool IsLive(NodeView node) =>
        node.State == ActiveState && node.HeartbeatAgeMs is { } age && age < StatusWatch.NodeTimeout.TotalMilliseconds
        && node.ProcessState != "exited";

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
            n.MetricsUrl,
            n.AmqpAddress)).ToList();
        var containers = status.Containers.OrderBy(c => c.Id)
            .Select(c => new ContainerView(c.Id, c.OwnerNode, c.Epoch, c.EntityCount, c.OwnedSince, c.Store) { Server = c.Server }).ToList();

        // Every live node, with 0 if it owns nothing; a node that is not live but still owns some is listed too.
        var owned = containers.Where(c => c.OwnerNode is not null).GroupBy(c => c.OwnerNode!.Value).ToDictionary(g => g.Key, g => g.LongCount());
        var byNode = nodes
            .Where(n => n.State == ActiveState || owned.ContainsKey(n.Id))
            .Select(n => new NodeContainersView(n.Id, IsLive(n), owned.GetValueOrDefault(n.Id)))
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
            text += "; on nodes not live: " + string.Join(", ", notLive);
        }

        return text + string.Create(CultureInfo.InvariantCulture, $"; unowned: {UnownedContainers}");
    }

    public string ToText()
    {
        var text = new StringBuilder();
        text.AppendLine(CultureInfo.InvariantCulture, $"Farm {Version}: {Nodes.Count} node(s), {Containers.Count} container(s), {EntityCount} entit{(EntityCount == 1 ? "y" : "ies")}");
        text.AppendLine(FarmDatabase is null ? $"Store: {Store}" : $"Store: {Store}, farm database {FarmDatabase}");
        text.AppendLine(Summary());
        var live = ContainersByNode.Where(n => n.Live).Select(n => n.NodeId).ToHashSet();
        if (Nodes.FirstOrDefault(n => live.Contains(n.Id) && n.MetricsUrl is not null) is { MetricsUrl: { } metricsUrl })
        {
            text.AppendLine($"Dashboard: {DashboardUrl.Of(metricsUrl)} (every live node serves it at its METRICS address without /metrics)");
        }
        text.AppendLine();
        AppendTable(
            text,
            ["NODE", "STATE", "ADDRESS", "HEARTBEAT", "PID", "PROCESS", "METRICS", "AMQP"],
            Nodes.Select(n => new[]
            {
                n.Id.ToString(CultureInfo.InvariantCulture),
                n.State,
                n.Address,
                n.HeartbeatAgeMs is { } ms ? (ms / 1000.0).ToString("0.0", CultureInfo.InvariantCulture) + " s ago" : "-",
                n.Pid?.ToString(CultureInfo.InvariantCulture) ?? "-",
                n.ProcessState ?? "-",
                n.MetricsUrl ?? "-",
                n.AmqpAddress ?? "-",
            }));
        text.AppendLine();
        AppendTable(
            text,
            ["CONTAINER", "OWNER", "EPOCH", "ENTITIES", "SINCE", "SERVER"],
            Containers.Select(c => new[]
            {
                c.Id.ToString(CultureInfo.InvariantCulture),
                c.OwnerNode?.ToString(CultureInfo.InvariantCulture) ?? "-",
                c.Epoch.ToString(CultureInfo.InvariantCulture),
                c.EntityCount.ToString(CultureInfo.InvariantCulture),
                c.OwnedSince?.ToString("yyyy-MM-dd HH:mm:ss'Z'", CultureInfo.InvariantCulture) ?? "-",
                c.Server ?? "(farm's)",
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
/// A node: state, address, heartbeat age, Prometheus scrape URL and AMQP address (amqp://host:port,
/// null when it does not listen for AMQP) from the farm database; process_state as the CLI sees the
/// pid here (null for a farm on another machine).
/// </summary>
public sealed record NodeView(long Id, string State, string Address, long? HeartbeatAgeMs, int? Pid, string? ProcessState, string? MetricsUrl = null, string? AmqpAddress = null);

/// <summary>How many containers a node owns; live is its farm-database state being active.</summary>
public sealed record NodeContainersView(long NodeId, bool Live, long Containers);

public sealed record ContainerView(long Id, long? OwnerNode, long Epoch, long EntityCount, DateTimeOffset? OwnedSince, string Store)
{
    /// <summary>The named database server its database is on; null: the farm database's.</summary>
    public string? Server { get; init; }
}
