using Proto = Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Topic properties to and from farm.v1.TopicProperties / TopicInfo.</summary>
internal static class TopicMapper
{
    public static Proto.TopicProperties ToProto(TopicSettings settings, bool onlyAssigned)
    {
        var proto = new Proto.TopicProperties();
        EntityPropertyMapping.ToProto((IEntitySettings)settings, proto, onlyAssigned);
        EntityPropertyMapping.ToProto((ISendTargetSettings)settings, proto, onlyAssigned);
        if (!onlyAssigned || settings.IsAssigned(nameof(TopicSettings.SupportOrdering)))
        {
            proto.SupportOrdering = settings.SupportOrdering;
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
        EntityPropertyMapping.Load((IEntitySettings)settings, proto);
        EntityPropertyMapping.Load((ISendTargetSettings)settings, proto);
        if (proto.HasSupportOrdering)
        {
            settings.SupportOrdering = proto.SupportOrdering;
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
