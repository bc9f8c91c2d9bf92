namespace Farm.Client;

/// <summary>
/// The settable properties of a subscription, named and defaulted as in Azure Service Bus. Like
/// <see cref="QueueSettings"/>, the object remembers which properties were assigned: a create or
/// update sends only those.
/// </summary>
public abstract class SubscriptionSettings : ReceiverEntitySettings
{
    private bool _enableDeadLetteringOnFilterEvaluationExceptions = true;

    private protected SubscriptionSettings(string topicName, string subscriptionName)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(topicName);
        ArgumentException.ThrowIfNullOrWhiteSpace(subscriptionName);
        TopicName = topicName;
        SubscriptionName = subscriptionName;
    }

    public string TopicName { get; }

    public string SubscriptionName { get; }

    /// <summary>"topic/Subscriptions/name": what receivers and processors open.</summary>
    public string Path => FarmEntityPath.SubscriptionPath(TopicName, SubscriptionName);

    /// <summary>
    /// Default true: a message whose filter cannot be evaluated goes to the dead-letter queue
    /// (reason "FilterEvaluationException"); false drops it for this subscription.
    /// </summary>
    public bool EnableDeadLetteringOnFilterEvaluationExceptions
    {
        get => _enableDeadLetteringOnFilterEvaluationExceptions;
        set => Assigned.Set(ref _enableDeadLetteringOnFilterEvaluationExceptions, value);
    }

    /// <summary>Loads server values without marking them assigned.</summary>
    internal void Load(Contracts.V1.SubscriptionProperties? proto)
    {
        SubscriptionMapper.Load(this, proto);
        Assigned.Clear();
    }
}

/// <summary>What to create, like Azure's CreateSubscriptionOptions.</summary>
public sealed class CreateSubscriptionOptions : SubscriptionSettings
{
    public CreateSubscriptionOptions(string topicName, string subscriptionName)
        : base(topicName, subscriptionName)
    {
    }
}

/// <summary>A subscription's properties as the farm reports them; change some and pass to UpdateSubscriptionAsync.</summary>
public sealed class SubscriptionProperties : SubscriptionSettings
{
    public SubscriptionProperties(string topicName, string subscriptionName)
        : base(topicName, subscriptionName)
    {
    }

    public DateTimeOffset CreatedAt { get; internal set; }

    public DateTimeOffset UpdatedAt { get; internal set; }
}

/// <summary>Message counts of a subscription, like Azure's SubscriptionRuntimeProperties.</summary>
public sealed class SubscriptionRuntimeProperties : IMessageCounts
{
    internal SubscriptionRuntimeProperties(string topicName, string subscriptionName)
    {
        TopicName = topicName;
        SubscriptionName = subscriptionName;
    }

    public string TopicName { get; }

    public string SubscriptionName { get; }

    public long ActiveMessageCount { get; internal init; }

    public long ScheduledMessageCount { get; internal init; }

    public long DeferredMessageCount { get; internal init; }

    public long DeadLetterMessageCount { get; internal init; }

    /// <summary>Messages currently locked by receivers (a Farm addition).</summary>
    public long LockedMessageCount { get; internal init; }

    public long TotalMessageCount { get; internal init; }

    public long SizeInBytes { get; internal init; }

    public DateTimeOffset CreatedAt { get; internal init; }

    public DateTimeOffset UpdatedAt { get; internal init; }
}
