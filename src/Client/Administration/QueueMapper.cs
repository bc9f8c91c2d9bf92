using Proto = Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Queue properties to and from farm.v1.QueueProperties.</summary>
internal static class QueueMapper
{
    public static Proto.QueueProperties ToProto(QueueSettings settings, bool onlyAssigned)
    {
        var proto = new Proto.QueueProperties();
        EntityPropertyMapping.ToProto((IEntitySettings)settings, proto, onlyAssigned);
        EntityPropertyMapping.ToProto((IReceiverSettings)settings, proto, onlyAssigned);
        EntityPropertyMapping.ToProto((ISendTargetSettings)settings, proto, onlyAssigned);
        return proto;
    }

    /// <summary>Copies every field the server set; unset fields keep the SDK defaults.</summary>
    public static void Load(QueueSettings settings, Proto.QueueProperties? proto)
    {
        if (proto is null)
        {
            return;
        }
        EntityPropertyMapping.Load((IEntitySettings)settings, proto);
        EntityPropertyMapping.Load((IReceiverSettings)settings, proto);
        EntityPropertyMapping.Load((ISendTargetSettings)settings, proto);
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
        Server = string.IsNullOrEmpty(info.Server) ? null : info.Server,
    };

    public static DatabaseServerProperties FromProto(Proto.ServerInfo server) => new()
    {
        Name = server.Name,
        ConnectionString = server.ConnectionString,
        ContainerCount = server.ContainerCount,
    };

    public static FarmNodeProperties FromProto(Proto.NodeInfo node) => new()
    {
        Id = node.Id,
        State = node.State,
        Address = node.Address,
        HeartbeatAge = node.HeartbeatAge?.ToTimeSpan() ?? TimeSpan.Zero,
        ProcessId = node.ProcessId,
        MetricsUrl = string.IsNullOrEmpty(node.MetricsUrl) ? null : node.MetricsUrl,
        AmqpAddress = string.IsNullOrEmpty(node.AmqpAddress) ? null : node.AmqpAddress,
    };

    public static FarmStatusProperties FromProto(Proto.FarmStatus status) => new()
    {
        Nodes = status.Nodes.Select(FromProto).ToList(),
        Containers = status.Containers.Select(FromProto).ToList(),
        EntityCount = status.EntityCount,
        Version = status.Version,
    };
}
