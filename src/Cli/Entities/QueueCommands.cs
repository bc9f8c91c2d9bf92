using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm queue create|show|update|delete|list|purge`.</summary>
internal static class QueueCommands
{
    public static Command Create()
    {
        var command = Entities();
        command.Subcommands.Add(Messaging.PurgeCommand.Create());
        return command;
    }

    private static Command Entities() => new EntityCommands<QueueSettings, QueueProperties, QueueRuntimeProperties>
    {
        Noun = "queue",
        Description = "Create, inspect, change and delete queues",
        ContainerDescription = "Container to place the queue in (default: the one with the fewest entities)",
        Help = (
            "Create a queue",
            "Show a queue's properties and message counts",
            "Change some of a queue's properties (the others keep their values)",
            "Delete a queue and its messages",
            "List the queues with their message counts"),
        UpdateExample = "--lock-duration 30s",
        PropertyOptions = QueuePropertyOptions.Create,
        NewCreate = name => new CreateQueueOptions(name),
        SetContainer = (options, container) => ((CreateQueueOptions)options).ContainerId = container,
        NewUpdate = name => new QueueProperties(name),
        Identity = queue => (queue.Name, queue.ContainerId),
        CreateAsync = (admin, options, ct) => admin.CreateQueueAsync((CreateQueueOptions)options, ct),
        GetAsync = (admin, name, ct) => admin.GetQueueAsync(name, ct),
        GetRuntimeAsync = (admin, name, ct) => admin.GetQueueRuntimePropertiesAsync(name, ct),
        UpdateAsync = (admin, queue, ct) => admin.UpdateQueueAsync(queue, ct),
        DeleteAsync = (admin, name, ct) => admin.DeleteQueueAsync(name, ct),
        ListAsync = (admin, ct) => admin.ListQueuesWithRuntimePropertiesAsync(ct),
        ToJson = ToJson,
        Rows = Rows,
        ListTable = (
            ["NAME", "CONTAINER", "ACTIVE", "SCHEDULED", "DEFERRED", "DEAD-LETTER", "LOCK", "MAX-DELIVERY", "TTL"],
            (q, runtime) =>
            [
                q.Name,
                CliValues.Number(q.ContainerId),
                CliValues.Number(runtime.ActiveMessageCount),
                CliValues.Number(runtime.ScheduledMessageCount),
                CliValues.Number(runtime.DeferredMessageCount),
                CliValues.Number(runtime.DeadLetterMessageCount),
                CliValues.FormatDuration(q.LockDuration),
                CliValues.Number(q.MaxDeliveryCount),
                CliValues.FormatDuration(q.DefaultMessageTimeToLive),
            ]),
    }.Build();

    private static IEnumerable<string[]> Rows(QueueProperties properties, QueueRuntimeProperties runtime) =>
    [
        ["name", properties.Name],
        ["container", CliValues.Number(properties.ContainerId)],
        ["lock_duration", CliValues.FormatDuration(properties.LockDuration)],
        ["max_delivery_count", CliValues.Number(properties.MaxDeliveryCount)],
        ["default_message_time_to_live", CliValues.FormatDuration(properties.DefaultMessageTimeToLive)],
        ["dead_lettering_on_message_expiration", CliValues.Bool(properties.DeadLetteringOnMessageExpiration)],
        ["requires_duplicate_detection", CliValues.Bool(properties.RequiresDuplicateDetection)],
        ["duplicate_detection_history_time_window", CliValues.FormatDuration(properties.DuplicateDetectionHistoryTimeWindow)],
        ["requires_session", CliValues.Bool(properties.RequiresSession)],
        ["forward_to", properties.ForwardTo ?? "-"],
        ["forward_dead_lettered_messages_to", properties.ForwardDeadLetteredMessagesTo ?? "-"],
        ["max_size_in_megabytes", CliValues.Number(properties.MaxSizeInMegabytes)],
        ["enable_batched_operations", CliValues.Bool(properties.EnableBatchedOperations)],
        ["created_at", CliValues.Timestamp(properties.CreatedAt)],
        ["updated_at", CliValues.Timestamp(properties.UpdatedAt)],
        .. MessageCountsOutput.Rows(runtime),
    ];

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
        ["counts"] = MessageCountsOutput.ToJson(runtime),
    };
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
        .ForwardDeadLetteredTo(["--forward-dead-lettered-to", "--forward-dead-letters-to"], "Forward dead-lettered messages to this entity ('' clears)")
        .MaxSizeMb("Maximum queue size in megabytes (default 1024)");
}
