using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm topic create|show|update|delete|list`.</summary>
internal static class TopicCommands
{
    public static Command Create()
    {
        var topic = new Command("topic", "Create, inspect, change and delete topics (send to a topic, receive from its subscriptions)");
        topic.Subcommands.Add(CreateCommand());
        topic.Subcommands.Add(ShowCommand());
        topic.Subcommands.Add(UpdateCommand());
        topic.Subcommands.Add(DeleteCommand());
        topic.Subcommands.Add(ListCommand());
        return topic;
    }

    private static Argument<string> NameArgument() => new("NAME") { Description = "Topic name" };

    private static Option<bool> JsonOption() => new("--json") { Description = "Print JSON (stable snake_case names) instead of a table" };

    private static Command CreateCommand()
    {
        var name = NameArgument();
        var properties = TopicPropertyOptions.Create();
        var container = new Option<long?>("--container") { Description = "Container to place the topic and its subscriptions in (default: the one with the fewest entities)", HelpName = "ID" };
        var json = JsonOption();
        var command = new Command("create", "Create a topic") { name, container, json };
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var options = new CreateTopicOptions(parseResult.GetValue(name)!);
            properties.ApplyTo(parseResult, options);
            if (parseResult.GetValue(container) is { } containerId)
            {
                options.ContainerId = containerId > 0 ? containerId : throw new CliException(ExitCodes.BadInput, $"--container must be a positive container id, not {containerId}.");
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var created = await admin.CreateTopicAsync(options, cancellationToken);
            var runtime = await admin.GetTopicRuntimePropertiesAsync(created.Name, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), created, runtime, $"Created topic '{created.Name}' in container {created.ContainerId}.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ShowCommand()
    {
        var name = NameArgument();
        var json = JsonOption();
        var command = new Command("show", "Show a topic's properties, subscription count and stored messages") { name, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var topicName = parseResult.GetValue(name)!;
            var properties = await admin.GetTopicAsync(topicName, cancellationToken);
            var runtime = await admin.GetTopicRuntimePropertiesAsync(topicName, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), properties, runtime, header: null);
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command UpdateCommand()
    {
        var name = NameArgument();
        var properties = TopicPropertyOptions.Create();
        var json = JsonOption();
        var command = new Command("update", "Change some of a topic's properties (the others keep their values); --support-ordering works on a live topic") { name, json };
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(name)!;
            var update = new TopicProperties(topicName);
            if (properties.ApplyTo(parseResult, update) == 0)
            {
                throw new CliException(ExitCodes.BadInput, "Nothing to update: give at least one property option, e.g. --support-ordering false (see 'farm topic update --help').");
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var updated = await admin.UpdateTopicAsync(update, cancellationToken);
            var runtime = await admin.GetTopicRuntimePropertiesAsync(topicName, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), updated, runtime, $"Updated topic '{updated.Name}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command DeleteCommand()
    {
        var name = NameArgument();
        var command = new Command("delete", "Delete a topic with its subscriptions, their rules and every message") { name };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(name)!;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            await admin.DeleteTopicAsync(topicName, cancellationToken);
            await Console.Out.WriteLineAsync($"Deleted topic '{topicName}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ListCommand()
    {
        var json = JsonOption();
        var command = new Command("list", "List the topics with their subscription and message counts") { json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var topics = await admin.ListTopicsWithRuntimePropertiesAsync(cancellationToken);
            if (parseResult.GetValue(json))
            {
                var array = new JsonArray([.. topics.Select(t => (JsonNode)ToJson(t.Properties, t.Runtime))]);
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(array));
                return ExitCodes.Ok;
            }

            if (topics.Count == 0)
            {
                await Console.Out.WriteLineAsync("No topics.");
                return ExitCodes.Ok;
            }

            await Console.Out.WriteAsync(CliValues.Table(
                ["NAME", "CONTAINER", "ORDERING", "SUBSCRIPTIONS", "MESSAGES", "SIZE", "TTL"],
                topics.OrderBy(t => t.Properties.Name, StringComparer.Ordinal).Select(t => new[]
                {
                    t.Properties.Name,
                    CliValues.Number(t.Properties.ContainerId),
                    t.Properties.SupportOrdering ? "on" : "off",
                    CliValues.Number(t.Runtime.SubscriptionCount),
                    CliValues.Number(t.Runtime.MessageCount),
                    CliValues.Number(t.Runtime.SizeInBytes),
                    CliValues.FormatDuration(t.Properties.DefaultMessageTimeToLive),
                })));
            return ExitCodes.Ok;
        });
        return command;
    }

    private static async Task PrintAsync(bool json, TopicProperties properties, TopicRuntimeProperties runtime, string? header)
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

        await Console.Out.WriteAsync(CliValues.Table(
            ["PROPERTY", "VALUE"],
            [
                ["name", properties.Name],
                ["container", CliValues.Number(properties.ContainerId)],
                ["support_ordering", CliValues.Bool(properties.SupportOrdering)],
                ["default_message_time_to_live", CliValues.FormatDuration(properties.DefaultMessageTimeToLive)],
                ["requires_duplicate_detection", CliValues.Bool(properties.RequiresDuplicateDetection)],
                ["duplicate_detection_history_time_window", CliValues.FormatDuration(properties.DuplicateDetectionHistoryTimeWindow)],
                ["max_size_in_megabytes", CliValues.Number(properties.MaxSizeInMegabytes)],
                ["enable_batched_operations", CliValues.Bool(properties.EnableBatchedOperations)],
                ["created_at", CliValues.Timestamp(properties.CreatedAt)],
                ["updated_at", CliValues.Timestamp(properties.UpdatedAt)],
                ["subscriptions", CliValues.Number(runtime.SubscriptionCount)],
                ["messages", CliValues.Number(runtime.MessageCount)],
                ["size_in_bytes", CliValues.Number(runtime.SizeInBytes)],
            ]));
    }

    /// <summary>The JSON shape of a topic; its names are a contract for scripts. Durations are seconds (null: infinite).</summary>
    internal static JsonObject ToJson(TopicProperties properties, TopicRuntimeProperties runtime) => new()
    {
        ["name"] = properties.Name,
        ["container_id"] = properties.ContainerId,
        ["support_ordering"] = properties.SupportOrdering,
        ["default_message_time_to_live_seconds"] = CliValues.DurationSeconds(properties.DefaultMessageTimeToLive),
        ["requires_duplicate_detection"] = properties.RequiresDuplicateDetection,
        ["duplicate_detection_history_time_window_seconds"] = CliValues.DurationSeconds(properties.DuplicateDetectionHistoryTimeWindow),
        ["max_size_in_megabytes"] = properties.MaxSizeInMegabytes,
        ["enable_batched_operations"] = properties.EnableBatchedOperations,
        ["created_at"] = CliValues.TimestampJson(properties.CreatedAt),
        ["updated_at"] = CliValues.TimestampJson(properties.UpdatedAt),
        ["subscription_count"] = runtime.SubscriptionCount,
        ["message_count"] = runtime.MessageCount,
        ["size_in_bytes"] = runtime.SizeInBytes,
    };
}

/// <summary>The property options of `topic create` and `topic update`.</summary>
internal static class TopicPropertyOptions
{
    public static PropertyOptions<TopicSettings> Create() => new PropertyOptions<TopicSettings>()
        .DefaultTtl()
        .DuplicateDetection()
        .DuplicateWindow()
        .MaxSizeMb("Maximum size of the topic's stored messages in megabytes (default 1024)")
        .Flag("--support-ordering",
            "Deliver to every subscription in send order (true|false, default false); off lets the farm fan out in parallel, faster",
            (settings, value) => settings.SupportOrdering = value)
        .BatchedOperations();
}
