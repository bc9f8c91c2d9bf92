namespace Farm.Client;

/// <summary>
/// The settable properties of a queue, named and defaulted as in Azure Service Bus. The object
/// remembers which properties were assigned: a create or update sends only those, so unset ones
/// take the farm's defaults (create) or keep their current values (update).
/// </summary>
public abstract class QueueSettings : ReceiverEntitySettings, ISendTargetSettings
{
    public static readonly TimeSpan DefaultDuplicateDetectionHistoryTimeWindow = TimeSpan.FromMinutes(10);
    public const long DefaultMaxSizeInMegabytes = 1024;

    private bool _requiresDuplicateDetection;
    private TimeSpan _duplicateDetectionHistoryTimeWindow = DefaultDuplicateDetectionHistoryTimeWindow;
    private long _maxSizeInMegabytes = DefaultMaxSizeInMegabytes;

    private protected QueueSettings(string name)
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

    /// <summary>Default 1024.</summary>
    public long MaxSizeInMegabytes
    {
        get => _maxSizeInMegabytes;
        set => Assigned.Set(ref _maxSizeInMegabytes, AssignedProperties.AtLeastOne(value));
    }

    /// <summary>Loads server values without marking them assigned.</summary>
    internal void Load(Contracts.V1.QueueProperties proto)
    {
        QueueMapper.Load(this, proto);
        Assigned.Clear();
    }

    internal void CopyAssignedFrom(QueueSettings other) => Assigned.CopyFrom(other.Assigned);
}

/// <summary>What to create, like Azure's CreateQueueOptions.</summary>
public sealed class CreateQueueOptions : QueueSettings
{
    public CreateQueueOptions(string name)
        : base(name)
    {
    }

    /// <summary>The container to place the queue in; null picks the container with the fewest entities.</summary>
    public long? ContainerId { get; set; }
}

/// <summary>A queue's properties as the farm reports them; change some and pass to UpdateQueueAsync.</summary>
public sealed class QueueProperties : QueueSettings
{
    public QueueProperties(string name)
        : base(name)
    {
    }

    public long ContainerId { get; internal set; }

    public DateTimeOffset CreatedAt { get; internal set; }

    public DateTimeOffset UpdatedAt { get; internal set; }
}

/// <summary>The message counts queues and subscriptions both report.</summary>
public interface IMessageCounts
{
    long ActiveMessageCount { get; }

    long ScheduledMessageCount { get; }

    long DeferredMessageCount { get; }

    long DeadLetterMessageCount { get; }

    /// <summary>Messages currently locked by receivers (a Farm addition).</summary>
    long LockedMessageCount { get; }

    long TotalMessageCount { get; }

    long SizeInBytes { get; }
}

/// <summary>Message counts of a queue, like Azure's QueueRuntimeProperties.</summary>
public sealed class QueueRuntimeProperties : IMessageCounts
{
    internal QueueRuntimeProperties(string name) => Name = name;

    public string Name { get; }

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
