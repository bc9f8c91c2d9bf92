using System.CommandLine;
using System.Globalization;
using System.Text.Json.Nodes;
using Farm.Cli.Hosting;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm container create [--count K] [--server NAME] | list | move ID --to N`.</summary>
internal static class ContainerCommands
{
    public static Command Create()
    {
        var container = new Command("container", "Create, list and move message containers (the databases entities live in)");
        container.Subcommands.Add(CreateCommand());
        container.Subcommands.Add(ListCommand());
        container.Subcommands.Add(MoveCommand());
        return container;
    }

    private static Command CreateCommand()
    {
        var count = new Option<int>("--count") { Description = "How many containers to create", DefaultValueFactory = _ => 1, HelpName = "K" };
        var json = new Option<bool>("--json") { Description = "Print JSON (stable snake_case names)" };
        var server = new Option<string?>("--server") { Description = "Put their databases on this database server (see farm server add); default: beside the farm database", HelpName = "NAME" };
        var command = new Command("create", "Create message containers; the farm assigns them to brokers") { count, server, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var k = parseResult.GetValue(count);
            if (k is < 1 or > 1000)
            {
                throw new CliException(ExitCodes.BadInput, $"--count must be between 1 and 1000, not {k}.");
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var created = new List<ContainerProperties>(k);
            for (var i = 0; i < k; i++)
            {
                created.Add(await admin.CreateContainerAsync(parseResult.GetValue(server), cancellationToken));
            }

            if (parseResult.GetValue(json))
            {
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(new JsonArray([.. created.Select(c => (JsonNode)ToJson(c))])));
            }
            else
            {
                await Console.Out.WriteLineAsync($"Created container{(k == 1 ? string.Empty : "s")} {string.Join(", ", created.Select(c => c.Id))}.");
            }

            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ListCommand()
    {
        var json = CliValues.JsonOption();
        var command = new Command("list", "List the containers with their owners and entity counts") { json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var containers = await admin.GetContainersAsync(cancellationToken);
            if (parseResult.GetValue(json))
            {
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(new JsonArray([.. containers.Select(c => (JsonNode)ToJson(c))])));
                return ExitCodes.Ok;
            }

            await Console.Out.WriteAsync(CliValues.Table(
                ["CONTAINER", "OWNER", "EPOCH", "ENTITIES", "OWNED-SINCE", "STORE", "SERVER"],
                containers.OrderBy(c => c.Id).Select(c => new[]
                {
                    CliValues.Number(c.Id),
                    c.OwnerNode is { } owner ? CliValues.Number(owner) : "-",
                    CliValues.Number(c.Epoch),
                    CliValues.Number(c.EntityCount),
                    CliValues.Timestamp(c.OwnedSince),
                    c.Store.Length == 0 ? "-" : c.Store,
                    c.Server ?? "-",
                })));
            return ExitCodes.Ok;
        });
        return command;
    }

    /// <summary>
    /// `farm container move ID --to N`: a planned move. The owner drains the container (its entities
    /// pause, clients retry), releases it, and node N takes it with a higher epoch. The CLI checks
    /// what it can first, so a typo gets a line naming what is wrong rather than a half move.
    /// </summary>
    private static Command MoveCommand()
    {
        var id = new Argument<long>("ID") { Description = "The container's id (see ./farm status)" };
        var to = new Option<long>("--to") { Description = "The node to move it to (a live node of the farm)", HelpName = "N", Required = true };
        var json = new Option<bool>("--json") { Description = "Print the moved container as JSON (stable snake_case names)" };
        var command = new Command("move", "Move a container to another node (planned: drained, handed over, epoch raised)") { id, to, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var containerId = parseResult.GetValue(id);
            var toNode = parseResult.GetValue(to);
            if (containerId < 1)
            {
                throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"Container id must be 1 or more, not {containerId}."));
            }

            if (toNode < 1)
            {
                throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"--to must be a node id, 1 or more, not {toNode}."));
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var status = await admin.GetFarmStatusAsync(cancellationToken);
            var before = status.Containers.FirstOrDefault(c => c.Id == containerId)
                ?? throw new CliException(
                    ExitCodes.NotFound,
                    string.Create(CultureInfo.InvariantCulture, $"The farm has no container {containerId}; its containers are {Ids(status.Containers.Select(c => c.Id))}."));
            var target = status.Nodes.FirstOrDefault(n => n.Id == toNode)
                ?? throw new CliException(
                    ExitCodes.BadInput,
                    string.Create(CultureInfo.InvariantCulture, $"The farm has no node {toNode}; its nodes are {Ids(status.Nodes.Select(n => n.Id))}."));
            if (target.State != StatusView.ActiveState)
            {
                throw new CliException(
                    ExitCodes.BadInput,
                    string.Create(CultureInfo.InvariantCulture, $"Node {toNode} is {target.State}, not a live node; move the container to one of the active nodes ({Ids(ActiveNodes(status))})."));
            }

            if (LocalProcessExited(parseResult, target))
            {
                throw new CliException(
                    ExitCodes.BadInput,
                    string.Create(CultureInfo.InvariantCulture, $"Node {toNode} is not running (its process has exited); start it with ./farm node start {toNode}, or pick another node."));
            }

            if (before.OwnerNode == toNode)
            {
                throw new CliException(
                    ExitCodes.BadInput,
                    string.Create(CultureInfo.InvariantCulture, $"Container {containerId} is already on node {toNode} (epoch {before.Epoch})."));
            }

            var moved = await admin.MoveContainerAsync(containerId, toNode, cancellationToken);
            if (parseResult.GetValue(json))
            {
                var node = ToJson(moved);
                node["from_node"] = before.OwnerNode;
                node["previous_epoch"] = before.Epoch;
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(node));
            }
            else
            {
                var from = before.OwnerNode is { } owner ? "node " + CliValues.Number(owner) : "no owner";
                var now = moved.OwnerNode is { } newOwner ? "node " + CliValues.Number(newOwner) : "no owner yet";
                await Console.Out.WriteLineAsync(string.Create(
                    CultureInfo.InvariantCulture,
                    $"Container {containerId} moved from {from} (epoch {before.Epoch}) to {now} (epoch {moved.Epoch})."));
            }

            return ExitCodes.Ok;
        });
        return command;
    }

    private static IEnumerable<long> ActiveNodes(FarmStatusProperties status)
        => status.Nodes.Where(n => n.State == StatusView.ActiveState).Select(n => n.Id);

    private static string Ids(IEnumerable<long> ids)
    {
        var list = ids.Order().Select(CliValues.Number).ToList();
        return list.Count == 0 ? "none" : string.Join(", ", list);
    }

    /// <summary>
    /// True when the node belongs to the local farm (farm.json names it at the same address) and its
    /// process is gone: the farm database may still call it active until its heartbeat lapses.
    /// </summary>
    private static bool LocalProcessExited(ParseResult parseResult, FarmNodeProperties node)
    {
        FarmStateRecord? local;
        try
        {
            local = FarmStateFile.TryRead(new FarmDataDirectory(CliContext.ResolveDataDirectory(parseResult)));
        }
        catch (Exception ex) when (ex is CliException or IOException or UnauthorizedAccessException)
        {
            return false;
        }

        var entry = local?.Nodes.FirstOrDefault(e => e.Id == node.Id
            && string.Equals(e.Address.TrimEnd('/'), node.Address.TrimEnd('/'), StringComparison.OrdinalIgnoreCase));
        if (entry is null)
        {
            return false;
        }

        var pid = node.ProcessId != 0 ? node.ProcessId : entry.Pid;
        return pid is not { } p || !NodeProcesses.IsFarmNode(p);
    }

    internal static JsonObject ToJson(ContainerProperties container) => new()
    {
        ["id"] = container.Id,
        ["owner_node"] = container.OwnerNode,
        ["epoch"] = container.Epoch,
        ["entity_count"] = container.EntityCount,
        ["owned_since"] = CliValues.TimestampJson(container.OwnedSince),
        ["store"] = container.Store,
        ["server"] = container.Server,
    };
}
