using Farm.Contracts.V1;

namespace Farm.Client;

// Queues, subscriptions and topics share many properties, on the wire (QueueProperties,
// SubscriptionProperties, TopicProperties have the same field names) and in the SDK's settings
// classes. These interfaces name the shared groups on both sides, so each group is handled once
// (here for the wire, in the CLI for its options).

/// <summary>The settings of every entity: time to live and batching.</summary>
public interface IEntitySettings
{
    TimeSpan DefaultMessageTimeToLive { get; set; }

    bool EnableBatchedOperations { get; set; }
}

/// <summary>Which properties of a settings object were assigned (an update sends only those).</summary>
internal interface IAssignedProperties
{
    bool IsAssigned(string property);
}

/// <summary>The settings of what receivers read from: queues and subscriptions.</summary>
public interface IReceiverSettings : IEntitySettings
{
    TimeSpan LockDuration { get; set; }

    int MaxDeliveryCount { get; set; }

    bool DeadLetteringOnMessageExpiration { get; set; }

    bool RequiresSession { get; set; }

    string? ForwardTo { get; set; }

    string? ForwardDeadLetteredMessagesTo { get; set; }
}

/// <summary>The settings of what senders write to: queues and topics (duplicate detection, size).</summary>
public interface ISendTargetSettings : IEntitySettings
{
    bool RequiresDuplicateDetection { get; set; }

    TimeSpan DuplicateDetectionHistoryTimeWindow { get; set; }

    long MaxSizeInMegabytes { get; set; }
}

/// <summary>Maps each shared group once, both ways.</summary>
internal static class EntityPropertyMapping
{
    /// <summary>Writes the group's properties that <paramref name="settings"/> should send (all, or only the assigned ones for an update).</summary>
    public static void ToProto(IEntitySettings settings, IEntityProperties proto, bool onlyAssigned)
    {
        if (Send(settings, nameof(IEntitySettings.DefaultMessageTimeToLive), onlyAssigned))
        {
            proto.DefaultMessageTimeToLive = WireDurations.ToDuration(settings.DefaultMessageTimeToLive);
        }
        if (Send(settings, nameof(IEntitySettings.EnableBatchedOperations), onlyAssigned))
        {
            proto.EnableBatchedOperations = settings.EnableBatchedOperations;
        }
    }

    public static void ToProto(IReceiverSettings settings, IReceiverProperties proto, bool onlyAssigned)
    {
        if (Send(settings, nameof(IReceiverSettings.LockDuration), onlyAssigned))
        {
            proto.LockDuration = WireDurations.ToDuration(settings.LockDuration);
        }
        if (Send(settings, nameof(IReceiverSettings.MaxDeliveryCount), onlyAssigned))
        {
            proto.MaxDeliveryCount = settings.MaxDeliveryCount;
        }
        if (Send(settings, nameof(IReceiverSettings.DeadLetteringOnMessageExpiration), onlyAssigned))
        {
            proto.DeadLetteringOnMessageExpiration = settings.DeadLetteringOnMessageExpiration;
        }
        if (Send(settings, nameof(IReceiverSettings.RequiresSession), onlyAssigned))
        {
            proto.RequiresSession = settings.RequiresSession;
        }
        // Empty string clears forwarding on update.
        if (Send(settings, nameof(IReceiverSettings.ForwardTo), onlyAssigned))
        {
            proto.ForwardTo = settings.ForwardTo ?? string.Empty;
        }
        if (Send(settings, nameof(IReceiverSettings.ForwardDeadLetteredMessagesTo), onlyAssigned))
        {
            proto.ForwardDeadLetteredMessagesTo = settings.ForwardDeadLetteredMessagesTo ?? string.Empty;
        }
    }

    public static void ToProto(ISendTargetSettings settings, ISendTargetProperties proto, bool onlyAssigned)
    {
        if (Send(settings, nameof(ISendTargetSettings.RequiresDuplicateDetection), onlyAssigned))
        {
            proto.RequiresDuplicateDetection = settings.RequiresDuplicateDetection;
        }
        if (Send(settings, nameof(ISendTargetSettings.DuplicateDetectionHistoryTimeWindow), onlyAssigned))
        {
            proto.DuplicateDetectionHistoryTimeWindow = WireDurations.ToDuration(settings.DuplicateDetectionHistoryTimeWindow);
        }
        if (Send(settings, nameof(ISendTargetSettings.MaxSizeInMegabytes), onlyAssigned))
        {
            proto.MaxSizeInMegabytes = settings.MaxSizeInMegabytes;
        }
    }

    /// <summary>Copies every field of the group the server set; unset fields keep the SDK defaults.</summary>
    public static void Load(IEntitySettings settings, IEntityProperties proto)
    {
        if (WireDurations.Positive(proto.DefaultMessageTimeToLive) is { } ttl)
        {
            settings.DefaultMessageTimeToLive = ttl;
        }
        if (proto.HasEnableBatchedOperations)
        {
            settings.EnableBatchedOperations = proto.EnableBatchedOperations;
        }
    }

    public static void Load(IReceiverSettings settings, IReceiverProperties proto)
    {
        if (WireDurations.Positive(proto.LockDuration) is { } lockDuration)
        {
            settings.LockDuration = lockDuration;
        }
        if (proto.HasMaxDeliveryCount && proto.MaxDeliveryCount >= 1)
        {
            settings.MaxDeliveryCount = proto.MaxDeliveryCount;
        }
        if (proto.HasDeadLetteringOnMessageExpiration)
        {
            settings.DeadLetteringOnMessageExpiration = proto.DeadLetteringOnMessageExpiration;
        }
        if (proto.HasRequiresSession)
        {
            settings.RequiresSession = proto.RequiresSession;
        }
        if (proto.HasForwardTo)
        {
            settings.ForwardTo = proto.ForwardTo;
        }
        if (proto.HasForwardDeadLetteredMessagesTo)
        {
            settings.ForwardDeadLetteredMessagesTo = proto.ForwardDeadLetteredMessagesTo;
        }
    }

    public static void Load(ISendTargetSettings settings, ISendTargetProperties proto)
    {
        if (proto.HasRequiresDuplicateDetection)
        {
            settings.RequiresDuplicateDetection = proto.RequiresDuplicateDetection;
        }
        if (WireDurations.Positive(proto.DuplicateDetectionHistoryTimeWindow) is { } window)
        {
            settings.DuplicateDetectionHistoryTimeWindow = window;
        }
        if (proto.HasMaxSizeInMegabytes && proto.MaxSizeInMegabytes >= 1)
        {
            settings.MaxSizeInMegabytes = proto.MaxSizeInMegabytes;
        }
    }

    private static bool Send(IEntitySettings settings, string property, bool onlyAssigned) =>
        !onlyAssigned || ((IAssignedProperties)settings).IsAssigned(property);
}
