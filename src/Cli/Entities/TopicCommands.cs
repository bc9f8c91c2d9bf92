using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm topic create|show|update|delete|list`.</summary>
internal static class TopicCommands
{
    public static Command Create() => new EntityCommands<TopicSettings, TopicProperties, TopicRuntimeProperties>
    {
        Noun = "topic",
        Description = "Create, inspect, change and delete topics (send to a topic, receive from its subscriptions)",
        ContainerDescription = "Container to place the topic and its subscriptions in (default: the one with the fewest entities)",
        Help = (
            "Create a topic",
            "Show a topic's properties, subscription count and stored messages",
            "Change some of a topic's properties (the others keep their values); --support-ordering works on a live topic",
            "Delete a topic with its subscriptions, their rules and every message",
            "List the topics with their subscription and message counts"),
        UpdateExample = "--support-ordering false",
        PropertyOptions = TopicPropertyOptions.Create,
        NewCreate = name => new CreateTopicOptions(name),
        SetContainer = (options, container) => ((CreateTopicOptions)options).ContainerId = container,
        NewUpdate = name => new TopicProperties(name),
        Identity = topic => (topic.Name, topic.ContainerId),
        CreateAsync = (admin, options, ct) => admin.CreateTopicAsync((CreateTopicOptions)options, ct),
        GetAsync = (admin, name, ct) => admin.GetTopicAsync(name, ct),
        GetRuntimeAsync = (admin, name, ct) => admin.GetTopicRuntimePropertiesAsync(name, ct),
        UpdateAsync = (admin, topic, ct) => admin.UpdateTopicAsync(topic, ct),
        DeleteAsync = (admin, name, ct) => admin.DeleteTopicAsync(name, ct),
        ListAsync = (admin, ct) => admin.ListTopicsWithRuntimePropertiesAsync(ct),
        ToJson = ToJson,
        Rows = Rows,
        ListTable = (
            ["NAME", "CONTAINER", "ORDERING", "SUBSCRIPTIONS", "MESSAGES", "SIZE", "TTL"],
            (t, runtime) =>
            [
                t.Name,
                CliValues.Number(t.ContainerId),
                t.SupportOrdering ? "on" : "off",
                CliValues.Number(runtime.SubscriptionCount),
                CliValues.Number(runtime.MessageCount),
                CliValues.Number(runtime.SizeInBytes),
                CliValues.FormatDuration(t.DefaultMessageTimeToLive),
            ]),
    }.Build();

    private static IEnumerable<string[]> Rows(TopicProperties properties, TopicRuntimeProperties runtime) =>
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
    ];

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
