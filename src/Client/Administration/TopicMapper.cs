using Proto = Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Topic properties to and from farm.v1.TopicProperties / TopicInfo.</summary>
internal static class TopicMapper
{
    public static Proto.TopicProperties ToProto(TopicSettings settings, bool onlyAssigned)
    {
        bool Send(string property) => !onlyAssigned || settings.IsAssigned(property);

        var proto = new Proto.TopicProperties();
        if (Send(nameof(TopicSettings.DefaultMessageTimeToLive)))
        {
            proto.DefaultMessageTimeToLive = WireDurations.ToDuration(settings.DefaultMessageTimeToLive);
        }

        if (Send(nameof(TopicSettings.RequiresDuplicateDetection)))
        {
            proto.RequiresDuplicateDetection = settings.RequiresDuplicateDetection;
        }

        if (Send(nameof(TopicSettings.DuplicateDetectionHistoryTimeWindow)))
        {
            proto.DuplicateDetectionHistoryTimeWindow = WireDurations.ToDuration(settings.DuplicateDetectionHistoryTimeWindow);
        }

        if (Send(nameof(TopicSettings.MaxSizeInMegabytes)))
        {
            proto.MaxSizeInMegabytes = settings.MaxSizeInMegabytes;
        }

        if (Send(nameof(TopicSettings.SupportOrdering)))
        {
            proto.SupportOrdering = settings.SupportOrdering;
        }

        if (Send(nameof(TopicSettings.EnableBatchedOperations)))
        {
            proto.EnableBatchedOperations = settings.EnableBatchedOperations;
        }

        return proto;
    }

    /// <summary>Copies every field the server set; unset fields keep the SDK defaults.</summary>
    public static void Load(TopicSettings settings, Proto.TopicProperties? proto)
    {
        if (proto is null)
        {
            return;
        }

        if (WireDurations.Positive(proto.DefaultMessageTimeToLive) is { } ttl)
        {
            settings.DefaultMessageTimeToLive = ttl;
        }

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

        if (proto.HasSupportOrdering)
        {
            settings.SupportOrdering = proto.SupportOrdering;
        }

        if (proto.HasEnableBatchedOperations)
        {
            settings.EnableBatchedOperations = proto.EnableBatchedOperations;
        }
    }

    public static TopicProperties FromInfo(Proto.TopicInfo info)
    {
        var properties = new TopicProperties(info.Name)
        {
            ContainerId = info.ContainerId,
            CreatedAt = info.CreatedAt?.ToDateTimeOffset() ?? default,
            UpdatedAt = info.UpdatedAt?.ToDateTimeOffset() ?? default,
        };
        properties.Load(info.Properties);
        return properties;
    }

    public static TopicRuntimeProperties RuntimeFromInfo(Proto.TopicInfo info) => new(info.Name)
    {
        SubscriptionCount = info.SubscriptionCount,
        MessageCount = info.MessageCount,
        SizeInBytes = info.SizeInBytes,
        CreatedAt = info.CreatedAt?.ToDateTimeOffset() ?? default,
        UpdatedAt = info.UpdatedAt?.ToDateTimeOffset() ?? default,
    };
}
