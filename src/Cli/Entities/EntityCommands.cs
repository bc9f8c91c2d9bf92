using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>
/// `farm queue` and `farm topic` are the same five commands (create, show, update, delete, list)
/// over a different entity: this builds them from what differs, their texts and SDK calls.
/// </summary>
/// <typeparam name="TSettings">What the property options set (QueueSettings, TopicSettings).</typeparam>
/// <typeparam name="TProperties">What the farm reports and an update takes (QueueProperties, TopicProperties).</typeparam>
/// <typeparam name="TRuntime">The entity's counts.</typeparam>
internal sealed class EntityCommands<TSettings, TProperties, TRuntime>
    where TSettings : class
    where TProperties : TSettings
{
    /// <summary>"queue" or "topic": the command's name and the word in its messages.</summary>
    public required string Noun { get; init; }

    public required string Description { get; init; }

    public required string ContainerDescription { get; init; }

    /// <summary>Help of create, show, update, delete and list.</summary>
    public required (string Create, string Show, string Update, string Delete, string List) Help { get; init; }

    /// <summary>A property option to suggest when an update names none, e.g. "--lock-duration 30s".</summary>
    public required string UpdateExample { get; init; }

    public required Func<PropertyOptions<TSettings>> PropertyOptions { get; init; }

    /// <summary>A create request for a name, and how to place it in a container.</summary>
    public required Func<string, TSettings> NewCreate { get; init; }

    public required Action<TSettings, long> SetContainer { get; init; }

    public required Func<string, TProperties> NewUpdate { get; init; }

    public required Func<TProperties, (string Name, long ContainerId)> Identity { get; init; }

    public required Func<FarmAdministrationClient, TSettings, CancellationToken, Task<TProperties>> CreateAsync { get; init; }

    public required Func<FarmAdministrationClient, string, CancellationToken, Task<TProperties>> GetAsync { get; init; }

    public required Func<FarmAdministrationClient, string, CancellationToken, Task<TRuntime>> GetRuntimeAsync { get; init; }

    public required Func<FarmAdministrationClient, TProperties, CancellationToken, Task<TProperties>> UpdateAsync { get; init; }

    public required Func<FarmAdministrationClient, string, CancellationToken, Task> DeleteAsync { get; init; }

    public required Func<FarmAdministrationClient, CancellationToken, Task<IReadOnlyList<(TProperties Properties, TRuntime Runtime)>>> ListAsync { get; init; }

    /// <summary>The entity's JSON shape (a contract for scripts).</summary>
    public required Func<TProperties, TRuntime, JsonObject> ToJson { get; init; }

    /// <summary>The PROPERTY / VALUE rows of show, create and update.</summary>
    public required Func<TProperties, TRuntime, IEnumerable<string[]>> Rows { get; init; }

    /// <summary>The columns of list, and one entity's row.</summary>
    public required (string[] Columns, Func<TProperties, TRuntime, string[]> Row) ListTable { get; init; }

    public Command Build()
    {
        var command = new Command(Noun, Description);
        command.Subcommands.Add(CreateCommand());
        command.Subcommands.Add(ShowCommand());
        command.Subcommands.Add(UpdateCommand());
        command.Subcommands.Add(DeleteCommand());
        command.Subcommands.Add(ListCommand());
        return command;
    }

    private Argument<string> NameArgument() => new("NAME") { Description = $"{char.ToUpperInvariant(Noun[0])}{Noun[1..]} name" };


    private Command CreateCommand()
    {
        var name = NameArgument();
        var properties = PropertyOptions();
        var container = new Option<long?>("--container") { Description = ContainerDescription, HelpName = "ID" };
        var json = CliValues.JsonOption();
        var command = new Command("create", Help.Create) { name, container, json };
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var options = NewCreate(parseResult.GetValue(name)!);
            properties.ApplyTo(parseResult, options);
            if (parseResult.GetValue(container) is { } containerId)
            {
                SetContainer(options, containerId > 0 ? containerId : throw new CliException(ExitCodes.BadInput, $"--container must be a positive container id, not {containerId}."));
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var created = await CreateAsync(admin, options, cancellationToken);
            var (createdName, createdIn) = Identity(created);
            var runtime = await GetRuntimeAsync(admin, createdName, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), created, runtime, $"Created {Noun} '{createdName}' in container {createdIn}.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private Command ShowCommand()
    {
        var name = NameArgument();
        var json = CliValues.JsonOption();
        var command = new Command("show", Help.Show) { name, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var entityName = parseResult.GetValue(name)!;
            var properties = await GetAsync(admin, entityName, cancellationToken);
            var runtime = await GetRuntimeAsync(admin, entityName, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), properties, runtime, header: null);
            return ExitCodes.Ok;
        });
        return command;
    }

    private Command UpdateCommand()
    {
        var name = NameArgument();
        var properties = PropertyOptions();
        var json = CliValues.JsonOption();
        var command = new Command("update", Help.Update) { name, json };
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var entityName = parseResult.GetValue(name)!;
            var update = NewUpdate(entityName);
            if (properties.ApplyTo(parseResult, update) == 0)
            {
                throw new CliException(ExitCodes.BadInput, $"Nothing to update: give at least one property option, e.g. {UpdateExample} (see 'farm {Noun} update --help').");
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var updated = await UpdateAsync(admin, update, cancellationToken);
            var runtime = await GetRuntimeAsync(admin, entityName, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), updated, runtime, $"Updated {Noun} '{Identity(updated).Name}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private Command DeleteCommand()
    {
        var name = NameArgument();
        var command = new Command("delete", Help.Delete) { name };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var entityName = parseResult.GetValue(name)!;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            await DeleteAsync(admin, entityName, cancellationToken);
            await Console.Out.WriteLineAsync($"Deleted {Noun} '{entityName}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private Command ListCommand()
    {
        var json = CliValues.JsonOption();
        var command = new Command("list", Help.List) { json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var entities = await ListAsync(admin, cancellationToken);
            if (parseResult.GetValue(json))
            {
                var array = new JsonArray([.. entities.Select(e => (JsonNode)ToJson(e.Properties, e.Runtime))]);
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(array));
                return ExitCodes.Ok;
            }

            if (entities.Count == 0)
            {
                await Console.Out.WriteLineAsync($"No {Noun}s.");
                return ExitCodes.Ok;
            }

            await Console.Out.WriteAsync(CliValues.Table(
                ListTable.Columns,
                entities.OrderBy(e => Identity(e.Properties).Name, StringComparer.Ordinal).Select(e => ListTable.Row(e.Properties, e.Runtime))));
            return ExitCodes.Ok;
        });
        return command;
    }

    private async Task PrintAsync(bool json, TProperties properties, TRuntime runtime, string? header)
    {
        if (json)
        {
            await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(ToJson(properties, runtime)));
            return;
        }

        if (header is not null)
        {
            await Console.Out.WriteLineAsync(header);
        }

        await Console.Out.WriteAsync(CliValues.Table(["PROPERTY", "VALUE"], [.. Rows(properties, runtime)]));
    }
}

/// <summary>How queues and subscriptions show their message counts, in tables and in JSON.</summary>
internal static class MessageCountsOutput
{
    public static IEnumerable<string[]> Rows(IMessageCounts counts) =>
    [
        ["active_messages", CliValues.Number(counts.ActiveMessageCount)],
        ["scheduled_messages", CliValues.Number(counts.ScheduledMessageCount)],
        ["deferred_messages", CliValues.Number(counts.DeferredMessageCount)],
        ["dead_letter_messages", CliValues.Number(counts.DeadLetterMessageCount)],
        ["locked_messages", CliValues.Number(counts.LockedMessageCount)],
        ["total_messages", CliValues.Number(counts.TotalMessageCount)],
        ["size_in_bytes", CliValues.Number(counts.SizeInBytes)],
    ];

    public static JsonObject ToJson(IMessageCounts counts) => new()
    {
        ["active"] = counts.ActiveMessageCount,
        ["scheduled"] = counts.ScheduledMessageCount,
        ["deferred"] = counts.DeferredMessageCount,
        ["dead_letter"] = counts.DeadLetterMessageCount,
        ["locked"] = counts.LockedMessageCount,
        ["total"] = counts.TotalMessageCount,
        ["size_in_bytes"] = counts.SizeInBytes,
    };
}
