using Farm.Broker;
using Farm.Broker.Administration;
using Farm.Broker.Node;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;

namespace Farm.Gateway.Management;

/// <summary>
/// farm.v1.NodeControl: node-to-node and operator calls (planned moves, drains), their own
/// service so an access check can tell them from a client's. A call for another node's container
/// or for another node goes to that node, marked direct.
/// </summary>
internal sealed class NodeControlService(BrokerNode node, EntityAdministration admin, OwnerChannels channels)
    : NodeControl.NodeControlBase
{
    /// <summary>A node-to-node call (take, move, drain) that has not answered by then has failed; the operator may try again.</summary>
    private static readonly TimeSpan NodeControlDeadline = TimeSpan.FromSeconds(60);

    private static CallOptions Direct(CancellationToken ct) => new(FarmMetadata.DirectHeaders(), DateTime.UtcNow + NodeControlDeadline, ct);

    public override async Task<ContainerInfo> MoveContainer(MoveContainerRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var container = await admin.RequireContainerAsync(request.ContainerId, ct);
        if (container.OwnerNode == request.ToNode)
        {
            throw FarmErrors.Invalid($"Container {request.ContainerId} is already on node {request.ToNode}.");
        }
        if (node.ServesContainer(container.Id) || FarmMetadata.IsDirect(context.RequestHeaders))
        {
            await node.MoveContainerAsync(container.Id, request.ToNode, async (address, id) =>
            {
                using var take = channels.Get(address).NodeControl.TakeContainerAsync(new TakeContainerRequest { ContainerId = id }, Direct(ct));
                await take.ResponseAsync;
            }, ct);
        }
        else
        {
            var owner = node.OwnerAddressOf(container.Id) ?? throw FarmErrors.NotOwner($"container {container.Id}", null);
            using var move = channels.Get(owner).NodeControl.MoveContainerAsync(request, Direct(ct));
            await move.ResponseAsync;
        }
        return await admin.GetContainerAsync(container.Id, ct);
    }

    public override async Task<ContainerInfo> TakeContainer(TakeContainerRequest request, ServerCallContext context)
    {
        await node.TakeReleasedContainerAsync(request.ContainerId, context.CancellationToken);
        return await admin.GetContainerAsync(request.ContainerId, context.CancellationToken);
    }

    public override async Task<NodeInfo> DrainNode(DrainNodeRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var target = await admin.RequireNodeAsync(request.NodeId, ct);
        if (target.Id == node.NodeId)
        {
            await node.StartDrainAsync(ct);
        }
        else
        {
            using var drain = channels.Get(target.Address).NodeControl.DrainNodeAsync(request, Direct(ct));
            await drain.ResponseAsync;
        }
        return await admin.RequireNodeAsync(request.NodeId, ct);
    }
}
