using System.Text.Json;
using System.Text.Json.Serialization;
using Farm.Broker.Entities;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Topics;

/// <summary>
/// The effective properties of a topic, with Azure Service Bus defaults (SupportOrdering off).
/// Stored as JSON in the farm database's entity row.
/// </summary>
public sealed record TopicSettings
{
    public TimeSpan DefaultMessageTimeToLive { get; init; } = QueueSettings.InfiniteTimeToLive;
    public bool RequiresDuplicateDetection { get; init; }
    public TimeSpan DuplicateDetectionHistoryTimeWindow { get; init; } = TimeSpan.FromMinutes(10);
    public long MaxSizeInMegabytes { get; init; } = 1024;
    public bool SupportOrdering { get; init; }
    public bool EnableBatchedOperations { get; init; } = true;

    private static readonly JsonSerializerOptions Json = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.SnakeCaseLower,
        DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
    };

    public string ToJson() => JsonSerializer.Serialize(this, Json);

    public static TopicSettings FromJson(string json) => JsonSerializer.Deserialize<TopicSettings>(json, Json) ?? new TopicSettings();

    /// <summary>Applies the set fields of <paramref name="patch"/>; throws BrokerException(InvalidArgument) naming a bad value.</summary>
    public TopicSettings With(TopicProperties? patch)
    {
        var next = patch is null ? this : this with
        {
            DefaultMessageTimeToLive = patch.DefaultMessageTimeToLive is null ? DefaultMessageTimeToLive : SettingValues.ToTimeSpan(patch.DefaultMessageTimeToLive, "DefaultMessageTimeToLive"),
            RequiresDuplicateDetection = patch.HasRequiresDuplicateDetection ? patch.RequiresDuplicateDetection : RequiresDuplicateDetection,
            DuplicateDetectionHistoryTimeWindow = patch.DuplicateDetectionHistoryTimeWindow is null ? DuplicateDetectionHistoryTimeWindow : SettingValues.ToTimeSpan(patch.DuplicateDetectionHistoryTimeWindow, "DuplicateDetectionHistoryTimeWindow"),
            MaxSizeInMegabytes = patch.HasMaxSizeInMegabytes ? patch.MaxSizeInMegabytes : MaxSizeInMegabytes,
            SupportOrdering = patch.HasSupportOrdering ? patch.SupportOrdering : SupportOrdering,
            EnableBatchedOperations = patch.HasEnableBatchedOperations ? patch.EnableBatchedOperations : EnableBatchedOperations,
        };
        if (next.DefaultMessageTimeToLive <= TimeSpan.Zero)
        {
            throw FarmErrors.Invalid($"DefaultMessageTimeToLive must be positive; got {next.DefaultMessageTimeToLive}.");
        }
        if (next.DuplicateDetectionHistoryTimeWindow < QueueSettings.MinDuplicateWindow || next.DuplicateDetectionHistoryTimeWindow > QueueSettings.MaxDuplicateWindow)
        {
            throw FarmErrors.Invalid($"DuplicateDetectionHistoryTimeWindow must be between 20 seconds and 7 days; got {next.DuplicateDetectionHistoryTimeWindow}.");
        }
        if (next.MaxSizeInMegabytes is < 1 or > QueueSettings.MaxSizeInMegabytesLimit)
        {
            throw FarmErrors.Invalid($"MaxSizeInMegabytes must be from 1 to {QueueSettings.MaxSizeInMegabytesLimit}; got {next.MaxSizeInMegabytes}.");
        }
        return next;
    }

    public TopicProperties ToProto() => new()
    {
        DefaultMessageTimeToLive = Duration.FromTimeSpan(DefaultMessageTimeToLive),
        RequiresDuplicateDetection = RequiresDuplicateDetection,
        DuplicateDetectionHistoryTimeWindow = Duration.FromTimeSpan(DuplicateDetectionHistoryTimeWindow),
        MaxSizeInMegabytes = MaxSizeInMegabytes,
        SupportOrdering = SupportOrdering,
        EnableBatchedOperations = EnableBatchedOperations,
    };
}

/// <summary>
/// The effective properties of a subscription (Azure Service Bus defaults). A subscription is served
/// by the same in-memory entity as a queue, with <see cref="ToQueueSettings"/> as its settings.
/// </summary>
public sealed record SubscriptionSettings
{
    public const int MaxNameLength = 50;

    public TimeSpan LockDuration { get; init; } = TimeSpan.FromMinutes(1);
    public int MaxDeliveryCount { get; init; } = 10;
    public TimeSpan DefaultMessageTimeToLive { get; init; } = QueueSettings.InfiniteTimeToLive;
    public bool DeadLetteringOnMessageExpiration { get; init; }
    public bool DeadLetteringOnFilterEvaluationExceptions { get; init; } = true;
    public bool RequiresSession { get; init; }
    public string? ForwardTo { get; init; }
    public string? ForwardDeadLetteredMessagesTo { get; init; }
    public bool EnableBatchedOperations { get; init; } = true;

    private static readonly JsonSerializerOptions Json = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.SnakeCaseLower,
        DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
    };

    public string ToJson() => JsonSerializer.Serialize(this, Json);

    public static SubscriptionSettings FromJson(string json) => JsonSerializer.Deserialize<SubscriptionSettings>(json, Json) ?? new SubscriptionSettings();

    /// <summary>
    /// Applies the set fields of <paramref name="patch"/>; throws BrokerException(InvalidArgument) naming a
    /// bad value. Forwarding may not name the subscription itself or its own topic (a loop).
    /// </summary>
    public SubscriptionSettings With(SubscriptionProperties? patch, string topicName, string subscriptionName)
    {
        var next = patch is null ? this : this with
        {
            LockDuration = patch.LockDuration is null ? LockDuration : SettingValues.ToTimeSpan(patch.LockDuration, "LockDuration"),
            MaxDeliveryCount = patch.HasMaxDeliveryCount ? patch.MaxDeliveryCount : MaxDeliveryCount,
            DefaultMessageTimeToLive = patch.DefaultMessageTimeToLive is null ? DefaultMessageTimeToLive : SettingValues.ToTimeSpan(patch.DefaultMessageTimeToLive, "DefaultMessageTimeToLive"),
            DeadLetteringOnMessageExpiration = patch.HasDeadLetteringOnMessageExpiration ? patch.DeadLetteringOnMessageExpiration : DeadLetteringOnMessageExpiration,
            DeadLetteringOnFilterEvaluationExceptions = patch.HasDeadLetteringOnFilterEvaluationExceptions ? patch.DeadLetteringOnFilterEvaluationExceptions : DeadLetteringOnFilterEvaluationExceptions,
            RequiresSession = patch.HasRequiresSession ? patch.RequiresSession : RequiresSession,
            ForwardTo = patch.HasForwardTo ? SettingValues.NullIfEmpty(patch.ForwardTo) : ForwardTo,
            ForwardDeadLetteredMessagesTo = patch.HasForwardDeadLetteredMessagesTo ? SettingValues.NullIfEmpty(patch.ForwardDeadLetteredMessagesTo) : ForwardDeadLetteredMessagesTo,
            EnableBatchedOperations = patch.HasEnableBatchedOperations ? patch.EnableBatchedOperations : EnableBatchedOperations,
        };
        if (next.LockDuration <= TimeSpan.Zero || next.LockDuration > QueueSettings.MaxLockDuration)
        {
            throw FarmErrors.Invalid($"LockDuration must be more than 0 and at most 5 minutes; got {next.LockDuration}.");
        }
        if (next.MaxDeliveryCount < 1)
        {
            throw FarmErrors.Invalid($"MaxDeliveryCount must be at least 1; got {next.MaxDeliveryCount}.");
        }
        if (next.DefaultMessageTimeToLive <= TimeSpan.Zero)
        {
            throw FarmErrors.Invalid($"DefaultMessageTimeToLive must be positive; got {next.DefaultMessageTimeToLive}.");
        }
        if (next.RequiresSession)
        {
            throw FarmErrors.NotSupported("RequiresSession: sessions are not built yet in Farm.");
        }
        var path = EntityNames.SubscriptionPath(topicName, subscriptionName);
        foreach (var (label, target) in new[] { ("ForwardTo", next.ForwardTo), ("ForwardDeadLetteredMessagesTo", next.ForwardDeadLetteredMessagesTo) })
        {
            if (target is null)
            {
                continue;
            }
            if (string.Equals(target, path, StringComparison.OrdinalIgnoreCase))
            {
                throw FarmErrors.Invalid($"{label} cannot name the subscription '{path}' itself.");
            }
            if (EntityNames.IsSubscriptionPath(target))
            {
                throw FarmErrors.Invalid($"{label} must name a queue or a topic; '{target}' is a subscription, which cannot be sent to.");
            }
            if (EntityNames.Validate(target) is { } error)
            {
                throw FarmErrors.Invalid($"{label}: {error}");
            }
            if (label == "ForwardTo" && string.Equals(target, topicName, StringComparison.OrdinalIgnoreCase))
            {
                throw FarmErrors.Invalid($"ForwardTo cannot name the subscription's own topic '{topicName}': every message would come back to it forever.");
            }
        }
        return next;
    }

    /// <summary>What the queue machinery serving the subscription needs (no duplicate detection: the topic does that).</summary>
    public QueueSettings ToQueueSettings() => new()
    {
        LockDuration = LockDuration,
        MaxDeliveryCount = MaxDeliveryCount,
        DefaultMessageTimeToLive = DefaultMessageTimeToLive,
        DeadLetteringOnMessageExpiration = DeadLetteringOnMessageExpiration,
        ForwardTo = ForwardTo,
        ForwardDeadLetteredMessagesTo = ForwardDeadLetteredMessagesTo,
        EnableBatchedOperations = EnableBatchedOperations,
    };

    public SubscriptionProperties ToProto() => new()
    {
        LockDuration = Duration.FromTimeSpan(LockDuration),
        MaxDeliveryCount = MaxDeliveryCount,
        DefaultMessageTimeToLive = Duration.FromTimeSpan(DefaultMessageTimeToLive),
        DeadLetteringOnMessageExpiration = DeadLetteringOnMessageExpiration,
        DeadLetteringOnFilterEvaluationExceptions = DeadLetteringOnFilterEvaluationExceptions,
        RequiresSession = RequiresSession,
        ForwardTo = ForwardTo ?? "",
        ForwardDeadLetteredMessagesTo = ForwardDeadLetteredMessagesTo ?? "",
        EnableBatchedOperations = EnableBatchedOperations,
    };
}
