namespace Farm.Client;

/// <summary>
/// The settable properties of a topic, named and defaulted as in Azure Service Bus. Like
/// <see cref="QueueSettings"/>, the object remembers which properties were assigned: a create or
/// update sends only those.
/// </summary>
public abstract class TopicSettings : EntitySettings, ISendTargetSettings
{
    private bool _requiresDuplicateDetection;
    private TimeSpan _duplicateDetectionHistoryTimeWindow = QueueSettings.DefaultDuplicateDetectionHistoryTimeWindow;
    private long _maxSizeInMegabytes = QueueSettings.DefaultMaxSizeInMegabytes;
    private bool _supportOrdering;

    private protected TopicSettings(string name)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        Name = name;
    }

    public string Name { get; }

    public bool RequiresDuplicateDetection
    {
        get => _requiresDuplicateDetection;
        set => Assigned.Set(ref _requiresDuplicateDetection, value);
    }

    /// <summary>Default 10 minutes.</summary>
    public TimeSpan DuplicateDetectionHistoryTimeWindow
    {
        get => _duplicateDetectionHistoryTimeWindow;
        set => Assigned.Set(ref _duplicateDetectionHistoryTimeWindow, AssignedProperties.Positive(value));
    }

    /// <summary>Limits the messages the topic stores (once for all its subscriptions). Default 1024.</summary>
    public long MaxSizeInMegabytes
    {
        get => _maxSizeInMegabytes;
        set => Assigned.Set(ref _maxSizeInMegabytes, AssignedProperties.AtLeastOne(value));
    }

    /// <summary>
    /// Default false, as in Azure. On: every subscription receives the topic's messages in the
    /// order the topic accepted them. Off: the farm may fan out in parallel and out of order, and
    /// is faster. Can be changed on a live topic.
    /// </summary>
    public bool SupportOrdering
    {
        get => _supportOrdering;
        set => Assigned.Set(ref _supportOrdering, value);
    }

    /// <summary>Loads server values without marking them assigned.</summary>
    internal void Load(Contracts.V1.TopicProperties? proto)
    {
        TopicMapper.Load(this, proto);
        Assigned.Clear();
    }
}

/// <summary>What to create, like Azure's CreateTopicOptions.</summary>
public sealed class CreateTopicOptions : TopicSettings
{
    public CreateTopicOptions(string name)
        : base(name)
    {
    }

    /// <summary>The container to place the topic (and all its subscriptions) in; null picks the container with the fewest entities.</summary>
    public long? ContainerId { get; set; }
}

/// <summary>A topic's properties as the farm reports them; change some and pass to UpdateTopicAsync.</summary>
public sealed class TopicProperties : TopicSettings
{
    public TopicProperties(string name)
        : base(name)
    {
    }

    public long ContainerId { get; internal set; }

    public DateTimeOffset CreatedAt { get; internal set; }

    public DateTimeOffset UpdatedAt { get; internal set; }
}

/// <summary>What a topic holds, like Azure's TopicRuntimeProperties.</summary>
public sealed class TopicRuntimeProperties
{
    internal TopicRuntimeProperties(string name) => Name = name;

    public string Name { get; }

    public int SubscriptionCount { get; internal init; }

    /// <summary>Messages the topic stores, each once for all its subscriptions (a Farm addition).</summary>
    public long MessageCount { get; internal init; }

    /// <summary>The bytes of those messages: what MaxSizeInMegabytes limits.</summary>
    public long SizeInBytes { get; internal init; }

    public DateTimeOffset CreatedAt { get; internal init; }

    public DateTimeOffset UpdatedAt { get; internal init; }
}
