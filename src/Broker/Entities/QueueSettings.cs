using System.Text.Json;
using System.Text.Json.Serialization;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Entities;

/// <summary>
/// The effective properties of a queue, with Azure Service Bus defaults and limits. Stored as
/// JSON in the farm database's entity row.
/// </summary>
public sealed record QueueSettings
{
    public static readonly TimeSpan MaxLockDuration = TimeSpan.FromMinutes(5);
    public static readonly TimeSpan MinDuplicateWindow = TimeSpan.FromSeconds(20);
    public static readonly TimeSpan MaxDuplicateWindow = TimeSpan.FromDays(7);

    /// <summary>"Never expires" (Azure shows TimeSpan.MaxValue); kept finite so arithmetic cannot overflow.</summary>
    public static readonly TimeSpan InfiniteTimeToLive = TimeSpan.FromDays(10675199);

    public TimeSpan LockDuration { get; init; } = TimeSpan.FromMinutes(1);
    public int MaxDeliveryCount { get; init; } = 10;
    public TimeSpan DefaultMessageTimeToLive { get; init; } = InfiniteTimeToLive;
    public bool DeadLetteringOnMessageExpiration { get; init; }
    public bool RequiresDuplicateDetection { get; init; }
    public TimeSpan DuplicateDetectionHistoryTimeWindow { get; init; } = TimeSpan.FromMinutes(10);
    public bool RequiresSession { get; init; }
    public string? ForwardTo { get; init; }
    public string? ForwardDeadLetteredMessagesTo { get; init; }
    public long MaxSizeInMegabytes { get; init; } = 1024;

    /// <summary>The largest MaxSizeInMegabytes a queue or topic may have: 80 GB, Azure Service Bus Premium's largest.</summary>
    public const long MaxSizeInMegabytesLimit = 81920;
    public bool EnableBatchedOperations { get; init; } = true;

    private static readonly JsonSerializerOptions Json = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.SnakeCaseLower,
        DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
    };

    public string ToJson() => JsonSerializer.Serialize(this, Json);

    public static QueueSettings FromJson(string json) => JsonSerializer.Deserialize<QueueSettings>(json, Json) ?? new QueueSettings();

    /// <summary>Applies the set fields of <paramref name="patch"/>; throws BrokerException(InvalidArgument) naming a bad value.</summary>
    public QueueSettings With(QueueProperties? patch, string queueName)
    {
        if (patch is null)
        {
            return Validate(this, queueName);
        }
        var next = this with
        {
            LockDuration = patch.LockDuration is null ? LockDuration : SettingValues.ToTimeSpan(patch.LockDuration, "LockDuration"),
            MaxDeliveryCount = patch.HasMaxDeliveryCount ? patch.MaxDeliveryCount : MaxDeliveryCount,
            DefaultMessageTimeToLive = patch.DefaultMessageTimeToLive is null ? DefaultMessageTimeToLive : SettingValues.ToTimeSpan(patch.DefaultMessageTimeToLive, "DefaultMessageTimeToLive"),
            DeadLetteringOnMessageExpiration = patch.HasDeadLetteringOnMessageExpiration ? patch.DeadLetteringOnMessageExpiration : DeadLetteringOnMessageExpiration,
            RequiresDuplicateDetection = patch.HasRequiresDuplicateDetection ? patch.RequiresDuplicateDetection : RequiresDuplicateDetection,
            DuplicateDetectionHistoryTimeWindow = patch.DuplicateDetectionHistoryTimeWindow is null ? DuplicateDetectionHistoryTimeWindow : SettingValues.ToTimeSpan(patch.DuplicateDetectionHistoryTimeWindow, "DuplicateDetectionHistoryTimeWindow"),
            RequiresSession = patch.HasRequiresSession ? patch.RequiresSession : RequiresSession,
            ForwardTo = patch.HasForwardTo ? SettingValues.NullIfEmpty(patch.ForwardTo) : ForwardTo,
            ForwardDeadLetteredMessagesTo = patch.HasForwardDeadLetteredMessagesTo ? SettingValues.NullIfEmpty(patch.ForwardDeadLetteredMessagesTo) : ForwardDeadLetteredMessagesTo,
            MaxSizeInMegabytes = patch.HasMaxSizeInMegabytes ? patch.MaxSizeInMegabytes : MaxSizeInMegabytes,
            EnableBatchedOperations = patch.HasEnableBatchedOperations ? patch.EnableBatchedOperations : EnableBatchedOperations,
        };
        return Validate(next, queueName);
    }

    private static QueueSettings Validate(QueueSettings s, string queueName)
    {
        if (s.LockDuration <= TimeSpan.Zero || s.LockDuration > MaxLockDuration)
        {
            throw FarmErrors.Invalid($"LockDuration must be more than 0 and at most 5 minutes; got {s.LockDuration}.");
        }
        if (s.MaxDeliveryCount < 1)
        {
            throw FarmErrors.Invalid($"MaxDeliveryCount must be at least 1; got {s.MaxDeliveryCount}.");
        }
        if (s.DefaultMessageTimeToLive <= TimeSpan.Zero)
        {
            throw FarmErrors.Invalid($"DefaultMessageTimeToLive must be positive; got {s.DefaultMessageTimeToLive}.");
        }
        if (s.DuplicateDetectionHistoryTimeWindow < MinDuplicateWindow || s.DuplicateDetectionHistoryTimeWindow > MaxDuplicateWindow)
        {
            throw FarmErrors.Invalid($"DuplicateDetectionHistoryTimeWindow must be between 20 seconds and 7 days; got {s.DuplicateDetectionHistoryTimeWindow}.");
        }
        if (s.MaxSizeInMegabytes is < 1 or > MaxSizeInMegabytesLimit)
        {
            throw FarmErrors.Invalid($"MaxSizeInMegabytes must be from 1 to {MaxSizeInMegabytesLimit}; got {s.MaxSizeInMegabytes}.");
        }
        if (s.RequiresSession)
        {
            throw FarmErrors.NotSupported("RequiresSession: sessions are not built yet in Farm.");
        }
        foreach (var (label, target) in new[] { ("ForwardTo", s.ForwardTo), ("ForwardDeadLetteredMessagesTo", s.ForwardDeadLetteredMessagesTo) })
        {
            if (target is null)
            {
                continue;
            }
            if (EntityNames.Validate(target) is { } error)
            {
                throw FarmErrors.Invalid($"{label}: {error}");
            }
            if (string.Equals(target, queueName, StringComparison.OrdinalIgnoreCase))
            {
                throw FarmErrors.Invalid($"{label} cannot name the queue '{queueName}' itself.");
            }
        }
        return s;
    }

    public QueueProperties ToProto() => new()
    {
        LockDuration = Duration.FromTimeSpan(LockDuration),
        MaxDeliveryCount = MaxDeliveryCount,
        DefaultMessageTimeToLive = Duration.FromTimeSpan(DefaultMessageTimeToLive),
        DeadLetteringOnMessageExpiration = DeadLetteringOnMessageExpiration,
        RequiresDuplicateDetection = RequiresDuplicateDetection,
        DuplicateDetectionHistoryTimeWindow = Duration.FromTimeSpan(DuplicateDetectionHistoryTimeWindow),
        RequiresSession = RequiresSession,
        ForwardTo = ForwardTo ?? "",
        ForwardDeadLetteredMessagesTo = ForwardDeadLetteredMessagesTo ?? "",
        MaxSizeInMegabytes = MaxSizeInMegabytes,
        EnableBatchedOperations = EnableBatchedOperations,
    };
}
