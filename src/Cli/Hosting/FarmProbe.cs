using Farm.Contracts;
using Grpc.Core;
using Grpc.Health.V1;

namespace Farm.Cli.Hosting;

/// <summary>
/// Asks a node whether it serves, through the standard gRPC health service (grpc.health.v1) every
/// node runs: SERVING once it has joined the farm, NOT_SERVING while it starts, drains or was
/// replaced. One call, no retries.
/// </summary>
public static class FarmProbe
{
    public static async Task<bool> IsServingAsync(string address, TimeSpan timeout, CancellationToken cancellationToken)
    {
        using var channel = FarmChannels.Create(new Uri(address));
        var health = new Health.HealthClient(channel);
        try
        {
            var answer = await health.CheckAsync(new HealthCheckRequest(), deadline: DateTime.UtcNow + timeout, cancellationToken: cancellationToken);
            return answer.Status == HealthCheckResponse.Types.ServingStatus.Serving;
        }
        catch (RpcException) when (!cancellationToken.IsCancellationRequested)
        {
            // Not listening yet, too busy starting to answer, or going away: not serving. A node
            // that exits says why in its log, which the caller shows.
            return false;
        }
    }
}
