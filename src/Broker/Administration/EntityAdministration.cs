using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.ContainerStore;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Administration;

/// <summary>
/// The broker's side of farm.v1.Management and NodeControl, in the farm's own terms: entities and
/// containers in the farm database, with runtime counts from the node that serves them. It knows
/// nothing of routing: the gateway finds an entity's record here (<see cref="RequireEntityAsync"/>),
/// decides where the call runs, and on the owner calls the method that takes the record. Methods
/// that take a record must run on the node that owns its container; the others run anywhere.
/// Failures are <see cref="BrokerException"/>s.
/// </summary>
public sealed partial class EntityAdministration(BrokerNode node, IStoreProvider store)
{
    private IFarmStore Farm => node.Farm;

    // ---- Looking entities up (anywhere) ----

    /// <summary>The record of the queue or topic <paramref name="name"/>; INVALID for a bad name, NOT_FOUND when absent or of another kind.</summary>
    public async Task<EntityRecord> RequireEntityAsync(string name, string kind, CancellationToken ct)
    {
        if (EntityNames.Validate(name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var record = await Farm.GetEntityAsync(name, ct).ConfigureAwait(false);
        if (record is null || record.Kind != kind)
        {
            throw FarmErrors.Create(FarmErrorCode.MessagingEntityNotFound, $"The {kind} '{name}' does not exist.");
        }
        return record;
    }

    /// <summary>The record of subscription <paramref name="name"/> of <paramref name="topic"/>; NOT_FOUND names what is missing.</summary>
    public async Task<EntityRecord> RequireSubscriptionAsync(string topic, string name, CancellationToken ct)
    {
        if ((EntityNames.Validate(topic) ?? EntityNames.ValidateSubscriptionName(name)) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var path = EntityNames.SubscriptionPath(topic, name);
        var record = await Farm.GetEntityAsync(path, ct).ConfigureAwait(false);
        if (record is null || record.Kind != EntityKinds.Subscription)
        {
            var topicRecord = await Farm.GetEntityAsync(topic, ct).ConfigureAwait(false);
            throw FarmErrors.Create(FarmErrorCode.MessagingEntityNotFound,
                topicRecord is null || topicRecord.Kind != EntityKinds.Topic
                    ? $"The topic '{topic}' does not exist."
                    : $"The subscription '{path}' does not exist.");
        }
        return record;
    }

    /// <summary>Every queue or topic, by name.</summary>
    public async Task<IReadOnlyList<EntityRecord>> ListAsync(string kind, CancellationToken ct)
    {
        var records = await Farm.ListEntitiesAsync(kind, ct).ConfigureAwait(false);
        return records.OrderBy(r => r.Name, StringComparer.OrdinalIgnoreCase).ToList();
    }

    /// <summary>Forgets what this node cached about a deleted entity (the node that routed the delete calls it).</summary>
    public void Forget(string name) => node.ForgetEntity(name);

    // ---- Queues ----

    public async Task<QueueInfo> CreateQueueAsync(CreateQueueRequest request, CancellationToken ct)
    {
        if (EntityNames.Validate(request.Name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var settings = new QueueSettings().With(request.Properties, request.Name);
        await ValidateForwardTargetsAsync(request.Name, settings, ct).ConfigureAwait(false);
        var containerId = await PlaceAsync(request.ContainerId, ct).ConfigureAwait(false);
        EntityRecord record;
        try
        {
            record = await Farm.CreateEntityAsync(request.Name, EntityKinds.Queue, containerId, settings.ToJson(), ct).ConfigureAwait(false);
        }
        catch (EntityAlreadyExistsException)
        {
            throw FarmErrors.EntityExists(request.Name);
        }
        // New and empty: served here, it starts loaded without a read; else its container's owner loads it on first use.
        await node.StartNewQueueAsync(record).ConfigureAwait(false);
        var info = DescribeQueue(record);
        info.Counts = new MessageCounts();
        return info;
    }

    /// <summary>The queue with its counts (on its owner).</summary>
    public async Task<QueueInfo> GetQueueAsync(EntityRecord record, CancellationToken ct)
    {
        var info = DescribeQueue(record);
        var queue = await node.LoadAsync(record, ct).ConfigureAwait(false);
        info.Counts = queue.GetCounts();
        return info;
    }

    /// <summary>The queue as the farm database has it, without counts (its owner may be unreachable).</summary>
    public static QueueInfo DescribeQueue(EntityRecord record) => new()
    {
        Name = record.Name,
        ContainerId = record.ContainerId,
        Properties = QueueSettings.FromJson(record.PropertiesJson).ToProto(),
        CreatedAt = ToTimestamp(record.CreatedAt),
        UpdatedAt = ToTimestamp(record.UpdatedAt),
    };

    /// <summary>Applies the changed properties (on its owner, which applies them to the loaded queue at once).</summary>
    public async Task<QueueInfo> UpdateQueueAsync(EntityRecord record, UpdateQueueRequest request, CancellationToken ct)
    {
        var settings = QueueSettings.FromJson(record.PropertiesJson).With(request.Properties, record.Name);
        await ValidateForwardTargetsAsync(record.Name, settings, ct).ConfigureAwait(false);
        var updated = await Farm.UpdateEntityAsync(record.Name, settings.ToJson(), ct).ConfigureAwait(false) ?? throw FarmErrors.EntityNotFound(request.Name);
        node.RefreshSettings(updated);
        return await GetQueueAsync(updated, ct).ConfigureAwait(false);
    }

    /// <summary>Deletes the queue and its messages (on its owner).</summary>
    public async Task DeleteQueueAsync(EntityRecord record, CancellationToken ct)
    {
        // The record goes first, so no new operation finds the queue while its messages are purged.
        await Farm.DeleteEntityAsync(record.Name, ct).ConfigureAwait(false);
        await node.DropEntityAsync(record).ConfigureAwait(false);
    }

    private async Task ValidateForwardTargetsAsync(string queue, QueueSettings settings, CancellationToken ct)
    {
        foreach (var target in new[] { settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo })
        {
            if (target is not null && await Farm.GetEntityAsync(target, ct).ConfigureAwait(false) is null)
            {
                throw FarmErrors.Invalid($"The forwarding target '{target}' does not exist; create it first.");
            }
        }
        await ForwardingLoops.EnsureNoneAsync(Farm, queue, null, [settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo], ct).ConfigureAwait(false);
    }

    /// <summary>The container the caller named (which must exist), or else the one with the fewest entities.</summary>
    private async Task<long> PlaceAsync(long requested, CancellationToken ct)
    {
        if (requested != 0)
        {
            return await Farm.GetContainerAsync(requested, ct).ConfigureAwait(false) is null ? throw FarmErrors.ContainerNotFound(requested) : requested;
        }
        var containers = await Farm.ListContainersAsync(ct).ConfigureAwait(false);
        return containers.OrderBy(c => c.EntityCount).ThenBy(c => c.Id).First().Id;
    }

    // ---- Containers, nodes and the farm ----

    public async Task<ContainerInfo> CreateContainerAsync(CancellationToken ct) =>
        DescribeContainer(await node.CreateContainerAsync(ct).ConfigureAwait(false));

    public async Task<ContainerInfo> CreateContainerAsync(string? server, CancellationToken ct) =>
        DescribeContainer(await node.CreateContainerAsync(string.IsNullOrWhiteSpace(server) ? null : server.Trim(), ct).ConfigureAwait(false));

    public async Task<ServerInfo> AddServerAsync(string name, string connectionString, CancellationToken ct) =>
        DescribeServer(await node.AddServerAsync(name?.Trim() ?? "", connectionString ?? "", ct).ConfigureAwait(false));

    public async Task<IReadOnlyList<ServerInfo>> ListServersAsync(CancellationToken ct) =>
        [.. (await Farm.ListServersAsync(ct).ConfigureAwait(false)).Select(DescribeServer)];

    public Task RemoveServerAsync(string name, CancellationToken ct) => node.RemoveServerAsync(name?.Trim() ?? "", ct);

    private static ServerInfo DescribeServer(ServerRecord s) => new()
    {
        Name = s.Name,
        ConnectionString = MaskPassword(s.ConnectionString),
        ContainerCount = s.ContainerCount,
    };

    /// <summary>A connection string fit to show: its password (Password= or Pwd=) as ***.</summary>
    private static string MaskPassword(string connectionString) =>
        System.Text.RegularExpressions.Regex.Replace(connectionString, "(?i)\\b(password|pwd)\\s*=\\s*[^;]*", "$1=***");

    public async Task<IReadOnlyList<ContainerInfo>> ListContainersAsync(CancellationToken ct) =>
        (await Farm.ListContainersAsync(ct).ConfigureAwait(false)).Select(DescribeContainer).ToList();

    /// <summary>The container's row; NOT_FOUND when there is none.</summary>
    public async Task<ContainerRecord> RequireContainerAsync(long id, CancellationToken ct) =>
        await Farm.GetContainerAsync(id, ct).ConfigureAwait(false) ?? throw FarmErrors.ContainerNotFound(id);

    public async Task<ContainerInfo> GetContainerAsync(long id, CancellationToken ct) =>
        DescribeContainer(await RequireContainerAsync(id, ct).ConfigureAwait(false));

    /// <summary>The node's row; INVALID when the farm has no such node.</summary>
    public async Task<NodeInfo> RequireNodeAsync(long id, CancellationToken ct) =>
        (await Farm.ListNodesAsync(ct).ConfigureAwait(false)).Where(n => n.Id == id).Select(DescribeNode).FirstOrDefault()
            ?? throw FarmErrors.Invalid($"There is no node {id} in this farm.");

    /// <summary>
    /// The newest changes of the containers' owners, newest first, at most <paramref name="limit"/>
    /// (the farm database keeps the newest 1,000): each take that changed an owner, its kind
    /// (<see cref="OwnershipChangeKinds"/>) and how long the container was without one. Runs anywhere;
    /// INVALID for a limit below 1.
    /// </summary>
    public async Task<IReadOnlyList<OwnershipChangeRecord>> ListOwnershipChangesAsync(int limit, CancellationToken ct)
    {
        if (limit < 1)
        {
            throw FarmErrors.Invalid($"The number of changes to list must be at least 1, not {limit}.");
        }
        return await Farm.ListOwnershipChangesAsync(limit, ct).ConfigureAwait(false);
    }

    public async Task<FarmStatus> GetStatusAsync(CancellationToken ct)
    {
        var nodes = await Farm.ListNodesAsync(ct).ConfigureAwait(false);
        var containers = await Farm.ListContainersAsync(ct).ConfigureAwait(false);
        var entities = await Farm.ListEntitiesAsync(null, ct).ConfigureAwait(false);
        return new FarmStatus
        {
            Nodes = { nodes.Select(DescribeNode) },
            Containers = { containers.Select(DescribeContainer) },
            EntityCount = entities.Count,
            Version = typeof(EntityAdministration).Assembly.GetName().Version?.ToString() ?? "",
        };
    }

    private static NodeInfo DescribeNode(NodeRecord n) => new()
    {
        Id = n.Id,
        State = n.State,
        Address = n.Address,
        HeartbeatAge = Duration.FromTimeSpan(n.HeartbeatAge < TimeSpan.Zero ? TimeSpan.Zero : n.HeartbeatAge),
        ProcessId = n.ProcessId,
        MetricsUrl = n.MetricsAddress ?? "",
        AmqpAddress = n.AmqpAddress ?? "",
    };

    private ContainerInfo DescribeContainer(ContainerRecord c)
    {
        var info = new ContainerInfo
        {
            Id = c.Id,
            OwnerNode = c.OwnerNode ?? 0,
            Epoch = c.Epoch,
            EntityCount = c.EntityCount,
            Store = store.Name,
            Server = c.Server ?? "",
        };
        if (c.OwnedSince is { } since)
        {
            info.OwnedSince = ToTimestamp(since);
        }
        return info;
    }

    private static Timestamp ToTimestamp(DateTime utc) => Timestamp.FromDateTime(DateTime.SpecifyKind(utc, DateTimeKind.Utc));
}
