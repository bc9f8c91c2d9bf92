namespace Farm.Client;

public enum FarmReceiveMode
{
    /// <summary>Messages are locked for the receiver and settled explicitly (at-least-once).</summary>
    PeekLock,

    /// <summary>Messages are deleted as they are handed out (at-most-once).</summary>
    ReceiveAndDelete,
}

public enum SubQueue
{
    None,

    /// <summary>The entity's dead-letter queue: "queue/$DeadLetterQueue", "topic/Subscriptions/sub/$DeadLetterQueue".</summary>
    DeadLetter,
}

public sealed record FarmReceiverOptions
{
    public FarmReceiveMode ReceiveMode { get; init; } = FarmReceiveMode.PeekLock;

    /// <summary>
    /// Messages to keep buffered ahead of the application. 0: only what a pending receive asks for.
    /// Prefetched peek-lock messages hold their locks while they wait in the buffer.
    /// </summary>
    public int PrefetchCount { get; init; }

    public SubQueue SubQueue { get; init; } = SubQueue.None;
}

/// <summary>Entity path helpers.</summary>
public static class FarmEntityPath
{
    public const string DeadLetterQueueSuffix = "$DeadLetterQueue";

    /// <summary>The segment between a topic and its subscription in a path: "topic/Subscriptions/sub".</summary>
    public const string SubscriptionsSegment = "Subscriptions";

    /// <summary>"queue/$DeadLetterQueue", "topic/Subscriptions/sub/$DeadLetterQueue".</summary>
    public static string FormatDeadLetterPath(string entityPath) => $"{entityPath.TrimEnd('/')}/{DeadLetterQueueSuffix}";

    /// <summary>"topic/Subscriptions/sub": the path receivers and processors open for a subscription.</summary>
    public static string FormatSubscriptionPath(string topicName, string subscriptionName)
    {
        ValidateName(topicName, nameof(topicName), "topic");
        ValidateName(subscriptionName, nameof(subscriptionName), "subscription");
        return SubscriptionPath(topicName.Trim(), subscriptionName.Trim());
    }

    internal static string SubscriptionPath(string topicName, string subscriptionName) => $"{topicName}/{SubscriptionsSegment}/{subscriptionName}";

    private static void ValidateName(string name, string parameter, string what)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name, parameter);
        if (name.Contains('/', StringComparison.Ordinal))
        {
            throw new ArgumentException($"The {what} name '{name}' must not contain '/'; pass the topic and subscription names separately.", parameter);
        }
    }

    internal static string Apply(string entityPath, SubQueue subQueue) => subQueue switch
    {
        SubQueue.DeadLetter when !entityPath.EndsWith("/" + DeadLetterQueueSuffix, StringComparison.OrdinalIgnoreCase) => FormatDeadLetterPath(entityPath),
        _ => entityPath,
    };
}
