using System.Collections.Concurrent;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Client;

// Redirect mode (EnableRedirect=true, SBWS's name for it): messaging calls skip the gateway hop.
// The client asks a gateway once which broker serves the entity (Lookup), then calls that broker
// directly, marked "farm-direct" so it answers NOT_OWNER instead of forwarding. When the entity
// moves (NOT_OWNER, naming the new owner when it knows; SERVICE_BUSY while a planned move runs) or
// the broker cannot be reached, the cached owner is dropped and the entity's calls go through a
// gateway for a while (which holds them until the next owner serves); then it is looked up again.
internal sealed partial class FarmConnection
{
    private static readonly Metadata DirectHeaders = FarmMetadata.DirectHeaders();

    private readonly ConcurrentDictionary<string, string> _owners = new(StringComparer.OrdinalIgnoreCase);
    private readonly ConcurrentDictionary<string, FarmStubs> _brokers = new(StringComparer.OrdinalIgnoreCase);

    /// <summary>
    /// Entities whose owner could not be reached, and when: for a while their calls go through a
    /// gateway, which holds them until a survivor takes the container over, instead of burning the
    /// retry budget on a dead broker that lookups still name until its heartbeat times out.
    /// </summary>
    private readonly ConcurrentDictionary<string, DateTimeOffset> _viaGatewayUntil = new(StringComparer.OrdinalIgnoreCase);

    private static readonly TimeSpan ViaGatewayAfterOwnerLoss = TimeSpan.FromSeconds(10);

    /// <summary>A route for one messaging call: the channel to use, the headers to send, and what to learn from a failure.</summary>
    internal readonly record struct Route(FarmStubs Channel, Metadata? Headers, int GatewayIndex, string? EntityName);

    /// <summary>The entity a path belongs to, which Lookup resolves: "q" for "q/$DeadLetterQueue", "t" for "t/Subscriptions/s" (a topic and its subscriptions share a container).</summary>
    internal static string EntityNameOf(string entityPath) => entityPath.Split('/', 2)[0];

    /// <summary>The gateway, or in redirect mode the broker that serves the entity (looked up on first use).</summary>
    internal async ValueTask<Route> RouteAsync(bool isEntityMessaging, string? entityPath, CancellationToken cancellationToken)
    {
        if (!ConnectionString.EnableRedirect || entityPath is null || !isEntityMessaging)
        {
            return new Route(GetChannel(out var index), null, index, null);
        }
        var name = EntityNameOf(entityPath);
        if (_viaGatewayUntil.TryGetValue(name, out var until))
        {
            if (TimeProvider.GetUtcNow() < until)
            {
                return new Route(GetChannel(out var gatewayIndex), null, gatewayIndex, null);
            }
            _viaGatewayUntil.TryRemove(name, out _);
        }
        if (!_owners.TryGetValue(name, out var owner))
        {
            var gateway = GetChannel(out var index);
            var deadline = TimeProvider.GetUtcNow().UtcDateTime + Retry.TryTimeout;
            try
            {
                var lookup = await gateway.Messaging.LookupAsync(new LookupRequest { Entity = name }, deadline: deadline, cancellationToken: cancellationToken).ConfigureAwait(false);
                owner = lookup.OwnerAddress;
            }
            catch (RpcException e) when (e.IsBrokenConnection())
            {
                ReportUnavailable(index);
                throw e.AsUnavailableWhenBroken();
            }
            _owners[name] = owner;
        }
        ObjectDisposedException.ThrowIf(IsDisposed, this);
        return new Route(_brokers.GetOrAdd(owner, a => new FarmStubs(FarmChannels.Create(new Uri(a)), Options)), DirectHeaders, -1, name);
    }

    /// <summary>Learns from a failed call: a gateway that is down, or an owner that moved or died.</summary>
    internal void ReportFailure(Route route, RpcException error)
    {
        if (route.EntityName is null)
        {
            // A gateway that cannot be reached, or that did not answer in time (a frozen node keeps
            // accepting connections): the next call goes to the next one. Gateways are all alike.
            if ((error.StatusCode == StatusCode.Unavailable || (error.StatusCode == StatusCode.DeadlineExceeded && error.FarmError() is null)) && route.GatewayIndex >= 0)
            {
                ReportUnavailable(route.GatewayIndex);
            }
            return;
        }
        var reason = FarmErrors.FromName(error.FarmError());
        if (reason == FarmFailureReason.NotOwner && error.FarmOwner() is { } newOwner)
        {
            _owners[route.EntityName] = newOwner;
        }
        else if (error.StatusCode == StatusCode.Unavailable
            || reason is FarmFailureReason.NotOwner or FarmFailureReason.StaleEpoch or FarmFailureReason.MessagingEntityNotFound)
        {
            _owners.TryRemove(route.EntityName, out _);
        }
        if (error.StatusCode == StatusCode.Unavailable && reason is null or FarmFailureReason.NotOwner or FarmFailureReason.StaleEpoch or FarmFailureReason.ServiceBusy)
        {
            // The owner is dead, not known yet, lost the container, or busy handing it over (a
            // planned move answers SERVICE_BUSY until the next owner serves, which can outlast the
            // retries' backoff): go through a gateway, which holds the call until the move is over.
            _viaGatewayUntil[route.EntityName] = TimeProvider.GetUtcNow() + ViaGatewayAfterOwnerLoss;
        }
    }

    private void DisposeBrokerChannels()
    {
        foreach (var channel in _brokers.Values)
        {
            channel.Dispose();
        }
        _brokers.Clear();
    }
}
