using Farm.Broker;
using Farm.Broker.Node;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;

namespace Farm.Gateway.Management;

/// <summary>
/// farm.v1.NodeControl: node-to-node and operator calls (planned moves, drains), their own
/// service so an access check can tell them from a client's.
/// </summary>
internal sealed class NodeControlService(BrokerNode node, OwnerChannels channels, Farm.ContainerStore.IStoreProvider store)
    : NodeControl.NodeControlBase
{
    /// <summary>A node-to-node call (take, move, drain) that has not answered by then has failed; the operator may try again.</summary>
    private static readonly TimeSpan NodeControlDeadline = TimeSpan.FromSeconds(60);

    public override async Task<ContainerInfo> MoveContainer(MoveContainerRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var container = await node.Farm.GetContainerAsync(request.ContainerId, ct) ?? throw FarmErrors.ContainerNotFound(request.ContainerId);
        if (container.OwnerNode == request.ToNode)
        {
            throw FarmErrors.Invalid($"Container {request.ContainerId} is already on node {request.ToNode}.");
        }
        if (node.TryGetContainer(container.Id, out _) || FarmMetadata.IsDirect(context.RequestHeaders))
        {
            await node.MoveContainerAsync(container.Id, request.ToNode, async (address, id) =>
            {
                using var take = channels.Get(address).NodeControl.TakeContainerAsync(new TakeContainerRequest { ContainerId = id },
                    new CallOptions(FarmMetadata.DirectHeaders(), DateTime.UtcNow + NodeControlDeadline, ct));
                await take.ResponseAsync;
            }, ct);
        }
        else
        {
            var owner = node.OwnerAddressOf(container.Id) ?? throw FarmErrors.NotOwner($"container {container.Id}", null);
            using var move = channels.Get(owner).NodeControl.MoveContainerAsync(request, new CallOptions(FarmMetadata.DirectHeaders(), DateTime.UtcNow + NodeControlDeadline, ct));
            await move.ResponseAsync;
        }
        return ManagementService.ToInfo((await node.Farm.GetContainerAsync(container.Id, ct))!, store.Name);
    }

    public override async Task<ContainerInfo> TakeContainer(TakeContainerRequest request, ServerCallContext context)
    {
        await node.TakeReleasedContainerAsync(request.ContainerId, context.CancellationToken);
        return ManagementService.ToInfo((await node.Farm.GetContainerAsync(request.ContainerId, context.CancellationToken))!, store.Name);
    }

    public override async Task<NodeInfo> DrainNode(DrainNodeRequest request, ServerCallContext context)
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
            using var drain = channels.Get(target.Address).NodeControl.DrainNodeAsync(request, new CallOptions(FarmMetadata.DirectHeaders(), DateTime.UtcNow + NodeControlDeadline, ct));
            await drain.ResponseAsync;
        }
        var after = (await node.Farm.ListNodesAsync(ct)).First(n => n.Id == request.NodeId);
        return new NodeInfo { Id = after.Id, State = after.State, Address = after.Address, ProcessId = after.ProcessId, HeartbeatAge = Duration.FromTimeSpan(after.HeartbeatAge < TimeSpan.Zero ? TimeSpan.Zero : after.HeartbeatAge) };
    }
}
