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
}

/// <summary>
/// Runs the broker node inside the host's lifetime: starts it once Kestrel listens (the address
/// with the port the OS picked is known then; the grpc.health.v1 service says SERVING from then on,
/// which is what the `farm` CLI waits for), stops the host when the node leaves the farm (drained, or replaced by another process with its
/// id), and stops the node with the host. <see cref="ExitCode"/> says how it ended.
/// </summary>
internal sealed partial class BrokerNodeService(
    BrokerNode node, NodeListeners listeners, IHostApplicationLifetime lifetime, ILogger<BrokerNodeService> logger)
    : IHostedLifecycleService
{
    private Task? _leaving;

    /// <summary>0 for a normal stop; 1 when the node could not start or another process took its id.</summary>
    public int ExitCode { get; private set; }

    public async Task StartedAsync(CancellationToken cancellationToken)
    {
        var address = GrpcHosting.AddressOf(listeners.Grpc!);
        var metricsAddress = GrpcHosting.AddressOf(listeners.Metrics!) + NodeTelemetry.MetricsPath;
        try
        {
            await node.StartAsync(address, lifetime.ApplicationStopping, metricsAddress).ConfigureAwait(false);
        }
        catch (Exception e) when (e is StoreUnavailableException or InvalidOperationException or IOException or UnauthorizedAccessException)
        {
            Console.Error.WriteLine($"farm node {node.NodeId}: cannot start: {e.Message}");
            ExitCode = 1;
            lifetime.StopApplication();
            return;
        }
        _leaving = StopWhenTheNodeLeavesAsync();
        Console.WriteLine($"Farm node {node.NodeId} serving at {address}, metrics at {metricsAddress}");
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

    public Task StoppingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    [LoggerMessage(Level = LogLevel.Information, Message = "Node {NodeId} drained: every container handed over; stopping")]
    private static partial void LogDrained(ILogger logger, long nodeId);
}
