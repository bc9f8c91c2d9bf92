using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm queue create|show|update|delete|list`.</summary>
internal static class QueueCommands
{
    public static Command Create()
    {
        var queue = new Command("queue", "Create, inspect, change and delete queues");
        queue.Subcommands.Add(CreateCommand());
        queue.Subcommands.Add(ShowCommand());
        queue.Subcommands.Add(UpdateCommand());
        queue.Subcommands.Add(DeleteCommand());
        queue.Subcommands.Add(ListCommand());
        return queue;
    }

    private static Argument<string> NameArgument() => new("NAME") { Description = "Queue name" };

    private static Option<bool> JsonOption() => new("--json") { Description = "Print JSON (stable snake_case names) instead of a table" };

    private static Command CreateCommand()
    {
        var name = NameArgument();
        var properties = QueuePropertyOptions.Create();
        var container = new Option<long?>("--container") { Description = "Container to place the queue in (default: the one with the fewest entities)", HelpName = "ID" };
        var json = JsonOption();
        var command = new Command("create", "Create a queue") { name, container, json };
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var options = new CreateQueueOptions(parseResult.GetValue(name)!);
            properties.ApplyTo(parseResult, options);
            if (parseResult.GetValue(container) is { } containerId)
            {
                options.ContainerId = containerId > 0 ? containerId : throw new CliException(ExitCodes.BadInput, $"--container must be a positive container id, not {containerId}.");
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var created = await admin.CreateQueueAsync(options, cancellationToken);
            var runtime = await admin.GetQueueRuntimePropertiesAsync(created.Name, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), created, runtime, $"Created queue '{created.Name}' in container {created.ContainerId}.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ShowCommand()
    {
        var name = NameArgument();
        var json = JsonOption();
        var command = new Command("show", "Show a queue's properties and message counts") { name, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var queueName = parseResult.GetValue(name)!;
            var properties = await admin.GetQueueAsync(queueName, cancellationToken);
            var runtime = await admin.GetQueueRuntimePropertiesAsync(queueName, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), properties, runtime, header: null);
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command UpdateCommand()
    {
        var name = NameArgument();
        var properties = QueuePropertyOptions.Create();
        var json = JsonOption();
        var command = new Command("update", "Change some of a queue's properties (the others keep their values)") { name, json };
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var queueName = parseResult.GetValue(name)!;
            var update = new QueueProperties(queueName);
            if (properties.ApplyTo(parseResult, update) == 0)
            {
                throw new CliException(ExitCodes.BadInput, "Nothing to update: give at least one property option, e.g. --lock-duration 30s (see 'farm queue update --help').");
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var updated = await admin.UpdateQueueAsync(update, cancellationToken);
            var runtime = await admin.GetQueueRuntimePropertiesAsync(queueName, cancellationToken);
            await PrintAsync(parseResult.GetValue(json), updated, runtime, $"Updated queue '{updated.Name}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command DeleteCommand()
    {
        var name = NameArgument();
        var command = new Command("delete", "Delete a queue and its messages") { name };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var queueName = parseResult.GetValue(name)!;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            await admin.DeleteQueueAsync(queueName, cancellationToken);
            await Console.Out.WriteLineAsync($"Deleted queue '{queueName}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ListCommand()
    {
        var json = JsonOption();
        var command = new Command("list", "List the queues with their message counts") { json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var queues = await admin.ListQueuesWithRuntimePropertiesAsync(cancellationToken);
            if (parseResult.GetValue(json))
            {
                var array = new JsonArray([.. queues.Select(q => (JsonNode)ToJson(q.Properties, q.Runtime))]);
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(array));
                return ExitCodes.Ok;
            }

            if (queues.Count == 0)
            {
                await Console.Out.WriteLineAsync("No queues.");
                return ExitCodes.Ok;
            }

            await Console.Out.WriteAsync(CliValues.Table(
                ["NAME", "CONTAINER", "ACTIVE", "SCHEDULED", "DEFERRED", "DEAD-LETTER", "LOCK", "MAX-DELIVERY", "TTL"],
                queues.OrderBy(q => q.Properties.Name, StringComparer.Ordinal).Select(q => new[]
                {
                    q.Properties.Name,
                    CliValues.Number(q.Properties.ContainerId),
                    CliValues.Number(q.Runtime.ActiveMessageCount),
                    CliValues.Number(q.Runtime.ScheduledMessageCount),
                    CliValues.Number(q.Runtime.DeferredMessageCount),
                    CliValues.Number(q.Runtime.DeadLetterMessageCount),
                    CliValues.FormatDuration(q.Properties.LockDuration),
                    CliValues.Number(q.Properties.MaxDeliveryCount),
                    CliValues.FormatDuration(q.Properties.DefaultMessageTimeToLive),
                })));
            return ExitCodes.Ok;
        });
        return command;
    }

    private static async Task PrintAsync(bool json, QueueProperties properties, QueueRuntimeProperties runtime, string? header)
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
                ["lock_duration", CliValues.FormatDuration(properties.LockDuration)],
                ["max_delivery_count", CliValues.Number(properties.MaxDeliveryCount)],
                ["default_message_time_to_live", CliValues.FormatDuration(properties.DefaultMessageTimeToLive)],
                ["dead_lettering_on_message_expiration", Bool(properties.DeadLetteringOnMessageExpiration)],
                ["requires_duplicate_detection", Bool(properties.RequiresDuplicateDetection)],
                ["duplicate_detection_history_time_window", CliValues.FormatDuration(properties.DuplicateDetectionHistoryTimeWindow)],
                ["requires_session", Bool(properties.RequiresSession)],
                ["forward_to", properties.ForwardTo ?? "-"],
                ["forward_dead_lettered_messages_to", properties.ForwardDeadLetteredMessagesTo ?? "-"],
                ["max_size_in_megabytes", CliValues.Number(properties.MaxSizeInMegabytes)],
                ["enable_batched_operations", Bool(properties.EnableBatchedOperations)],
                ["created_at", CliValues.Timestamp(properties.CreatedAt)],
                ["updated_at", CliValues.Timestamp(properties.UpdatedAt)],
                ["active_messages", CliValues.Number(runtime.ActiveMessageCount)],
                ["scheduled_messages", CliValues.Number(runtime.ScheduledMessageCount)],
                ["deferred_messages", CliValues.Number(runtime.DeferredMessageCount)],
                ["dead_letter_messages", CliValues.Number(runtime.DeadLetterMessageCount)],
                ["locked_messages", CliValues.Number(runtime.LockedMessageCount)],
                ["total_messages", CliValues.Number(runtime.TotalMessageCount)],
                ["size_in_bytes", CliValues.Number(runtime.SizeInBytes)],
            ]));
    }

    /// <summary>The JSON shape of a queue; its names are a contract for scripts. Durations are seconds (null: infinite).</summary>
    internal static JsonObject ToJson(QueueProperties properties, QueueRuntimeProperties runtime) => new()
    {
        ["name"] = properties.Name,
        ["container_id"] = properties.ContainerId,
        ["lock_duration_seconds"] = CliValues.DurationSeconds(properties.LockDuration),
        ["max_delivery_count"] = properties.MaxDeliveryCount,
        ["default_message_time_to_live_seconds"] = CliValues.DurationSeconds(properties.DefaultMessageTimeToLive),
        ["dead_lettering_on_message_expiration"] = properties.DeadLetteringOnMessageExpiration,
        ["requires_duplicate_detection"] = properties.RequiresDuplicateDetection,
        ["duplicate_detection_history_time_window_seconds"] = CliValues.DurationSeconds(properties.DuplicateDetectionHistoryTimeWindow),
        ["requires_session"] = properties.RequiresSession,
        ["forward_to"] = properties.ForwardTo,
        ["forward_dead_lettered_messages_to"] = properties.ForwardDeadLetteredMessagesTo,
        ["max_size_in_megabytes"] = properties.MaxSizeInMegabytes,
        ["enable_batched_operations"] = properties.EnableBatchedOperations,
        ["created_at"] = CliValues.TimestampJson(properties.CreatedAt),
        ["updated_at"] = CliValues.TimestampJson(properties.UpdatedAt),
        ["counts"] = new JsonObject
        {
            ["active"] = runtime.ActiveMessageCount,
            ["scheduled"] = runtime.ScheduledMessageCount,
            ["deferred"] = runtime.DeferredMessageCount,
            ["dead_letter"] = runtime.DeadLetterMessageCount,
            ["locked"] = runtime.LockedMessageCount,
            ["total"] = runtime.TotalMessageCount,
            ["size_in_bytes"] = runtime.SizeInBytes,
        },
    };

    private static string Bool(bool value) => value ? "true" : "false";
}

/// <summary>The property options of `queue create` and `queue update`.</summary>
internal static class QueuePropertyOptions
{
    public static PropertyOptions<QueueSettings> Create() => new PropertyOptions<QueueSettings>()
        .LockDuration()
        .MaxDeliveryCount()
        .DefaultTtl()
        .DeadLetterOnExpiration("Dead-letter expired messages instead of dropping them (true|false)")
        .DuplicateDetection()
        .DuplicateWindow()
        .ForwardTo("Forward every message to this entity ('' clears)")
        .ForwardDeadLetteredTo(["--forward-dead-lettered-to"], "Forward dead-lettered messages to this entity ('' clears)")
        .MaxSizeMb("Maximum queue size in megabytes (default 1024)");
}
