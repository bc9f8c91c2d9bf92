using Proto = Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Subscription properties to and from farm.v1.SubscriptionProperties / SubscriptionInfo.</summary>
internal static class SubscriptionMapper
{
    public static Proto.SubscriptionProperties ToProto(SubscriptionSettings settings, bool onlyAssigned)
    {
        bool Send(string property) => !onlyAssigned || settings.IsAssigned(property);

        var proto = new Proto.SubscriptionProperties();
        if (Send(nameof(SubscriptionSettings.LockDuration)))
        {
            proto.LockDuration = WireDurations.ToDuration(settings.LockDuration);
        }

        if (Send(nameof(SubscriptionSettings.MaxDeliveryCount)))
        {
            proto.MaxDeliveryCount = settings.MaxDeliveryCount;
        }

        if (Send(nameof(SubscriptionSettings.DefaultMessageTimeToLive)))
        {
            proto.DefaultMessageTimeToLive = WireDurations.ToDuration(settings.DefaultMessageTimeToLive);
        }

        if (Send(nameof(SubscriptionSettings.DeadLetteringOnMessageExpiration)))
        {
            proto.DeadLetteringOnMessageExpiration = settings.DeadLetteringOnMessageExpiration;
        }

        if (Send(nameof(SubscriptionSettings.EnableDeadLetteringOnFilterEvaluationExceptions)))
        {
            proto.DeadLetteringOnFilterEvaluationExceptions = settings.EnableDeadLetteringOnFilterEvaluationExceptions;
        }

        if (Send(nameof(SubscriptionSettings.RequiresSession)))
        {
            proto.RequiresSession = settings.RequiresSession;
        }

        // Empty string clears forwarding on update.
        if (Send(nameof(SubscriptionSettings.ForwardTo)))
        {
            proto.ForwardTo = settings.ForwardTo ?? string.Empty;
        }

        if (Send(nameof(SubscriptionSettings.ForwardDeadLetteredMessagesTo)))
        {
            proto.ForwardDeadLetteredMessagesTo = settings.ForwardDeadLetteredMessagesTo ?? string.Empty;
        }

        if (Send(nameof(SubscriptionSettings.EnableBatchedOperations)))
        {
            proto.EnableBatchedOperations = settings.EnableBatchedOperations;
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

        if (WireDurations.Positive(proto.LockDuration) is { } lockDuration)
        {
            settings.LockDuration = lockDuration;
        }

        if (proto.HasMaxDeliveryCount && proto.MaxDeliveryCount >= 1)
        {
            settings.MaxDeliveryCount = proto.MaxDeliveryCount;
        }

        if (WireDurations.Positive(proto.DefaultMessageTimeToLive) is { } ttl)
        {
            settings.DefaultMessageTimeToLive = ttl;
        }

        if (proto.HasDeadLetteringOnMessageExpiration)
        {
            settings.DeadLetteringOnMessageExpiration = proto.DeadLetteringOnMessageExpiration;
        }

        if (proto.HasDeadLetteringOnFilterEvaluationExceptions)
        {
            settings.EnableDeadLetteringOnFilterEvaluationExceptions = proto.DeadLetteringOnFilterEvaluationExceptions;
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

        if (proto.HasEnableBatchedOperations)
        {
            settings.EnableBatchedOperations = proto.EnableBatchedOperations;
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
