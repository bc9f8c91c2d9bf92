using Proto = Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Subscription properties to and from farm.v1.SubscriptionProperties / SubscriptionInfo.</summary>
internal static class SubscriptionMapper
{
    public static Proto.SubscriptionProperties ToProto(SubscriptionSettings settings, bool onlyAssigned)
    {
        var proto = new Proto.SubscriptionProperties();
        EntityPropertyMapping.ToProto((IEntitySettings)settings, proto, onlyAssigned);
        EntityPropertyMapping.ToProto((IReceiverSettings)settings, proto, onlyAssigned);
        if (!onlyAssigned || settings.IsAssigned(nameof(SubscriptionSettings.EnableDeadLetteringOnFilterEvaluationExceptions)))
        {
            proto.DeadLetteringOnFilterEvaluationExceptions = settings.EnableDeadLetteringOnFilterEvaluationExceptions;
        }
        return proto;
    }

    /// <summary>Copies every field the server set; unset fields keep the SDK defaults.</summary>
    public static void Load(SubscriptionSettings settings, Proto.SubscriptionProperties? proto)
    {
        if (proto is null)
        {
            return;
        }
        EntityPropertyMapping.Load((IEntitySettings)settings, proto);
        EntityPropertyMapping.Load((IReceiverSettings)settings, proto);
        if (proto.HasDeadLetteringOnFilterEvaluationExceptions)
        {
            settings.EnableDeadLetteringOnFilterEvaluationExceptions = proto.DeadLetteringOnFilterEvaluationExceptions;
        }
    }

    public static SubscriptionProperties FromInfo(Proto.SubscriptionInfo info)
    {
        var properties = new SubscriptionProperties(info.Topic, info.Name)
        {
            CreatedAt = info.CreatedAt?.ToDateTimeOffset() ?? default,
            UpdatedAt = info.UpdatedAt?.ToDateTimeOffset() ?? default,
        };
        properties.Load(info.Properties);
        return properties;
    }

    public static SubscriptionRuntimeProperties RuntimeFromInfo(Proto.SubscriptionInfo info)
    {
        var counts = info.Counts ?? new Proto.MessageCounts();
        return new SubscriptionRuntimeProperties(info.Topic, info.Name)
        {
            ActiveMessageCount = counts.Active,
            ScheduledMessageCount = counts.Scheduled,
            DeferredMessageCount = counts.Deferred,
            DeadLetterMessageCount = counts.DeadLetter,
            LockedMessageCount = counts.Locked,
            TotalMessageCount = counts.Total,
            SizeInBytes = counts.SizeInBytes,
            CreatedAt = info.CreatedAt?.ToDateTimeOffset() ?? default,
            UpdatedAt = info.UpdatedAt?.ToDateTimeOffset() ?? default,
        };
    }
}
