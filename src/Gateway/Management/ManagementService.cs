using Farm.Broker;
using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.Broker.Rpc;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.Rpc;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Gateway.Management;

/// <summary>
/// farm.v1.Management: entities and containers in the farm database, with runtime counts from
/// the broker that serves them. Calls about one queue's runtime (get with counts, update, delete)
/// run on the node that owns the queue's container: another node forwards them there.
/// </summary>
internal sealed partial class ManagementService(BrokerNode node, OwnerChannels channels, Farm.ContainerStore.IStoreProvider store)
{
    private const string Prefix = ManagementEndpoints.Prefix;

    /// <summary>
    /// Runs <paramref name="here"/> when this node serves the queue (or the call was forwarded
    /// here); otherwise forwards the call to the owner. An owner that is not known yet (a
    /// failover in progress) is an Unavailable the client retries.
    /// </summary>
    private async Task<TResponse> OnOwnerAsync<TRequest, TResponse>(
        EntityRecord record, string method, TRequest request, RpcCallContext context, MessageParser<TResponse> parser, Func<Task<TResponse>> here)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
    {
        if (node.IsLocal(record) || context.GetHeader(OwnerChannels.DirectHeader) is not null)
        {
            return await here();
        }
        var owner = node.OwnerAddressOf(record.ContainerId) ?? throw FarmErrors.NotOwner(record.Name, null);
        return await channels.Get(owner).UnaryAsync(method, request, parser,
            new CallOptions(OwnerChannels.DirectHeaders, CancellationToken: context.CancellationToken));
    }

    public async Task<QueueInfo> CreateQueueAsync(CreateQueueRequest request, RpcCallContext context)
    {
        var ct = context.CancellationToken;
        if (EntityNames.Validate(request.Name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var settings = new QueueSettings().With(request.Properties, request.Name);
        await ValidateForwardTargetsAsync(request.Name, settings, ct);
        var containerId = await PlaceAsync(request.ContainerId, ct);
        EntityRecord record;
        try
        {
            record = await node.Farm.CreateEntityAsync(request.Name, EntityKinds.Queue, containerId, settings.ToJson(), ct);
        }
        catch (EntityAlreadyExistsException)
        {
            throw FarmErrors.EntityExists(request.Name);
        }
        // New and empty; its container may be served by another node, which loads it on first use.
        var info = ToInfoWithoutCounts(record);
        info.Counts = new MessageCounts();
        return info;
    }

    private async Task ValidateForwardTargetsAsync(string queue, QueueSettings settings, CancellationToken ct)
    {
        foreach (var target in new[] { settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo })
        {
            if (target is not null && await node.Farm.GetEntityAsync(target, ct) is null)
            {
                throw FarmErrors.Invalid($"The forwarding target '{target}' does not exist; create it first.");
            }
        }
        await ForwardingLoops.EnsureNoneAsync(node.Farm, queue, null, [settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo], ct);
    }

    public async Task<QueueInfo> GetQueueAsync(GetQueueRequest request, RpcCallContext context)
    {
        var record = await GetRecordAsync(request.Name, context.CancellationToken);
        return await OnOwnerAsync(record, Prefix + "GetQueue", request, context, QueueInfo.Parser,
            () => ToInfoAsync(record, context.CancellationToken));
    }

    public async Task<QueueInfo> UpdateQueueAsync(UpdateQueueRequest request, RpcCallContext context)
    {
        var ct = context.CancellationToken;
        var record = await GetRecordAsync(request.Name, ct);
        return await OnOwnerAsync(record, Prefix + "UpdateQueue", request, context, QueueInfo.Parser, async () =>
        {
            var settings = QueueSettings.FromJson(record.PropertiesJson).With(request.Properties, record.Name);
            await ValidateForwardTargetsAsync(record.Name, settings, ct);
            var updated = await node.Farm.UpdateEntityAsync(record.Name, settings.ToJson(), ct) ?? throw FarmErrors.EntityNotFound(request.Name);
            node.RefreshSettings(updated);
            return await ToInfoAsync(updated, ct);
        });
    }

    public async Task<DeleteQueueResponse> DeleteQueueAsync(DeleteQueueRequest request, RpcCallContext context)
    {
        var record = await GetRecordAsync(request.Name, context.CancellationToken);
        var response = await OnOwnerAsync(record, Prefix + "DeleteQueue", request, context, DeleteQueueResponse.Parser, async () =>
        {
            // The record goes first, so no new operation finds the queue while its messages are purged.
            await node.Farm.DeleteEntityAsync(record.Name, context.CancellationToken);
            await node.DropEntityAsync(record);
            return new DeleteQueueResponse();
        });
        node.ForgetEntity(record.Name);
        return response;
    }

    public async Task<ListQueuesResponse> ListQueuesAsync(ListQueuesRequest request, RpcCallContext context)
    {
        var records = await node.Farm.ListEntitiesAsync(EntityKinds.Queue, context.CancellationToken);
        var response = new ListQueuesResponse();
        foreach (var record in records.OrderBy(r => r.Name, StringComparer.OrdinalIgnoreCase))
        {
            try
            {
                response.Queues.Add(await OnOwnerAsync(record, Prefix + "GetQueue", new GetQueueRequest { Name = record.Name }, context, QueueInfo.Parser,
                    () => ToInfoAsync(record, context.CancellationToken)));
            }
            catch (RpcException e) when (e.StatusCode == RpcStatusCode.Unavailable)
            {
                // Its owner is unreachable right now (a failover): list it without counts.
                response.Queues.Add(ToInfoWithoutCounts(record));
            }
        }
        return response;
    }

    public async Task<ContainerInfo> CreateContainerAsync(CreateContainerRequest request, RpcCallContext context)
    {
        var record = await node.CreateContainerAsync(context.CancellationToken);
        return ToInfo(record);
    }

    public async Task<ListContainersResponse> ListContainersAsync(ListContainersRequest request, RpcCallContext context)
    {
        var containers = await node.Farm.ListContainersAsync(context.CancellationToken);
        return new ListContainersResponse { Containers = { containers.Select(ToInfo) } };
    }

    public async Task<FarmStatus> GetStatusAsync(GetStatusRequest request, RpcCallContext context)
    {
        var ct = context.CancellationToken;
        var nodes = await node.Farm.ListNodesAsync(ct);
        var containers = await node.Farm.ListContainersAsync(ct);
        var entities = await node.Farm.ListEntitiesAsync(null, ct);
        return new FarmStatus
        {
            Nodes =
            {
                nodes.Select(n => new NodeInfo
                {
                    Id = n.Id,
                    State = n.State,
                    Address = n.Address,
                    HeartbeatAge = Duration.FromTimeSpan(n.HeartbeatAge < TimeSpan.Zero ? TimeSpan.Zero : n.HeartbeatAge),
                    ProcessId = n.ProcessId,
                }),
            },
            Containers = { containers.Select(ToInfo) },
            EntityCount = entities.Count,
            Version = typeof(ManagementService).Assembly.GetName().Version?.ToString() ?? "",
        };
    }

    public async Task<ContainerInfo> MoveContainerAsync(MoveContainerRequest request, RpcCallContext context)
    {
        var ct = context.CancellationToken;
        var container = await node.Farm.GetContainerAsync(request.ContainerId, ct) ?? throw FarmErrors.ContainerNotFound(request.ContainerId);
        if (container.OwnerNode == request.ToNode)
        {
            throw FarmErrors.Invalid($"Container {request.ContainerId} is already on node {request.ToNode}.");
        }
        if (node.TryGetContainer(container.Id, out _) || context.GetHeader(OwnerChannels.DirectHeader) is not null)
        {
            await node.MoveContainerAsync(container.Id, request.ToNode, (address, id) =>
                channels.Get(address).UnaryAsync(ManagementEndpoints.NodeControlPrefix + "TakeContainer", new TakeContainerRequest { ContainerId = id }, ContainerInfo.Parser,
                    new CallOptions(OwnerChannels.DirectHeaders, CancellationToken: ct)), ct);
        }
        else
        {
            var owner = node.OwnerAddressOf(container.Id) ?? throw FarmErrors.NotOwner($"container {container.Id}", null);
            await channels.Get(owner).UnaryAsync(ManagementEndpoints.NodeControlPrefix + "MoveContainer", request, ContainerInfo.Parser,
                new CallOptions(OwnerChannels.DirectHeaders, CancellationToken: ct));
        }
        return ToInfo((await node.Farm.GetContainerAsync(container.Id, ct))!);
    }

    public async Task<ContainerInfo> TakeContainerAsync(TakeContainerRequest request, RpcCallContext context)
    {
        await node.TakeReleasedContainerAsync(request.ContainerId, context.CancellationToken);
        return ToInfo((await node.Farm.GetContainerAsync(request.ContainerId, context.CancellationToken))!);
    }

    public async Task<NodeInfo> DrainNodeAsync(DrainNodeRequest request, RpcCallContext context)
    {
        var ct = context.CancellationToken;
        var target = (await node.Farm.ListNodesAsync(ct)).FirstOrDefault(n => n.Id == request.NodeId)
            ?? throw FarmErrors.Invalid($"There is no node {request.NodeId} in this farm.");
        if (target.Id == node.NodeId)
        {
            await node.StartDrainAsync(ct);
        }
        else
        {
            await channels.Get(target.Address).UnaryAsync(ManagementEndpoints.NodeControlPrefix + "DrainNode", request, NodeInfo.Parser,
                new CallOptions(OwnerChannels.DirectHeaders, CancellationToken: ct));
        }
        var after = (await node.Farm.ListNodesAsync(ct)).First(n => n.Id == request.NodeId);
        return new NodeInfo { Id = after.Id, State = after.State, Address = after.Address, ProcessId = after.ProcessId, HeartbeatAge = Duration.FromTimeSpan(after.HeartbeatAge < TimeSpan.Zero ? TimeSpan.Zero : after.HeartbeatAge) };
    }

    private async Task<EntityRecord> GetRecordAsync(string name, CancellationToken ct)
    {
        if (EntityNames.Validate(name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var record = await node.Farm.GetEntityAsync(name, ct);
        if (record is null || record.Kind != EntityKinds.Queue)
        {
            throw FarmErrors.EntityNotFound(name);
        }
        return record;
    }

    private async Task<QueueInfo> ToInfoAsync(EntityRecord record, CancellationToken ct)
    {
        var info = ToInfoWithoutCounts(record);
        var queue = await node.LoadAsync(record, ct);
        info.Counts = queue.GetCounts();
        return info;
    }

    private static QueueInfo ToInfoWithoutCounts(EntityRecord record)
    {
        return new QueueInfo
        {
            Name = record.Name,
            ContainerId = record.ContainerId,
            Properties = QueueSettings.FromJson(record.PropertiesJson).ToProto(),
            CreatedAt = Timestamp.FromDateTime(DateTime.SpecifyKind(record.CreatedAt, DateTimeKind.Utc)),
            UpdatedAt = Timestamp.FromDateTime(DateTime.SpecifyKind(record.UpdatedAt, DateTimeKind.Utc)),
        };
    }

    private ContainerInfo ToInfo(ContainerRecord c)
    {
        var info = new ContainerInfo
        {
            Id = c.Id,
            OwnerNode = c.OwnerNode ?? 0,
            Epoch = c.Epoch,
            EntityCount = c.EntityCount,
            Store = store.Name,
        };
        if (c.OwnedSince is { } since)
        {
            info.OwnedSince = Timestamp.FromDateTime(DateTime.SpecifyKind(since, DateTimeKind.Utc));
        }
        return info;
    }
}
