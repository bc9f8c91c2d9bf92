using Google.Protobuf.WellKnownTypes;

namespace Farm.Contracts.V1;

// Queues, subscriptions and topics carry many of the same properties (the same field names in
// QueueProperties, SubscriptionProperties and TopicProperties). These interfaces name the shared
// groups; the generated members already implement them, so the partial declarations below add
// nothing but the interface, and a mapper can handle each group once (Farm.Client.EntityPropertyMapping).

/// <summary>Every entity: time to live and batching.</summary>
public interface IEntityProperties
{
    Duration DefaultMessageTimeToLive { get; set; }

    bool EnableBatchedOperations { get; set; }

    bool HasEnableBatchedOperations { get; }
}

public interface IReceiverProperties : IEntityProperties
{
    Duration LockDuration { get; set; }

    int MaxDeliveryCount { get; set; }

    bool HasMaxDeliveryCount { get; }

    bool DeadLetteringOnMessageExpiration { get; set; }

    bool HasDeadLetteringOnMessageExpiration { get; }

    bool RequiresSession { get; set; }

    bool HasRequiresSession { get; }

    string ForwardTo { get; set; }

    bool HasForwardTo { get; }

    string ForwardDeadLetteredMessagesTo { get; set; }

    bool HasForwardDeadLetteredMessagesTo { get; }
}

public interface ISendTargetProperties : IEntityProperties
{
    bool RequiresDuplicateDetection { get; set; }

    bool HasRequiresDuplicateDetection { get; }

    Duration DuplicateDetectionHistoryTimeWindow { get; set; }

    long MaxSizeInMegabytes { get; set; }

    bool HasMaxSizeInMegabytes { get; }
}

public sealed partial class QueueProperties : IReceiverProperties, ISendTargetProperties;

public sealed partial class SubscriptionProperties : IReceiverProperties;

public sealed partial class TopicProperties : ISendTargetProperties;
