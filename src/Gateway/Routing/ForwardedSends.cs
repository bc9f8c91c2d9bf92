using Farm.Broker.Messaging;
using Farm.Contracts.V1;

namespace Farm.Gateway.Routing;

/// <summary>
/// The sends this node's queue forwarders make to entities another node serves (ForwardTo and
/// ForwardDeadLetteredMessagesTo across containers; see <see cref="Broker.Node.BrokerNode.SendToOwner"/>).
/// Routed as a client's Send is: to the owner, held while the target is between owners, tried
/// again as a repeat when an answer was lost; run here if the target moved to this node.
/// Not shed when this node is behind: it is the node's own background work, and a refusal would
/// only make the forwarder try again.
/// </summary>
internal sealed class ForwardedSends(MessagingService local, OwnerRouting routing)
{
    public Task<SendResponse> SendAsync(SendRequest request, CancellationToken cancellationToken)
    {
        var tries = RepeatableTries.Of(request);
        return routing.RouteAsync(
            new RoutedCall("Send", request.Entity), direct: false, deadline: DateTime.MaxValue,
            token => local.SendAsync(tries.Next(), token),
            (owner, options) => owner.Messaging.SendAsync(tries.Next(), options),
            cancellationToken);
    }
}
