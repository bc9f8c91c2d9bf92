namespace Farm.Client;

/// <summary>
/// The settable properties of a queue, named and defaulted as in Azure Service Bus. The object
/// remembers which properties were assigned: a create or update sends only those, so unset ones
/// take the farm's defaults (create) or keep their current values (update).
/// </summary>
public abstract class QueueSettings : IReceiverSettings, ISendTargetSettings, IAssignedProperties
{
    public static readonly TimeSpan DefaultLockDuration = TimeSpan.FromMinutes(1);
    public const int DefaultMaxDeliveryCount = 10;
    public static readonly TimeSpan DefaultDuplicateDetectionHistoryTimeWindow = TimeSpan.FromMinutes(10);
    public const long DefaultMaxSizeInMegabytes = 1024;

    private readonly AssignedProperties _assigned = new();
    private TimeSpan _lockDuration = DefaultLockDuration;
    private int _maxDeliveryCount = DefaultMaxDeliveryCount;
    private TimeSpan _defaultMessageTimeToLive = TimeSpan.MaxValue;
    private bool _deadLetteringOnMessageExpiration;
    private bool _requiresDuplicateDetection;
    private TimeSpan _duplicateDetectionHistoryTimeWindow = DefaultDuplicateDetectionHistoryTimeWindow;
    private bool _requiresSession;
    private string? _forwardTo;
    private string? _forwardDeadLetteredMessagesTo;
    private long _maxSizeInMegabytes = DefaultMaxSizeInMegabytes;
    private bool _enableBatchedOperations = true;

    private protected QueueSettings(string name)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        Name = name;
    }

    public string Name { get; }

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

    public bool RequiresDuplicateDetection
    {
        get => _requiresDuplicateDetection;
        set => _assigned.Set(ref _requiresDuplicateDetection, value);
    }

    /// <summary>Default 10 minutes.</summary>
    public TimeSpan DuplicateDetectionHistoryTimeWindow
    {
        get => _duplicateDetectionHistoryTimeWindow;
        set => _assigned.Set(ref _duplicateDetectionHistoryTimeWindow, AssignedProperties.Positive(value));
    }

    public bool RequiresSession
    {
        get => _requiresSession;
        set => _assigned.Set(ref _requiresSession, value);
    }

    /// <summary>An entity every message is forwarded to; null or empty clears it.</summary>
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

    /// <summary>Default 1024.</summary>
    public long MaxSizeInMegabytes
    {
        get => _maxSizeInMegabytes;
        set => _assigned.Set(ref _maxSizeInMegabytes, AssignedProperties.AtLeastOne(value));
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
    internal void Load(Contracts.V1.QueueProperties proto)
    {
        QueueMapper.Load(this, proto);
        _assigned.Clear();
    }

    internal void CopyAssignedFrom(QueueSettings other) => _assigned.CopyFrom(other._assigned);
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

/// <summary>Message counts of a queue, like Azure's QueueRuntimeProperties.</summary>
public sealed class QueueRuntimeProperties
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
