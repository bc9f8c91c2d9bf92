using System.Diagnostics.CodeAnalysis;
using Farm.Contracts.V1;

namespace Farm.Broker.Rules;

/// <summary>
/// What rules see of a message: the sender's <see cref="Farm.Contracts.V1.Message"/> plus the values
/// the broker assigned when it accepted it. Build one per message and evaluate every subscription's
/// rules against it; filters only read it, so it may be shared across threads.
/// </summary>
public sealed class RuleMessage
{
    private long _size = -1;
    private TimeSpan? _timeToLive;
    private DateTimeOffset? _expiresAt;

    // Azure property names are case-insensitive; application_properties is an ordinal map. An exact
    // hit costs one lookup; a miss falls back to a case-insensitive copy built once per message.
    private Dictionary<string, PropertyValue>? _foldedProperties;

    public RuleMessage(Message message, long sequenceNumber, DateTimeOffset enqueuedTime)
    {
        ArgumentNullException.ThrowIfNull(message);
        Message = message;
        SequenceNumber = sequenceNumber;
        EnqueuedTime = enqueuedTime;
    }

    public Message Message { get; }

    public long SequenceNumber { get; }

    public DateTimeOffset EnqueuedTime { get; }

    public int DeliveryCount { get; init; }

    /// <summary>The stored size in bytes (sys.Size); the serialized size of <see cref="Message"/> unless the broker says otherwise.</summary>
    public long Size
    {
        get
        {
            var size = Volatile.Read(ref _size);
            if (size < 0)
            {
                size = Message.CalculateSize();
                Volatile.Write(ref _size, size);
            }
            return size;
        }
        init => _size = value;
    }

    /// <summary>The effective time to live (sys.TimeToLive), e.g. with the entity's default applied; else the message's own.</summary>
    public TimeSpan? TimeToLive
    {
        get => _timeToLive ?? Message.TimeToLive?.ToTimeSpan();
        init => _timeToLive = value;
    }

    /// <summary>sys.ExpiresAtUtc; else EnqueuedTime + TimeToLive when both are known.</summary>
    public DateTimeOffset? ExpiresAt
    {
        get
        {
            if (_expiresAt is { } explicitValue)
            {
                return explicitValue;
            }
            if (TimeToLive is not { } ttl)
            {
                return null;
            }
            return ttl >= DateTimeOffset.MaxValue - EnqueuedTime ? DateTimeOffset.MaxValue : EnqueuedTime + ttl;
        }
        init => _expiresAt = value;
    }

    /// <summary>A rule action works on a copy of the message; it keeps the broker's values.</summary>
    internal RuleMessage WithMessage(Message copy) => new(copy, SequenceNumber, EnqueuedTime)
    {
        DeliveryCount = DeliveryCount,
        _size = _size,
        _timeToLive = _timeToLive,
        _expiresAt = _expiresAt,
    };

    /// <summary>An action set sys.TimeToLive: the broker's effective values no longer apply.</summary>
    internal void TimeToLiveChanged()
    {
        _timeToLive = null;
        _expiresAt = null;
    }

    internal bool TryGetUserProperty(string name, [MaybeNullWhen(false)] out PropertyValue value)
    {
        var properties = Message.ApplicationProperties;
        if (properties.TryGetValue(name, out value))
        {
            return true;
        }
        if (properties.Count == 0)
        {
            return false;
        }
        var folded = Volatile.Read(ref _foldedProperties);
        if (folded is null)
        {
            // Two threads may both build it; they build the same thing.
            folded = new Dictionary<string, PropertyValue>(properties.Count, StringComparer.OrdinalIgnoreCase);
            foreach (var pair in properties)
            {
                folded.TryAdd(pair.Key, pair.Value);
            }
            Volatile.Write(ref _foldedProperties, folded);
        }
        return folded.TryGetValue(name, out value);
    }

    internal SqlValue GetUserProperty(string name) =>
        TryGetUserProperty(name, out var value) ? SqlValue.FromProperty(value) : SqlValue.Null;

    /// <summary>The key an action's SET or REMOVE of <paramref name="name"/> refers to: the existing key that matches case-insensitively, if any.</summary>
    internal string? FindUserPropertyKey(string name)
    {
        var properties = Message.ApplicationProperties;
        if (properties.ContainsKey(name))
        {
            return name;
        }
        foreach (var pair in properties)
        {
            if (string.Equals(pair.Key, name, StringComparison.OrdinalIgnoreCase))
            {
                return pair.Key;
            }
        }
        return null;
    }

    internal void UserPropertiesChanged() => _foldedProperties = null;
}
