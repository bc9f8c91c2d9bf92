using Farm.Broker.Administration;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;

namespace Farm.Gateway.Management;

/// <summary>
/// farm.v1.Management over the broker's <see cref="EntityAdministration"/>. Calls about one
/// entity's runtime (get with counts, update, delete, subscriptions and rules of a loaded topic)
/// run on the node that owns its container: this class finds the record and routes the call by
/// the same policy messaging uses (<see cref="OwnerRouting"/>). Everything else runs here.
/// </summary>
internal sealed partial class ManagementService(EntityAdministration admin, OwnerRouting routing, IOwnerDirectory directory)
    : Farm.Contracts.V1.Management.ManagementBase
{
    /// <summary>
    /// Runs <paramref name="here"/> on the node that serves the entity: here, or forwarded to its
    /// owner. A listing passes <paramref name="hold"/> false: an owner in the middle of a failover
    /// fails that one item at once instead of holding the whole listing.
    /// </summary>
    private Task<TResponse> OnOwnerAsync<TResponse>(
        EntityRecord record, Func<Farm.Contracts.V1.Management.ManagementClient, CallOptions, AsyncUnaryCall<TResponse>> forward,
        ServerCallContext context, Func<CancellationToken, Task<TResponse>> here, bool hold = true) =>
        routing.RouteAsync(new RoutedCall("Management", record.Name, Hold: hold), context, here, (owner, options) => forward(owner.Management, options));

    public override Task<QueueInfo> CreateQueue(CreateQueueRequest request, ServerCallContext context) =>
        admin.CreateQueueAsync(request, context.CancellationToken);

    public override async Task<QueueInfo> GetQueue(GetQueueRequest request, ServerCallContext context)
    {
        var record = await admin.RequireEntityAsync(request.Name, EntityKinds.Queue, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.GetQueueAsync(request, options), context,
            ct => admin.GetQueueAsync(record, ct));
    }

    public override async Task<QueueInfo> UpdateQueue(UpdateQueueRequest request, ServerCallContext context)
    {
        var record = await admin.RequireEntityAsync(request.Name, EntityKinds.Queue, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.UpdateQueueAsync(request, options), context,
            ct => admin.UpdateQueueAsync(record, request, ct));
    }

    public override async Task<DeleteQueueResponse> DeleteQueue(DeleteQueueRequest request, ServerCallContext context)
    {
        var record = await admin.RequireEntityAsync(request.Name, EntityKinds.Queue, context.CancellationToken);
        var response = await OnOwnerAsync(record, (owner, options) => owner.DeleteQueueAsync(request, options), context, async ct =>
        {
            await admin.DeleteQueueAsync(record, ct);
            return new DeleteQueueResponse();
        });
        Forget(record.Name);
        return response;
    }

    /// <summary>A deleted entity: neither the broker nor the routing here keeps what it knew of it.</summary>
    private void Forget(string name)
    {
        admin.Forget(name);
        directory.Forget(name);
    }

    public override async Task<ListQueuesResponse> ListQueues(ListQueuesRequest request, ServerCallContext context)
    {
        var response = new ListQueuesResponse();
        foreach (var record in await admin.ListAsync(EntityKinds.Queue, context.CancellationToken))
        {
            try
            {
                response.Queues.Add(await OnOwnerAsync(record, (owner, options) => owner.GetQueueAsync(new GetQueueRequest { Name = record.Name }, options), context,
                    ct => admin.GetQueueAsync(record, ct), hold: false));
            }
            catch (Exception e) when (CallFailures.IsUnavailable(e))
            {
                // Its owner is unreachable right now (a failover): list it without counts.
                response.Queues.Add(EntityAdministration.DescribeQueue(record));
            }
        }
        return response;
    }

    public override Task<ContainerInfo> CreateContainer(CreateContainerRequest request, ServerCallContext context) =>
        admin.CreateContainerAsync(request.Server, context.CancellationToken);

    public override Task<ServerInfo> AddServer(AddServerRequest request, ServerCallContext context) =>
        admin.AddServerAsync(request.Name, request.ConnectionString, context.CancellationToken);

    public override async Task<ListServersResponse> ListServers(ListServersRequest request, ServerCallContext context) =>
        new() { Servers = { await admin.ListServersAsync(context.CancellationToken) } };

    public override async Task<RemoveServerResponse> RemoveServer(RemoveServerRequest request, ServerCallContext context)
    {
        await admin.RemoveServerAsync(request.Name, context.CancellationToken);
        return new RemoveServerResponse();
    }

    public override async Task<ListContainersResponse> ListContainers(ListContainersRequest request, ServerCallContext context) =>
        new() { Containers = { await admin.ListContainersAsync(context.CancellationToken) } };

    public override Task<FarmStatus> GetStatus(GetStatusRequest request, ServerCallContext context) =>
        admin.GetStatusAsync(context.CancellationToken);

    public override Task<AccessPolicyInfo> CreateAccessPolicy(CreateAccessPolicyRequest request, ServerCallContext context) =>
        admin.CreateAccessPolicyAsync(request.Name, request.Rights, context.CancellationToken);

    public override async Task<ListAccessPoliciesResponse> ListAccessPolicies(ListAccessPoliciesRequest request, ServerCallContext context) =>
        new() { Policies = { await admin.ListAccessPoliciesAsync(context.CancellationToken) } };

    public override async Task<DeleteAccessPolicyResponse> DeleteAccessPolicy(DeleteAccessPolicyRequest request, ServerCallContext context)
    {
        await admin.DeleteAccessPolicyAsync(request.Name, context.CancellationToken);
        return new DeleteAccessPolicyResponse();
    }

    public override Task<AccessPolicyInfo> RenewAccessPolicyKey(RenewAccessPolicyKeyRequest request, ServerCallContext context) =>
        admin.RenewAccessPolicyKeyAsync(request.Name, request.Key, context.CancellationToken);
}
