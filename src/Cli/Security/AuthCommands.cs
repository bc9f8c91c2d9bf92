using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Cli.Entities;
using Farm.Client;

namespace Farm.Cli.Security;

/// <summary>
/// `farm auth policy create NAME --rights R | list [--show-keys] [--json] | delete NAME | renew-key NAME [--key primary|secondary]`:
/// the farm's shared access policies, the key names and keys Azure Service Bus clients sign their
/// SharedAccessSignature tokens with when they talk AMQP to the farm. Every farm starts with
/// RootManageSharedAccessKey; the last policy with Manage cannot be deleted.
/// </summary>
internal static class AuthCommands
{
    public static Command Create()
    {
        var policy = new Command("policy", "Create, list, delete shared access policies and renew their keys");
        policy.Subcommands.Add(CreateCommand());
        policy.Subcommands.Add(ListCommand());
        policy.Subcommands.Add(DeleteCommand());
        policy.Subcommands.Add(RenewKeyCommand());
        return new Command("auth", "Shared access policies: what AMQP clients sign their SharedAccessSignature tokens with") { policy };
    }

    private static Argument<string> NameArgument() => new("NAME") { Description = "The policy's name (SharedAccessKeyName): letters, digits, '.', '-', '_', up to 256; case-sensitive" };

    private static Command CreateCommand()
    {
        var name = NameArgument();
        var rights = new Option<string>("--rights")
        {
            Description = "What it allows: Manage, Send, Listen, comma-separated (Manage brings Send and Listen)",
            HelpName = "Manage,Send,Listen",
            Required = true,
        };
        var command = new Command("create", "Create a shared access policy with two new random keys") { name, rights };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var wanted = AccessRightsText.Parse(parseResult.GetValue(rights));
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var created = await admin.CreateSharedAccessPolicyAsync(parseResult.GetValue(name)!, wanted, cancellationToken);
            await Console.Out.WriteLineAsync(
                $"Created shared access policy {created.Name} ({AccessRightsText.Format(created.Rights)}); its keys: farm auth policy list --show-keys, its AMQP connection string: farm connection-string --amqp --policy {created.Name}");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ListCommand()
    {
        var json = CliValues.JsonOption();
        var showKeys = new Option<bool>("--show-keys") { Description = "Show each policy's primary and secondary key too" };
        var command = new Command("list", "List the shared access policies and their rights") { showKeys, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var policies = await admin.GetSharedAccessPoliciesAsync(cancellationToken);
            var withKeys = parseResult.GetValue(showKeys);
            if (parseResult.GetValue(json))
            {
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(new JsonArray([.. policies.Select(p =>
                {
                    var item = new JsonObject
                    {
                        ["name"] = p.Name,
                        ["rights"] = new JsonArray([.. AccessRightsText.Words(p.Rights).Select(w => (JsonNode)w)]),
                        ["created_at"] = CliValues.TimestampJson(p.CreatedAt),
                        ["updated_at"] = CliValues.TimestampJson(p.UpdatedAt),
                    };
                    if (withKeys)
                    {
                        item["primary_key"] = p.PrimaryKey;
                        item["secondary_key"] = p.SecondaryKey;
                    }
                    return (JsonNode)item;
                })])));
                return ExitCodes.Ok;
            }
            await Console.Out.WriteAsync(withKeys
                ? CliValues.Table(["NAME", "RIGHTS", "PRIMARY KEY", "SECONDARY KEY"], policies.Select(p => new[] { p.Name, AccessRightsText.Format(p.Rights), p.PrimaryKey, p.SecondaryKey }))
                : CliValues.Table(["NAME", "RIGHTS"], policies.Select(p => new[] { p.Name, AccessRightsText.Format(p.Rights) })));
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command DeleteCommand()
    {
        var name = NameArgument();
        var command = new Command("delete", "Delete a shared access policy (tokens signed with its keys stop working); the farm keeps its last one with Manage") { name };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            await admin.DeleteSharedAccessPolicyAsync(parseResult.GetValue(name)!, cancellationToken);
            await Console.Out.WriteLineAsync($"Deleted shared access policy {parseResult.GetValue(name)}");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command RenewKeyCommand()
    {
        var name = NameArgument();
        var key = new Option<string>("--key")
        {
            Description = "Which key to replace; the other keeps working meanwhile",
            HelpName = "primary|secondary",
            DefaultValueFactory = _ => "primary",
        };
        key.AcceptOnlyFromAmong("primary", "secondary");
        var command = new Command("renew-key", "Replace one key of a shared access policy with a new random one, and print it") { name, key };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var which = parseResult.GetValue(key) == "secondary" ? SharedAccessKeyType.SecondaryKey : SharedAccessKeyType.PrimaryKey;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var renewed = await admin.RenewSharedAccessKeyAsync(parseResult.GetValue(name)!, which, cancellationToken);
            await Console.Out.WriteLineAsync(which == SharedAccessKeyType.PrimaryKey ? renewed.PrimaryKey : renewed.SecondaryKey);
            return ExitCodes.Ok;
        });
        return command;
    }
}
