using Farm.Contracts.V1;
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
    /// <summary>The producer every send of this front door names: one per process, never reused.</summary>
    private readonly string _producerId = "amqp-" + Guid.NewGuid().ToString("N");
    private long _lastSendId;

    /// <summary>Longest a single call to the farm may take before the AMQP request fails as a timeout.</summary>
    public static readonly TimeSpan CallTimeout = TimeSpan.FromSeconds(60);

    public OwnerClients Node => channels.Get(directory.Address);

    /// <summary>
    /// A Send to <paramref name="entity"/> with a (producer, send id) pair of its own. The gateway
    /// tries a forwarded send again when the owner dies or the connection to it breaks before it
    /// answered; with the pair, a try after one that was stored (by that owner, or by the node that
    /// took its container) is answered with the first try's sequence numbers instead of storing
    /// the messages twice: the client sent once and was answered once, so it must receive once.
    /// </summary>
    public SendRequest NewSend(string entity) =>
        new() { Entity = entity, ProducerId = _producerId, SendId = Interlocked.Increment(ref _lastSendId) };

    public static DateTime Deadline(TimeSpan? extra = null) => DateTime.UtcNow + CallTimeout + (extra ?? TimeSpan.Zero);
}
