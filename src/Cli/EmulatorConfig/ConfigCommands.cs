using System.CommandLine;
using System.Globalization;
using Farm.Client;

namespace Farm.Cli.EmulatorConfig;

/// <summary>
/// `farm config apply FILE` and `farm config check FILE`, and `farm up --config FILE`: an Azure
/// Service Bus emulator Config.json applied to a farm. The file is read and checked in full
/// before anything is created; a problem is one line naming its JSON path (exit 2).
/// </summary>
internal static class ConfigCommands
{
    public static Command Create()
    {
        var config = new Command("config", "Apply an Azure Service Bus emulator Config.json (queues, topics, subscriptions, rules) to a farm");
        config.Subcommands.Add(ApplyCommand());
        config.Subcommands.Add(CheckCommand());
        return config;
    }

    /// <summary>`farm up --config FILE`.</summary>
    public static Option<string?> UpOption() => new("--config")
    {
        Description = "An Azure Service Bus emulator Config.json: checked before the farm starts, applied once it serves (entities that exist are left as they are)",
        HelpName = "FILE",
    };

    private static Argument<string> FileArgument() => new("FILE") { Description = "The emulator's Config.json" };

    private static Command ApplyCommand()
    {
        var file = FileArgument();
        var command = new Command(
            "apply",
            "Create the file's queues, topics, subscriptions and rules on the farm; what exists is left as it is, so applying a file twice changes nothing")
        { file };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var path = parseResult.GetValue(file)!;
            var config = Load(path)!;
            var outcome = await ApplyAsync(config, CliContext.ResolveConnectionString(parseResult), cancellationToken);
            await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"Applied {path}: {outcome.Created} created, {outcome.Existing} already there."));
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command CheckCommand()
    {
        var file = FileArgument();
        var command = new Command("check", "Check the file as 'config apply' would, without a farm") { file };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var path = parseResult.GetValue(file)!;
            var config = Load(path)!;
            var subscriptions = config.Topics.SelectMany(t => t.Subscriptions).ToList();
            await Console.Out.WriteLineAsync(string.Create(
                CultureInfo.InvariantCulture,
                $"{path} is valid: {config.Queues.Count} queues, {config.Topics.Count} topics, {subscriptions.Count} subscriptions, {subscriptions.Sum(s => s.Rules.Count)} rules."));
            return ExitCodes.Ok;
        });
        return command;
    }

    /// <summary>The checked file (null for no <paramref name="path"/>); warnings go to stderr, a problem is a <see cref="CliException"/> with exit 2.</summary>
    public static EmulatorConfigFile? Load(string? path)
    {
        if (path is null)
        {
            return null;
        }

        string json;
        try
        {
            json = File.ReadAllText(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException or NotSupportedException)
        {
            throw new CliException(ExitCodes.BadInput, $"Cannot read the config file '{path}': {e.Message}");
        }

        EmulatorConfigFile config;
        try
        {
            config = EmulatorConfigParser.Parse(json);
        }
        catch (EmulatorConfigException e)
        {
            throw new CliException(ExitCodes.BadInput, $"{path}: {e.Message}.");
        }

        foreach (var warning in config.Warnings)
        {
            Console.Error.WriteLine($"warning: {path}: {warning}");
        }

        return config;
    }

    /// <summary>What `farm up --config` does once the farm serves: nothing without a file; the report goes to stderr, so stdout stays the connection string.</summary>
    public static async Task ApplyOnUpAsync(EmulatorConfigFile? config, string connectionString, CancellationToken cancellationToken)
    {
        if (config is null)
        {
            return;
        }

        var outcome = await ApplyAsync(config, connectionString, cancellationToken);
        await Console.Error.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"config: applied, {outcome.Created} created, {outcome.Existing} already there"));
    }

    private static async Task<EmulatorConfigApplier.Outcome> ApplyAsync(EmulatorConfigFile config, string connectionString, CancellationToken cancellationToken)
    {
        using var admin = new FarmAdministrationClient(connectionString);
        return await new EmulatorConfigApplier(admin, Console.Error).ApplyAsync(config, cancellationToken);
    }
}
