using Farm.Broker;
using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Gateway.Management;

/// <summary>
/// farm.v1.Management: entities and containers in the farm database, with runtime counts from
/// the broker that serves them. Calls about one queue's runtime (get with counts, update, delete)
/// run on the node that owns the queue's container: another node forwards them there.
/// </summary>
internal sealed partial class ManagementService(BrokerNode node, OwnerRouting routing, Farm.ContainerStore.IStoreProvider store)
    : Farm.Contracts.V1.Management.ManagementBase
{
    /// <summary>
    /// Runs <paramref name="here"/> on the node that serves the entity: here, or forwarded to its
    /// owner by the same policy messaging uses (<see cref="OwnerRouting"/>). A listing passes
    /// <paramref name="hold"/> false: an owner in the middle of a failover fails that one item at
    /// once instead of holding the whole listing.
    /// </summary>
    private Task<TResponse> OnOwnerAsync<TResponse>(
        EntityRecord record, Func<Farm.Contracts.V1.Management.ManagementClient, CallOptions, AsyncUnaryCall<TResponse>> forward,
        ServerCallContext context, Func<Task<TResponse>> here, bool hold = true) =>
        routing.RouteAsync(new RoutedCall("Management", record.Name, Hold: hold), context, _ => here(), (owner, options) => forward(owner.Management, options));

    public override async Task<QueueInfo> CreateQueue(CreateQueueRequest request, ServerCallContext context)
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

    public override async Task<QueueInfo> GetQueue(GetQueueRequest request, ServerCallContext context)
    {
        var record = await GetRecordAsync(request.Name, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.GetQueueAsync(request, options), context,
            () => ToInfoAsync(record, context.CancellationToken));
    }

    public override async Task<QueueInfo> UpdateQueue(UpdateQueueRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var record = await GetRecordAsync(request.Name, ct);
        return await OnOwnerAsync(record, (owner, options) => owner.UpdateQueueAsync(request, options), context, async () =>
        {
            var settings = QueueSettings.FromJson(record.PropertiesJson).With(request.Properties, record.Name);
            await ValidateForwardTargetsAsync(record.Name, settings, ct);
            var updated = await node.Farm.UpdateEntityAsync(record.Name, settings.ToJson(), ct) ?? throw FarmErrors.EntityNotFound(request.Name);
            node.RefreshSettings(updated);
            return await ToInfoAsync(updated, ct);
        });
    }

    public override async Task<DeleteQueueResponse> DeleteQueue(DeleteQueueRequest request, ServerCallContext context)
    {
        var record = await GetRecordAsync(request.Name, context.CancellationToken);
        var response = await OnOwnerAsync(record, (owner, options) => owner.DeleteQueueAsync(request, options), context, async () =>
        {
            // The record goes first, so no new operation finds the queue while its messages are purged.
            await node.Farm.DeleteEntityAsync(record.Name, context.CancellationToken);
            await node.DropEntityAsync(record);
            return new DeleteQueueResponse();
        });
        node.ForgetEntity(record.Name);
        return response;
    }

    public override async Task<ListQueuesResponse> ListQueues(ListQueuesRequest request, ServerCallContext context)
    {
        var records = await node.Farm.ListEntitiesAsync(EntityKinds.Queue, context.CancellationToken);
        var response = new ListQueuesResponse();
        foreach (var record in records.OrderBy(r => r.Name, StringComparer.OrdinalIgnoreCase))
        {
            try
            {
                response.Queues.Add(await OnOwnerAsync(record, (owner, options) => owner.GetQueueAsync(new GetQueueRequest { Name = record.Name }, options), context,
                    () => ToInfoAsync(record, context.CancellationToken), hold: false));
            }
            catch (Exception e) when (CallFailures.IsUnavailable(e))
            {
                // Its owner is unreachable right now (a failover): list it without counts.
                response.Queues.Add(ToInfoWithoutCounts(record));
            }
        }
        return response;
    }

    public override async Task<ContainerInfo> CreateContainer(CreateContainerRequest request, ServerCallContext context)
    {
        var record = await node.CreateContainerAsync(context.CancellationToken);
        return ToInfo(record, store.Name);
    }

    public override async Task<ListContainersResponse> ListContainers(ListContainersRequest request, ServerCallContext context)
    {
        var containers = await node.Farm.ListContainersAsync(context.CancellationToken);
        return new ListContainersResponse { Containers = { containers.Select(c => ToInfo(c, store.Name)) } };
    }

    public override async Task<FarmStatus> GetStatus(GetStatusRequest request, ServerCallContext context)
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
                    MetricsUrl = n.MetricsAddress ?? "",
                }),
            },
            Containers = { containers.Select(c => ToInfo(c, store.Name)) },
            EntityCount = entities.Count,
            Version = typeof(ManagementService).Assembly.GetName().Version?.ToString() ?? "",
        };
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

    internal static ContainerInfo ToInfo(ContainerRecord c, string store)
    {
        var info = new ContainerInfo
        {
            Id = c.Id,
            OwnerNode = c.OwnerNode ?? 0,
            Epoch = c.Epoch,
            EntityCount = c.EntityCount,
            Store = store,
        };
        if (c.OwnedSince is { } since)
        {
            info.OwnedSince = Timestamp.FromDateTime(DateTime.SpecifyKind(since, DateTimeKind.Utc));
        }
        return info;
    }
}
