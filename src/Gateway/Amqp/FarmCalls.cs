using Farm.Gateway.Routing;

namespace Farm.Gateway.Amqp;

/// <summary>
/// How the AMQP front door reaches the farm: through this node's own gRPC front door, like any
/// client, so every call takes the same route (served here when this node owns the entity,
/// forwarded to the owner otherwise, held while the entity is between owners) and the AMQP layer
/// holds no broker logic of its own.
/// </summary>
internal sealed class FarmCalls(IOwnerDirectory directory, OwnerChannels channels)
{
    /// <summary>Longest a single call to the farm may take before the AMQP request fails as a timeout.</summary>
    public static readonly TimeSpan CallTimeout = TimeSpan.FromSeconds(60);

    public OwnerClients Node => channels.Get(directory.Address);

    public static DateTime Deadline(TimeSpan? extra = null) => DateTime.UtcNow + CallTimeout + (extra ?? TimeSpan.Zero);
}
