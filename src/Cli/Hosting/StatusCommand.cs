using System.CommandLine;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Farm.Client;

namespace Farm.Cli.Hosting;

/// <summary>`farm status [--json]`: the farm's nodes and containers as the farm database sees them.</summary>
public static class StatusCommand
{
    public static Command Create()
    {
        var json = new Option<bool>("--json")
        {
            Description = "Print JSON (stable snake_case names) instead of tables",
        };

        var command = new Command("status", "Show the farm's nodes and containers")
        {
            json,
        };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var view = StatusView.From(await admin.GetFarmStatusAsync(cancellationToken));
            await Console.Out.WriteAsync(parseResult.GetValue(json)
                ? JsonSerializer.Serialize(view, FarmStateFile.JsonOptions) + Environment.NewLine
                : view.ToText());
            return ExitCodes.Ok;
        });
        return command;
    }
}

/// <summary>What `farm status --json` prints; its names are a contract for scripts.</summary>
public sealed record StatusView(string Version, long EntityCount, IReadOnlyList<NodeView> Nodes, IReadOnlyList<ContainerView> Containers)
{
    public static StatusView From(FarmStatusProperties status) => new(
        status.Version,
        status.EntityCount,
        [.. status.Nodes.Select(n => new NodeView(
            n.Id,
            n.State,
            n.Address,
            (long)n.HeartbeatAge.TotalMilliseconds,
            n.ProcessId == 0 ? null : n.ProcessId))],
        [.. status.Containers.Select(c => new ContainerView(c.Id, c.OwnerNode, c.Epoch, c.EntityCount, c.OwnedSince, c.Store))]);

    public string ToText()
    {
        var text = new StringBuilder();
        text.AppendLine(CultureInfo.InvariantCulture, $"Farm {Version}: {Nodes.Count} node(s), {Containers.Count} container(s), {EntityCount} entit{(EntityCount == 1 ? "y" : "ies")}");
        text.AppendLine();
        AppendTable(
            text,
            ["NODE", "STATE", "ADDRESS", "HEARTBEAT", "PID"],
            Nodes.Select(n => new[]
            {
                n.Id.ToString(CultureInfo.InvariantCulture),
                n.State,
                n.Address,
                n.HeartbeatAgeMs is { } ms ? (ms / 1000.0).ToString("0.0", CultureInfo.InvariantCulture) + " s ago" : "-",
                n.Pid?.ToString(CultureInfo.InvariantCulture) ?? "-",
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

public sealed record NodeView(long Id, string State, string Address, long? HeartbeatAgeMs, int? Pid);

public sealed record ContainerView(long Id, long? OwnerNode, long Epoch, long EntityCount, DateTimeOffset? OwnedSince, string Store);
