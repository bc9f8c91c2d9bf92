namespace Farm.Client;

/// <summary>
/// The settable properties of a subscription, named and defaulted as in Azure Service Bus. Like
/// <see cref="QueueSettings"/>, the object remembers which properties were assigned: a create or
/// update sends only those.
/// </summary>
public abstract class SubscriptionSettings : IReceiverSettings, IAssignedProperties
{
    private readonly AssignedProperties _assigned = new();
    private TimeSpan _lockDuration = QueueSettings.DefaultLockDuration;
    private int _maxDeliveryCount = QueueSettings.DefaultMaxDeliveryCount;
    private TimeSpan _defaultMessageTimeToLive = TimeSpan.MaxValue;
    private bool _deadLetteringOnMessageExpiration;
    private bool _enableDeadLetteringOnFilterEvaluationExceptions = true;
    private bool _requiresSession;
    private string? _forwardTo;
    private string? _forwardDeadLetteredMessagesTo;
    private bool _enableBatchedOperations = true;

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

    /// <summary>How long a peek-lock holds a message. Default 1 minute.</summary>
    public TimeSpan LockDuration
    {
        get => _lockDuration;
        set => _assigned.Set(ref _lockDuration, AssignedProperties.Positive(value));
    }

    /// <summary>Deliveries before a message is dead-lettered. Default 10.</summary>
    public int MaxDeliveryCount
    {
        get => _maxDeliveryCount;
        set => _assigned.Set(ref _maxDeliveryCount, AssignedProperties.AtLeastOne(value));
    }

    /// <summary>TimeSpan.MaxValue (the default): messages never expire.</summary>
    public TimeSpan DefaultMessageTimeToLive
    {
        get => _defaultMessageTimeToLive;
        set => _assigned.Set(ref _defaultMessageTimeToLive, AssignedProperties.Positive(value));
    }

    public bool DeadLetteringOnMessageExpiration
    {
        get => _deadLetteringOnMessageExpiration;
        set => _assigned.Set(ref _deadLetteringOnMessageExpiration, value);
    }

    /// <summary>
    /// Default true: a message whose filter cannot be evaluated goes to the dead-letter queue
    /// (reason "FilterEvaluationException"); false drops it for this subscription.
    /// </summary>
    public bool EnableDeadLetteringOnFilterEvaluationExceptions
    {
        get => _enableDeadLetteringOnFilterEvaluationExceptions;
        set => _assigned.Set(ref _enableDeadLetteringOnFilterEvaluationExceptions, value);
    }

    public bool RequiresSession
    {
        get => _requiresSession;
        set => _assigned.Set(ref _requiresSession, value);
    }

    /// <summary>A queue or topic every message is forwarded to; null or empty clears it. Never the subscription's own topic.</summary>
    public string? ForwardTo
    {
        get => _forwardTo;
        set => _assigned.Set(ref _forwardTo, string.IsNullOrWhiteSpace(value) ? null : value);
    }

    public string? ForwardDeadLetteredMessagesTo
    {
        get => _forwardDeadLetteredMessagesTo;
        set => _assigned.Set(ref _forwardDeadLetteredMessagesTo, string.IsNullOrWhiteSpace(value) ? null : value);
    }

    public bool EnableBatchedOperations
    {
        get => _enableBatchedOperations;
        set => _assigned.Set(ref _enableBatchedOperations, value);
    }

    internal bool IsAssigned(string property) => _assigned.Contains(property);

    bool IAssignedProperties.IsAssigned(string property) => IsAssigned(property);

    internal int AssignedCount => _assigned.Count;

    /// <summary>Loads server values without marking them assigned.</summary>
    internal void Load(Contracts.V1.SubscriptionProperties? proto)
    {
        SubscriptionMapper.Load(this, proto);
        _assigned.Clear();
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
public sealed class SubscriptionRuntimeProperties
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
