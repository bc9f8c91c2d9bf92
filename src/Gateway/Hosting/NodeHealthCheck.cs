using Farm.Broker.Node;
using Microsoft.Extensions.Diagnostics.HealthChecks;

namespace Farm.Gateway.Hosting;

/// <summary>
/// Whether this node serves: started (registered in the farm, ownership running) and not on its
/// way out (draining, or replaced by another process with its node id). The grpc.health.v1
/// service reports it for the node ("") and for each Farm service.
/// </summary>
internal sealed class NodeHealthCheck(BrokerNode node) : IHealthCheck
{
    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default) =>
        Task.FromResult(
            !node.IsStarted ? HealthCheckResult.Unhealthy("starting")
            : node.Replaced.IsCompleted ? HealthCheckResult.Unhealthy("another process registered this node id")
            : node.IsDraining ? HealthCheckResult.Unhealthy("draining")
            : HealthCheckResult.Healthy());
}
