using Farm.Broker;
using Farm.Broker.Entities;
using Farm.Broker.Messaging;
using Farm.Broker.Node;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;

namespace Farm.Gateway.Routing;

/// <summary>
/// The gateway's side of farm.v1.Messaging: every call goes through <see cref="OwnerRouting"/>,
/// which runs it on this node's broker when it serves the entity and forwards it to the owner
/// otherwise. The receive stream is proxied message by message when the owner is elsewhere.
/// </summary>
internal sealed partial class MessagingRouter(
    MessagingService local, OwnerRouting routing, OwnerChannels channels, ForwardingOptions options, TimeProvider time, IHostApplicationLifetime lifetime, ILogger<MessagingRouter> logger)
    : Messaging.MessagingBase
{
    public override Task<SendResponse> Send(SendRequest r, ServerCallContext c)
    {
        var tries = RepeatableTries.Of(r);
        return routing.RouteAsync(new RoutedCall("Send", r.Entity), c, ct => local.SendAsync(tries.Next(), ct), (owner, o) => ForwardSend(owner, tries.Next(), o));
    }

    /// <summary>
    /// A send forwarded to its owner. An overloaded node refuses it here as the owner would its own
    /// (SERVICE_BUSY, see <see cref="Broker.Overload.SendShedding"/>): forwarding is work too.
    /// </summary>
    private AsyncUnaryCall<SendResponse> ForwardSend(OwnerClients owner, SendRequest request, CallOptions options)
    {
        local.ShedIfBehind(request.Entity);
        return owner.Messaging.SendAsync(request, options);
    }

    public override Task<ReceiveBatchResponse> ReceiveBatch(ReceiveBatchRequest r, ServerCallContext c) =>
        routing.RouteAsync(new RoutedCall("ReceiveBatch", r.Entity, r.MaxWait?.ToTimeSpan() ?? TimeSpan.Zero), c,
            ct => local.ReceiveBatchAsync(r, ct), (owner, o) => owner.Messaging.ReceiveBatchAsync(r, o));

    public override Task<SettleResponse> Settle(SettleRequest r, ServerCallContext c)
    {
        var tries = RepeatableTries.Of(r);
        return routing.RouteAsync(new RoutedCall("Settle", r.Entity), c, ct => local.SettleAsync(tries.Next(), ct), (owner, o) => owner.Messaging.SettleAsync(tries.Next(), o));
    }

    public override Task<RenewLockResponse> RenewLock(RenewLockRequest r, ServerCallContext c) =>
        routing.RouteAsync(new RoutedCall("RenewLock", r.Entity), c, ct => local.RenewLockAsync(r, ct), (owner, o) => owner.Messaging.RenewLockAsync(r, o));

    public override Task<ReceiveBatchResponse> ReceiveDeferred(ReceiveDeferredRequest r, ServerCallContext c) =>
        routing.RouteAsync(new RoutedCall("ReceiveDeferred", r.Entity), c, ct => local.ReceiveDeferredAsync(r, ct), (owner, o) => owner.Messaging.ReceiveDeferredAsync(r, o));

    public override Task<PeekResponse> Peek(PeekRequest r, ServerCallContext c) =>
        routing.RouteAsync(new RoutedCall("Peek", r.Entity), c, ct => local.PeekAsync(r, ct), (owner, o) => owner.Messaging.PeekAsync(r, o));

    public override Task<ResubmitDeadLettersResponse> ResubmitDeadLetters(ResubmitDeadLettersRequest r, ServerCallContext c) =>
        routing.RouteAsync(new RoutedCall("ResubmitDeadLetters", r.Entity), c, ct => local.ResubmitDeadLettersAsync(r, ct), (owner, o) => owner.Messaging.ResubmitDeadLettersAsync(r, o));

    public override Task<DeleteMessagesResponse> DeleteMessages(DeleteMessagesRequest r, ServerCallContext c) =>
        routing.RouteAsync(new RoutedCall("DeleteMessages", r.Entity), c, ct => local.DeleteMessagesAsync(r, ct), (owner, o) => owner.Messaging.DeleteMessagesAsync(r, o));

    public override Task<CancelScheduledResponse> CancelScheduled(CancelScheduledRequest r, ServerCallContext c) =>
        routing.RouteAsync(new RoutedCall("CancelScheduled", r.Entity), c, ct => local.CancelScheduledAsync(r, ct), (owner, o) => owner.Messaging.CancelScheduledAsync(r, o));

    /// <summary>
    /// The receive stream: served here when this node owns the entity, otherwise proxied to the
    /// owner message by message in both directions (credit up, messages down).
    /// </summary>
    public override async Task Receive(IAsyncStreamReader<ReceiveRequest> requestStream, IServerStreamWriter<ReceiveResponse> responseStream, ServerCallContext context)
    {
        var cancellationToken = context.CancellationToken;
        // Disposed (its pending read cancelled and awaited) before this handler returns; see CallScopedRequestStream.
        await using var requestReads = new CallScopedRequestStream<ReceiveRequest>(requestStream, cancellationToken);
        await ReceiveLinkAsync(requestReads.ReadAllAsync(cancellationToken), new ServerStreamAdapter<ReceiveResponse>(responseStream), OwnerRouting.IsDirect(context), cancellationToken)
            .ConfigureAwait(false);
    }

    /// <summary>
    /// One receive link, from a Receive call or a link of a receive session: served here when this
    /// node owns the entity (or the link came directly), otherwise proxied to the owner.
    /// </summary>
    private async Task ReceiveLinkAsync(IAsyncEnumerable<ReceiveRequest> requests, IResponseStream<ReceiveResponse> responses, bool direct, CancellationToken cancellationToken)
    {
        // Not disposed here: the task that reads it last disposes it (see MessagingService.ReceiveAsync).
        var incoming = requests.GetAsyncEnumerator(cancellationToken);
        ReceiveRequest open;
        string name;
        string? owner;
        try
        {
            if (!await incoming.MoveNextAsync().ConfigureAwait(false) || incoming.Current.KindCase != ReceiveRequest.KindOneofCase.Open)
            {
                throw FarmErrors.Invalid("The first message of a receive stream must be 'open'.");
            }
            open = incoming.Current;
            if (!EntityNames.TryParsePath(open.Open.Entity, out name, out _, out var error))
            {
                throw FarmErrors.Invalid(error!);
            }
            local.ShedReceiveLinkIfBehind(open.Open.Entity);
            owner = direct ? null : await RemoteOwnerAsync(name, cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            await MessagingService.DisposeQuietlyAsync(incoming).ConfigureAwait(false);
            throw;
        }

        if (owner is null)
        {
            // This node serves it (or the call was sent here directly).
            await ServeHereAsync(open, incoming, responses, cancellationToken).ConfigureAwait(false);
            return;
        }
        await ProxyReceiveLinkAsync(open, name, owner, incoming, responses, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Runs a receive link on this node's broker: the open request again, then the rest.</summary>
    private Task ServeHereAsync(ReceiveRequest open, IAsyncEnumerator<ReceiveRequest> incoming, IResponseStream<ReceiveResponse> responses, CancellationToken cancellationToken)
    {
        LogReceiveStream(logger, open.Open.Entity, "here", open.Open.Credit);
        return local.ReceiveAsync(Prepend(open, incoming), responses, cancellationToken);
    }

    /// <summary>Names the broker that serves an entity, for clients in redirect mode.</summary>
    public override async Task<LookupResponse> Lookup(LookupRequest request, ServerCallContext context)
    {
        if (!EntityNames.TryParsePath(request.Entity, out var name, out _, out var error))
        {
            throw FarmErrors.Invalid(error!);
        }
        var location = await routing.WaitForOwnerAsync(name, context.CancellationToken).ConfigureAwait(false);
        return new LookupResponse { OwnerAddress = location.OwnerAddress ?? routing.Address, ContainerId = location.ContainerId, Epoch = location.Epoch };
    }

    /// <summary>The live owner's address, null when it is this node; waits while the entity is between owners.</summary>
    private async Task<string?> RemoteOwnerAsync(string name, CancellationToken cancellationToken)
    {
        var location = await routing.WaitForOwnerAsync(name, cancellationToken).ConfigureAwait(false);
        return location.ServedHere ? null : location.OwnerAddress;
    }

    /// <summary>The open request again, then the rest; disposing it disposes the rest, after its last read.</summary>
    private static async IAsyncEnumerable<ReceiveRequest> Prepend(ReceiveRequest first, IAsyncEnumerator<ReceiveRequest> rest)
    {
        try
        {
            yield return first;
            while (await rest.MoveNextAsync().ConfigureAwait(false))
            {
                yield return rest.Current;
            }
        }
        finally
        {
            await MessagingService.DisposeQuietlyAsync(rest).ConfigureAwait(false);
        }
    }

    [LoggerMessage(Level = LogLevel.Debug, Message = "Receive stream on {Entity}: {Route}, credit {Credit}")]
    private static partial void LogReceiveStream(ILogger logger, string entity, string route, int credit);
}
