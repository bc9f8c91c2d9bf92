using System.CommandLine;
using Farm.Cli;
using Farm.Cli.EmulatorConfig;
using Farm.Cli.Entities;
using Farm.Cli.Hosting;
using Farm.Cli.Messaging;
using Farm.Cli.Security;

// The `farm` command. Each group of commands lives in its own folder: Hosting/ (up, down, status, node),
// Entities/ (queue, topic, subscription, rule, container), Messaging/ (send, receive, peek, queue purge, dead-letter resubmit),
// Security/ (auth policy, connection-string) and EmulatorConfig/ (config apply|check, up --config: the Azure Service Bus
// emulator's Config.json). CliContext holds what they
// share: the global options, finding the farm, and errors as one line plus an exit code.
var root = new RootCommand("Farm: a self-hosted message-broker farm with Azure Service Bus semantics")
{
    CliContext.ConnectionOption,
    CliContext.DataOption,
    UpCommand.Create(),
    DownCommand.Create(),
    StatusCommand.Create(),
    NodeCommands.Create(),
    QueueCommands.Create(),
    TopicCommands.Create(),
    SubscriptionCommands.Create(),
    RuleCommands.Create(),
    ContainerCommands.Create(),
    ServerCommands.Create(),
    AuthCommands.Create(),
    ConnectionStringCommand.Create(),
    SendCommand.Create(),
    ReceiveCommand.Create(),
    PeekCommand.Create(),
    DeadLetterCommands.Create(),
    ConfigCommands.Create(),
};

return await CliContext.InvokeAsync(root, args.Length == 0 ? ["--help"] : args);
