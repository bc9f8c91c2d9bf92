using System.Net;
using Farm.Broker.Node;
using Farm.ContainerStore;
using Farm.Gateway.Grpc;
using Microsoft.AspNetCore.Server.Kestrel.Core;

namespace Farm.Gateway.Hosting;

/// <summary>The listeners Kestrel bound, kept so the node can say where it serves once the ports are known.</summary>
internal sealed class NodeListeners
{
    public ListenOptions? Grpc { get; set; }

    public ListenOptions? Metrics { get; set; }

    /// <summary>
    /// The address the AMQP listener registers once it is bound (into <see cref="NodeOptions.AmqpAddress"/>):
    /// amqp://host:port with the port the OS picked for --amqp-port 0, and the host others reach it by.
    /// </summary>
    public static string AmqpAddressOf(IPEndPoint bound, string? advertiseHost) =>
        $"amqp://{GrpcHosting.HostOf(bound, advertiseHost)}:{bound.Port}";
}

/// <summary>
/// Runs the broker node inside the host's lifetime: starts it once Kestrel listens (the address
/// with the port the OS picked is known then; the grpc.health.v1 service says SERVING from then on,
/// which is what the `farm` CLI waits for), stops the host when the node leaves the farm (drained, or replaced by another process with its
/// id), and stops the node with the host. <see cref="ExitCode"/> says how it ended.
/// </summary>
internal sealed partial class BrokerNodeService(
    BrokerNode node, NodeListeners listeners, NodeHostOptions options, IHostApplicationLifetime lifetime, ILogger<BrokerNodeService> logger)
    : IHostedLifecycleService, IDisposable
{
    private Task? _leaving;

    /// <summary>
    /// The node's own stop, apart from the host's: a stop with --drain-on-stop keeps the node's
    /// heartbeats and ownership passes running while it hands its containers over.
    /// </summary>
    private readonly CancellationTokenSource _nodeStopping = new();

    /// <summary>0 for a normal stop; 1 when the node could not start or another process took its id.</summary>
    public int ExitCode { get; private set; }

    public async Task StartedAsync(CancellationToken cancellationToken)
    {
        var address = GrpcHosting.AddressOf(listeners.Grpc!, options.AdvertiseHost);
        var metricsAddress = GrpcHosting.AddressOf(listeners.Metrics!, options.AdvertiseHost) + NodeTelemetry.MetricsPath;
        try
        {
            await node.StartAsync(address, _nodeStopping.Token, metricsAddress).ConfigureAwait(false);
        }
        catch (Exception e) when (e is StoreUnavailableException or InvalidOperationException or IOException or UnauthorizedAccessException)
        {
            Console.Error.WriteLine($"farm node {node.NodeId}: cannot start: {e.Message}");
            ExitCode = 1;
            lifetime.StopApplication();
            return;
        }
        _leaving = StopWhenTheNodeLeavesAsync();
        Console.WriteLine(node.AmqpAddress is { } amqp
            ? $"Farm node {node.NodeId} serving at {address}, metrics at {metricsAddress}, AMQP at {amqp}"
            : $"Farm node {node.NodeId} serving at {address}, metrics at {metricsAddress}");
    }

    /// <summary>A drained node has handed every container over; a replaced one must not serve: either way the process ends.</summary>
    private async Task StopWhenTheNodeLeavesAsync()
    {
        await Task.WhenAny(node.Drained, node.Replaced, Task.Delay(Timeout.Infinite, lifetime.ApplicationStopping)).ConfigureAwait(false);
        if (node.Replaced.IsCompleted)
        {
            ExitCode = 1;
            Console.Error.WriteLine($"farm node {node.NodeId}: stopped: another process registered node {node.NodeId}; node ids must be unique.");
        }
        else if (node.Drained.IsCompleted)
        {
            LogDrained(logger, node.NodeId);
        }
        lifetime.StopApplication();
    }

    public async Task StoppedAsync(CancellationToken cancellationToken)
    {
        await node.DisposeAsync().ConfigureAwait(false);
        if (_leaving is not null)
        {
            await _leaving.ConfigureAwait(false);
        }
    }

    public Task StartingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    /// <summary>
    /// The host is stopping (SIGTERM, Ctrl+C). With --drain-on-stop the node first hands its
    /// containers to the others, planned moves one at a time, within <see cref="NodeHostOptions.DrainOnStopTimeout"/>
    /// (what is left then is released by the stop and failed over); then the node stops.
    /// </summary>
    public async Task StoppingAsync(CancellationToken cancellationToken)
    {
        if (options.DrainOnStop && node.ServedContainerCount > 0 && !node.Drained.IsCompleted && !node.Replaced.IsCompleted)
        {
            LogDrainingOnStop(logger, node.NodeId, node.ServedContainerCount);
            try
            {
                if (!node.IsDraining)
                {
                    await node.StartDrainAsync(cancellationToken).ConfigureAwait(false);
                }
                await node.Drained.WaitAsync(NodeHostOptions.DrainOnStopTimeout, cancellationToken).ConfigureAwait(false);
            }
            catch (Exception e) when (e is TimeoutException or OperationCanceledException or StoreUnavailableException)
            {
                LogDrainOnStopFailed(logger, node.NodeId, e.Message);
            }
        }
        // From here to the node's dispose (after the web server's own stop) its passes still run:
        // they must not take what peers stopping beside it release.
        node.StopTakingContainers();
        await _nodeStopping.CancelAsync().ConfigureAwait(false);
    }

    public void Dispose() => _nodeStopping.Dispose();

    [LoggerMessage(Level = LogLevel.Information, Message = "Node {NodeId} stopping: handing its {Count} containers to the other nodes first (--drain-on-stop)")]
    private static partial void LogDrainingOnStop(ILogger logger, long nodeId, int count);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Node {NodeId} stopping without finishing its drain: {Reason}")]
    private static partial void LogDrainOnStopFailed(ILogger logger, long nodeId, string reason);

    [LoggerMessage(Level = LogLevel.Information, Message = "Node {NodeId} drained: every container handed over; stopping")]
    private static partial void LogDrained(ILogger logger, long nodeId);
}
