using System.CommandLine;
using System.Globalization;
using Farm.Cli.Hosting;
using Farm.Client;

namespace Farm.Cli.Security;

/// <summary>
/// `farm connection-string [--amqp [--policy NAME] [--node N]]`: the farm's gRPC connection string
/// (what `farm up` prints, for Farm's SDK and CLI), or with --amqp one an Azure Service Bus SDK takes
/// for a node's AMQP front door, signed with a shared access policy's primary key. The AMQP address
/// comes from the farm database, where each node registers it when it starts.
/// </summary>
internal static class ConnectionStringCommand
{
    public static Command Create()
    {
        var amqp = new Option<bool>("--amqp")
        {
            Description = "Print an Azure Service Bus connection string for a node's AMQP port (Endpoint=sb://HOST:PORT/;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true)",
        };
        var policy = new Option<string>("--policy")
        {
            Description = "With --amqp: the shared access policy whose primary key it carries",
            HelpName = "NAME",
            DefaultValueFactory = _ => "RootManageSharedAccessKey",
        };
        var node = new Option<long?>("--node")
        {
            Description = "With --amqp: the node whose AMQP port it names (default: the first live node listening for AMQP)",
            HelpName = "N",
        };
        var command = new Command("connection-string", "Print the farm's connection string: gRPC (Farm's SDK and CLI), or with --amqp for Azure Service Bus SDKs")
        {
            amqp, policy, node,
        };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var connection = CliContext.ResolveConnectionString(parseResult);
            if (!parseResult.GetValue(amqp))
            {
                await Console.Out.WriteLineAsync(connection);
                return ExitCodes.Ok;
            }
            using var admin = new FarmAdministrationClient(connection);
            var status = await admin.GetFarmStatusAsync(cancellationToken);
            var address = AmqpAddressOf(status, parseResult.GetValue(node));
            var name = parseResult.GetValue(policy)!;
            var signedWith = (await admin.GetSharedAccessPoliciesAsync(cancellationToken)).FirstOrDefault(p => p.Name == name)
                ?? throw new CliException(ExitCodes.NotFound, $"This farm has no shared access policy named '{name}' (names are case-sensitive); farm auth policy list shows them.");
            await Console.Out.WriteLineAsync(AmqpConnectionString.For(address, signedWith));
            return ExitCodes.Ok;
        });
        return command;
    }

    /// <summary>
    /// Node <paramref name="nodeId"/>'s AMQP address, or the first live node's that has one. Exit 2
    /// for a node the farm does not have, 4 when the node (or every live node) does not listen for AMQP.
    /// </summary>
    public static string AmqpAddressOf(FarmStatusProperties status, long? nodeId)
    {
        ArgumentNullException.ThrowIfNull(status);
        if (nodeId is { } id)
        {
            var named = status.Nodes.FirstOrDefault(n => n.Id == id)
                ?? throw new CliException(ExitCodes.BadInput, string.Create(CultureInfo.InvariantCulture, $"There is no node {id} in this farm."));
            return named.AmqpAddress
                ?? throw new CliException(ExitCodes.Unreachable, string.Create(CultureInfo.InvariantCulture, $"Node {id} does not listen for AMQP (it registered no AMQP address)."));
        }
        var view = StatusView.From(status);
        return view.Nodes.Where(StatusView.IsLive).OrderBy(n => n.Id).Select(n => n.AmqpAddress).FirstOrDefault(a => a is not null)
            ?? throw new CliException(ExitCodes.Unreachable, "No live node of this farm listens for AMQP (none registered an AMQP address).");
    }
}
