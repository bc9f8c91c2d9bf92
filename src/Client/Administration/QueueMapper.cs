using Proto = Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Queue properties to and from farm.v1.QueueProperties.</summary>
internal static class QueueMapper
{
    public static Proto.QueueProperties ToProto(QueueSettings settings, bool onlyAssigned)
    {
        bool Send(string property) => !onlyAssigned || settings.IsAssigned(property);

        var proto = new Proto.QueueProperties();
        if (Send(nameof(QueueSettings.LockDuration)))
        {
            proto.LockDuration = WireDurations.ToDuration(settings.LockDuration);
        }

        if (Send(nameof(QueueSettings.MaxDeliveryCount)))
        {
            proto.MaxDeliveryCount = settings.MaxDeliveryCount;
        }

        if (Send(nameof(QueueSettings.DefaultMessageTimeToLive)))
        {
            proto.DefaultMessageTimeToLive = WireDurations.ToDuration(settings.DefaultMessageTimeToLive);
        }

        if (Send(nameof(QueueSettings.DeadLetteringOnMessageExpiration)))
        {
            proto.DeadLetteringOnMessageExpiration = settings.DeadLetteringOnMessageExpiration;
        }

        if (Send(nameof(QueueSettings.RequiresDuplicateDetection)))
        {
            proto.RequiresDuplicateDetection = settings.RequiresDuplicateDetection;
        }

        if (Send(nameof(QueueSettings.DuplicateDetectionHistoryTimeWindow)))
        {
            proto.DuplicateDetectionHistoryTimeWindow = WireDurations.ToDuration(settings.DuplicateDetectionHistoryTimeWindow);
        }

        if (Send(nameof(QueueSettings.RequiresSession)))
        {
            proto.RequiresSession = settings.RequiresSession;
        }

        // Empty string clears forwarding on update.
        if (Send(nameof(QueueSettings.ForwardTo)))
        {
            proto.ForwardTo = settings.ForwardTo ?? string.Empty;
        }

        if (Send(nameof(QueueSettings.ForwardDeadLetteredMessagesTo)))
        {
            proto.ForwardDeadLetteredMessagesTo = settings.ForwardDeadLetteredMessagesTo ?? string.Empty;
        }

        if (Send(nameof(QueueSettings.MaxSizeInMegabytes)))
        {
            proto.MaxSizeInMegabytes = settings.MaxSizeInMegabytes;
        }

        if (Send(nameof(QueueSettings.EnableBatchedOperations)))
        {
            proto.EnableBatchedOperations = settings.EnableBatchedOperations;
        }

        return proto;
    }

    /// <summary>Copies every field the server set; unset fields keep the SDK defaults.</summary>
    public static void Load(QueueSettings settings, Proto.QueueProperties? proto)
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

        if (proto.HasRequiresDuplicateDetection)
        {
            settings.RequiresDuplicateDetection = proto.RequiresDuplicateDetection;
        }

        if (WireDurations.Positive(proto.DuplicateDetectionHistoryTimeWindow) is { } window)
        {
            settings.DuplicateDetectionHistoryTimeWindow = window;
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

        if (proto.HasMaxSizeInMegabytes && proto.MaxSizeInMegabytes >= 1)
        {
            settings.MaxSizeInMegabytes = proto.MaxSizeInMegabytes;
        }

        if (proto.HasEnableBatchedOperations)
        {
            settings.EnableBatchedOperations = proto.EnableBatchedOperations;
        }
    }

    public static QueueProperties FromInfo(Proto.QueueInfo info)
    {
        var properties = new QueueProperties(info.Name)
        {
            ContainerId = info.ContainerId,
            CreatedAt = info.CreatedAt?.ToDateTimeOffset() ?? default,
            UpdatedAt = info.UpdatedAt?.ToDateTimeOffset() ?? default,
        };
        properties.Load(info.Properties ?? new Proto.QueueProperties());
        return properties;
    }

    public static QueueRuntimeProperties RuntimeFromInfo(Proto.QueueInfo info)
    {
        var counts = info.Counts ?? new Proto.MessageCounts();
        return new QueueRuntimeProperties(info.Name)
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

    public static ContainerProperties FromProto(Proto.ContainerInfo info) => new()
    {
        Id = info.Id,
        OwnerNode = info.OwnerNode == 0 ? null : info.OwnerNode,
        Epoch = info.Epoch,
        EntityCount = info.EntityCount,
        OwnedSince = info.OwnedSince?.ToDateTimeOffset(),
        Store = info.Store,
    };

    public static FarmNodeProperties FromProto(Proto.NodeInfo node) => new()
    {
        Id = node.Id,
        State = node.State,
        Address = node.Address,
        HeartbeatAge = node.HeartbeatAge?.ToTimeSpan() ?? TimeSpan.Zero,
        ProcessId = node.ProcessId,
        MetricsUrl = string.IsNullOrEmpty(node.MetricsUrl) ? null : node.MetricsUrl,
    };

    public static FarmStatusProperties FromProto(Proto.FarmStatus status) => new()
    {
        Nodes = status.Nodes.Select(FromProto).ToList(),
        Containers = status.Containers.Select(FromProto).ToList(),
        EntityCount = status.EntityCount,
        Version = status.Version,
    };
}
