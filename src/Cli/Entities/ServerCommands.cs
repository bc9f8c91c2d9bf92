using System.CommandLine;
using System.Globalization;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>
/// `farm server add NAME --connection CS | list | remove NAME`: the PostgreSQL servers a farm may
/// put container databases on (`farm container create --server NAME`), so entities spread over
/// several servers and one that goes away takes only its containers down.
/// </summary>
internal static class ServerCommands
{
    public static Command Create()
    {
        var server = new Command("server", "Add, list and remove the database servers containers may be placed on (PostgreSQL farms)");
        server.Subcommands.Add(AddCommand());
        server.Subcommands.Add(ListCommand());
        server.Subcommands.Add(RemoveCommand());
        return server;
    }

    private static Command AddCommand()
    {
        var name = new Argument<string>("NAME") { Description = "A name for the server: letters, digits, '-', '_' or '.'" };
        var connection = new Option<string>("--connection")
        {
            Description = "Its Npgsql connection string: 'Host=...;Port=...;Username=...;Password=...' (the login needs CREATEDB)",
            HelpName = "CS",
            Required = true,
        };
        var command = new Command("add", "Register a PostgreSQL server (the farm checks it can log in first)") { name, connection };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var added = await admin.AddServerAsync(parseResult.GetValue(name)!, parseResult.GetValue(connection)!, cancellationToken);
            await Console.Out.WriteLineAsync($"Added database server {added.Name} ({added.ConnectionString}); put containers on it with: farm container create --server {added.Name}");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ListCommand()
    {
        var json = CliValues.JsonOption();
        var command = new Command("list", "List the database servers and how many containers each holds") { json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var servers = await admin.GetServersAsync(cancellationToken);
            if (parseResult.GetValue(json))
            {
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(new JsonArray([.. servers.Select(s => (JsonNode)new JsonObject
                {
                    ["name"] = s.Name,
                    ["connection_string"] = s.ConnectionString,
                    ["container_count"] = s.ContainerCount,
                })])));
                return ExitCodes.Ok;
            }
            await Console.Out.WriteAsync(CliValues.Table(
                ["SERVER", "CONTAINERS", "CONNECTION"],
                servers.Select(s => new[] { s.Name, s.ContainerCount.ToString(CultureInfo.InvariantCulture), s.ConnectionString })));
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command RemoveCommand()
    {
        var name = new Argument<string>("NAME") { Description = "The server's name" };
        var command = new Command("remove", "Forget a database server no container is on") { name };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            await admin.RemoveServerAsync(parseResult.GetValue(name)!, cancellationToken);
            await Console.Out.WriteLineAsync($"Removed database server {parseResult.GetValue(name)}");
            return ExitCodes.Ok;
        });
        return command;
    }
}
