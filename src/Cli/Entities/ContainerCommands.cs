using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm container create [--count K] | list`.</summary>
internal static class ContainerCommands
{
    public static Command Create()
    {
        var container = new Command("container", "Create and list message containers (the databases entities live in)");
        container.Subcommands.Add(CreateCommand());
        container.Subcommands.Add(ListCommand());
        return container;
    }

    private static Command CreateCommand()
    {
        var count = new Option<int>("--count") { Description = "How many containers to create", DefaultValueFactory = _ => 1, HelpName = "K" };
        var json = new Option<bool>("--json") { Description = "Print JSON (stable snake_case names)" };
        var command = new Command("create", "Create message containers; the farm assigns them to brokers") { count, json };
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
                created.Add(await admin.CreateContainerAsync(cancellationToken));
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
        var json = new Option<bool>("--json") { Description = "Print JSON (stable snake_case names) instead of a table" };
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
                ["CONTAINER", "OWNER", "EPOCH", "ENTITIES", "OWNED-SINCE", "STORE"],
                containers.OrderBy(c => c.Id).Select(c => new[]
                {
                    CliValues.Number(c.Id),
                    c.OwnerNode is { } owner ? CliValues.Number(owner) : "-",
                    CliValues.Number(c.Epoch),
                    CliValues.Number(c.EntityCount),
                    CliValues.Timestamp(c.OwnedSince),
                    c.Store.Length == 0 ? "-" : c.Store,
                })));
            return ExitCodes.Ok;
        });
        return command;
    }

    internal static JsonObject ToJson(ContainerProperties container) => new()
    {
        ["id"] = container.Id,
        ["owner_node"] = container.OwnerNode,
        ["epoch"] = container.Epoch,
        ["entity_count"] = container.EntityCount,
        ["owned_since"] = CliValues.TimestampJson(container.OwnedSince),
        ["store"] = container.Store,
    };
}
