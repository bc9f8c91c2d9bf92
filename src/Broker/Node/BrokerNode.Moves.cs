using Farm.ContainerStore.FarmDatabase;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Node;

// Planned moves: a manual container move (drain it here, hand it to the named node) and a node
// drain (hand every container over, one at a time, then stop). Both release gracefully: the
// entities stop taking calls, the commit queue drains, the lease is released, and the next owner
// raises the epoch. Clients see at most a retryable NOT_OWNER / SERVICE_BUSY in between.
public sealed partial class BrokerNode
{
    private readonly TaskCompletionSource _drained = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private volatile bool _draining;

    /// <summary>Completes when a drain has handed every container over; the host then stops.</summary>
    public Task Drained => _drained.Task;

    public bool IsDraining => _draining;

    /// <summary>
    /// Moves a container this node owns to <paramref name="toNode"/>: releases it gracefully, then
    /// asks the target (through <paramref name="handOver"/>, given its address) to take it at once,
    /// before any other node's ownership pass would.
    /// </summary>
    public async Task MoveContainerAsync(long containerId, long toNode, Func<string, long, Task> handOver, CancellationToken cancellationToken)
    {
        if (!_containers.ContainsKey(containerId))
        {
            throw FarmErrors.NotOwner($"container {containerId}", OwnerAddressOf(containerId));
        }
        if (toNode == NodeId)
        {
            throw FarmErrors.Invalid($"Container {containerId} is already on node {toNode}.");
        }
        var target = (await Farm.ListNodesAsync(cancellationToken).ConfigureAwait(false))
            .FirstOrDefault(n => n.Id == toNode && n.State == NodeStates.Active && n.HeartbeatAge < _nodeOptions.NodeTimeout)
            ?? throw FarmErrors.Invalid($"Node {toNode} is not a live, active node of this farm.");
        LogMoving(_logger, containerId, toNode);
        await ReleaseContainerAsync(Farm, containerId).ConfigureAwait(false);
        await handOver(target.Address, containerId).ConfigureAwait(false);
    }

    /// <summary>Takes a container another node just released for us (the second half of a move).</summary>
    public async Task TakeReleasedContainerAsync(long containerId, CancellationToken cancellationToken)
    {
        await _ownershipGate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (!await TakeContainerAsync(Farm, containerId, cancellationToken).ConfigureAwait(false))
            {
                throw FarmErrors.Busy(
                    $"Container {containerId} was taken by another node before node {NodeId} could take it.");
            }
        }
        finally
        {
            _ownershipGate.Release();
        }
    }

    /// <summary>Starts handing this node's containers to the others; <see cref="Drained"/> completes when none is left.</summary>
    public async Task StartDrainAsync(CancellationToken cancellationToken)
    {
        // Others stop counting this node as live at once: its share drops to zero everywhere.
        await Farm.SetNodeStateAsync(NodeId, NodeStates.Draining, cancellationToken).ConfigureAwait(false);
        _draining = true;
        LogDraining(_logger, NodeId, _containers.Count);
    }

    /// <summary>
    /// For tests: stops heartbeats and ownership passes without handing anything over, as a killed
    /// process would. The containers stay open, so a test can show that their writes are fenced.
    /// </summary>
    /// <summary>
    /// For tests, a crash: the loops stop (no release, no drain, nothing handed back), and this
    /// returns once their work under way has ended, as a killed process's last heartbeat has landed
    /// before anything looks at the farm after it. Returning at the cancel let a heartbeat still in
    /// flight land after a successor's first look, which then refused to start as if this node were
    /// still running (FollowerTests.OnPostgreSql_AfterACrash_..., on CI).
    /// </summary>
    internal async Task StopOwnershipForTestsAsync()
    {
        await _stopping.CancelAsync().ConfigureAwait(false);
        foreach (var loop in new[] { _ownershipLoop, _renewalLoop, _crashWatch })
        {
            if (loop is not null)
            {
                await loop.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
            }
        }
    }

    /// <summary>One step of a drain, from the ownership pass: release one container, or finish.</summary>
    private async Task DrainStepAsync(IFarmStore farm)
    {
        // One hand-over at a time, in the background: this pass must go on heartbeating.
        if (!_releasing.IsEmpty)
        {
            return;
        }
        var next = _containers.Keys.Order().FirstOrDefault();
        if (next != 0)
        {
            StartRelease(farm, next);
        }
        else
        {
            _drained.TrySetResult();
        }
        await Task.CompletedTask.ConfigureAwait(false);
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Moving container {ContainerId} to node {Target}")]
    private static partial void LogMoving(ILogger logger, long containerId, long target);

    [LoggerMessage(Level = LogLevel.Information, Message = "Node {NodeId} draining: handing {Count} containers to the others")]
    private static partial void LogDraining(ILogger logger, long nodeId, int count);
}
