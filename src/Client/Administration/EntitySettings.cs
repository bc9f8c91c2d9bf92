namespace Farm.Client;

/// <summary>
/// What the settings of every entity share: time to live, batching, and the record of which
/// properties were assigned since the object was built or loaded from the farm (a create or update
/// sends only those, so the others take the farm's defaults or keep their current values).
/// </summary>
public abstract class EntitySettings : IEntitySettings, IAssignedProperties
{
    private protected readonly AssignedProperties Assigned = new();
    private TimeSpan _defaultMessageTimeToLive = TimeSpan.MaxValue;
    private bool _enableBatchedOperations = true;

    private protected EntitySettings()
    {
    }

    /// <summary>TimeSpan.MaxValue (the default): messages never expire.</summary>
    public TimeSpan DefaultMessageTimeToLive
    {
        get => _defaultMessageTimeToLive;
        set => Assigned.Set(ref _defaultMessageTimeToLive, AssignedProperties.Positive(value));
    }

    public bool EnableBatchedOperations
    {
        get => _enableBatchedOperations;
        set => Assigned.Set(ref _enableBatchedOperations, value);
    }

    internal bool IsAssigned(string property) => Assigned.Contains(property);

    bool IAssignedProperties.IsAssigned(string property) => IsAssigned(property);

    internal int AssignedCount => Assigned.Count;
}

/// <summary>What queues and subscriptions share: the settings of what receivers read from.</summary>
public abstract class ReceiverEntitySettings : EntitySettings, IReceiverSettings
{
    public static readonly TimeSpan DefaultLockDuration = TimeSpan.FromMinutes(1);
    public const int DefaultMaxDeliveryCount = 10;

    private TimeSpan _lockDuration = DefaultLockDuration;
    private int _maxDeliveryCount = DefaultMaxDeliveryCount;
    private bool _deadLetteringOnMessageExpiration;
    private bool _requiresSession;
    private string? _forwardTo;
    private string? _forwardDeadLetteredMessagesTo;

    private protected ReceiverEntitySettings()
    {
    }

    /// <summary>How long a peek-lock holds a message. Default 1 minute.</summary>
    public TimeSpan LockDuration
    {
        get => _lockDuration;
        set => Assigned.Set(ref _lockDuration, AssignedProperties.Positive(value));
    }

    /// <summary>Deliveries before a message is dead-lettered. Default 10.</summary>
    public int MaxDeliveryCount
    {
        get => _maxDeliveryCount;
        set => Assigned.Set(ref _maxDeliveryCount, AssignedProperties.AtLeastOne(value));
    }

    public bool DeadLetteringOnMessageExpiration
    {
        get => _deadLetteringOnMessageExpiration;
        set => Assigned.Set(ref _deadLetteringOnMessageExpiration, value);
    }

    public bool RequiresSession
    {
        get => _requiresSession;
        set => Assigned.Set(ref _requiresSession, value);
    }

    /// <summary>An entity every message is forwarded to; null or empty clears it. A subscription's is never its own topic.</summary>
    public string? ForwardTo
    {
        get => _forwardTo;
        set => Assigned.Set(ref _forwardTo, string.IsNullOrWhiteSpace(value) ? null : value);
    }

    public string? ForwardDeadLetteredMessagesTo
    {
        get => _forwardDeadLetteredMessagesTo;
        set => Assigned.Set(ref _forwardDeadLetteredMessagesTo, string.IsNullOrWhiteSpace(value) ? null : value);
    }
}
