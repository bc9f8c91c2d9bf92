using Farm.Broker;
using Farm.Broker.Entities;
using Farm.Broker.Messaging;
using Farm.Broker.Node;
using Farm.Broker.Rpc;
using Farm.Contracts.Rpc;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Gateway.Routing;

/// <summary>
/// The gateway's side of farm.v1.Messaging: a call for an entity this node's broker serves runs
/// here; any other goes to the owning broker (forward mode). A call marked direct is never
/// forwarded: it is answered NOT_OWNER with the owner's address, for the caller to follow.
/// </summary>
internal sealed class MessagingRouter(MessagingService local, BrokerNode node, OwnerChannels channels)
{
    private static bool IsDirect(RpcCallContext context) => context.GetHeader(OwnerChannels.DirectHeader) is not null;

    /// <summary>Runs the call here; on NOT_OWNER from a non-direct call, forwards it to the owner.</summary>
    private async Task<TResponse> RouteAsync<TRequest, TResponse>(
        string method, TRequest request, RpcCallContext context, string entityPath,
        Func<TRequest, RpcCallContext, Task<TResponse>> here, MessageParser<TResponse> parser)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
    {
        try
        {
            return await here(request, context).ConfigureAwait(false);
        }
        catch (RpcException e) when (e.FarmError == "NOT_OWNER" && !IsDirect(context))
        {
            var owner = e.Trailers.GetValueOrDefault(RpcException.FarmOwnerTrailer);
            if (owner is null || string.Equals(owner, node.Address, StringComparison.OrdinalIgnoreCase))
            {
                // The owner is dead or not known yet (a failover in progress): the client retries.
                throw;
            }
            return await ForwardAsync(owner, method, request, context, entityPath, parser).ConfigureAwait(false);
        }
    }

    private async Task<TResponse> ForwardAsync<TRequest, TResponse>(
        string owner, string method, TRequest request, RpcCallContext context, string entityPath, MessageParser<TResponse> parser)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
    {
        try
        {
            return await channels.Get(owner).UnaryAsync(method, request, parser,
                new CallOptions(OwnerChannels.DirectHeaders, CancellationToken: context.CancellationToken)).ConfigureAwait(false);
        }
        catch (RpcException e) when (e.FarmError == "MESSAGING_ENTITY_NOT_FOUND")
        {
            // Deleted (or re-created elsewhere) since this node cached where it lives.
            if (EntityNames.TryParsePath(entityPath, out var name, out _, out _))
            {
                node.ForgetEntity(name);
            }
            throw;
        }
    }

    private const string P = MessagingEndpoints.Prefix;

    public Task<SendResponse> SendAsync(SendRequest r, RpcCallContext c) =>
        RouteAsync(P + "Send", r, c, r.Entity, local.SendAsync, SendResponse.Parser);

    public Task<ReceiveBatchResponse> ReceiveBatchAsync(ReceiveBatchRequest r, RpcCallContext c) =>
        RouteAsync(P + "ReceiveBatch", r, c, r.Entity, local.ReceiveBatchAsync, ReceiveBatchResponse.Parser);

    public Task<SettleResponse> SettleAsync(SettleRequest r, RpcCallContext c) =>
        RouteAsync(P + "Settle", r, c, r.Entity, local.SettleAsync, SettleResponse.Parser);

    public Task<RenewLockResponse> RenewLockAsync(RenewLockRequest r, RpcCallContext c) =>
        RouteAsync(P + "RenewLock", r, c, r.Entity, local.RenewLockAsync, RenewLockResponse.Parser);

    public Task<ReceiveBatchResponse> ReceiveDeferredAsync(ReceiveDeferredRequest r, RpcCallContext c) =>
        RouteAsync(P + "ReceiveDeferred", r, c, r.Entity, local.ReceiveDeferredAsync, ReceiveBatchResponse.Parser);

    public Task<PeekResponse> PeekAsync(PeekRequest r, RpcCallContext c) =>
        RouteAsync(P + "Peek", r, c, r.Entity, local.PeekAsync, PeekResponse.Parser);

    public Task<CancelScheduledResponse> CancelScheduledAsync(CancelScheduledRequest r, RpcCallContext c) =>
        RouteAsync(P + "CancelScheduled", r, c, r.Entity, local.CancelScheduledAsync, CancelScheduledResponse.Parser);

    /// <summary>
    /// The receive stream: served here when this node owns the entity, otherwise proxied to the
    /// owner message by message in both directions (credit up, messages down).
    /// </summary>
    public async Task ReceiveAsync(IAsyncEnumerable<ReceiveRequest> requests, IRpcStreamWriter<ReceiveResponse> responses, RpcCallContext context)
    {
        var cancellationToken = context.CancellationToken;
        await using var incoming = requests.GetAsyncEnumerator(cancellationToken);
        if (!await incoming.MoveNextAsync().ConfigureAwait(false) || incoming.Current.KindCase != ReceiveRequest.KindOneofCase.Open)
        {
            throw FarmErrors.Invalid("The first message of a receive stream must be 'open'.");
        }
        var open = incoming.Current;
        if (!EntityNames.TryParsePath(open.Open.Entity, out var name, out _, out var error))
        {
            throw FarmErrors.Invalid(error!);
        }
        var record = await node.FindEntityAsync(name, cancellationToken).ConfigureAwait(false);
        if (node.IsLocal(record) || IsDirect(context))
        {
            await local.ReceiveAsync(Prepend(open, incoming), responses, context).ConfigureAwait(false);
            return;
        }
        var owner = node.OwnerAddressOf(record.ContainerId) ?? throw FarmErrors.NotOwner(name, null);
        await using var call = channels.Get(owner).Duplex<ReceiveRequest, ReceiveResponse>(MessagingEndpoints.Prefix + "Receive", ReceiveResponse.Parser,
            new CallOptions(OwnerChannels.DirectHeaders, CancellationToken: cancellationToken));
        await call.WriteAsync(open, cancellationToken).ConfigureAwait(false);
        var upstream = Task.Run(async () =>
        {
            while (await incoming.MoveNextAsync().ConfigureAwait(false))
            {
                await call.WriteAsync(incoming.Current, cancellationToken).ConfigureAwait(false);
            }
            await call.CompleteAsync().ConfigureAwait(false);
        }, CancellationToken.None);
        await foreach (var response in call.ReadAllAsync(cancellationToken).ConfigureAwait(false))
        {
            await responses.WriteAsync(response, cancellationToken).ConfigureAwait(false);
        }
        await upstream.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
    }

    /// <summary>Names the broker that serves an entity, for clients in redirect mode.</summary>
    public async Task<LookupResponse> LookupAsync(LookupRequest request, RpcCallContext context)
    {
        if (!EntityNames.TryParsePath(request.Entity, out var name, out _, out var error))
        {
            throw FarmErrors.Invalid(error!);
        }
        var record = await node.FindEntityAsync(name, context.CancellationToken).ConfigureAwait(false);
        var owner = node.IsLocal(record) ? node.Address : node.OwnerAddressOf(record.ContainerId);
        if (owner is null)
        {
            throw FarmErrors.NotOwner(name, null);
        }
        return new LookupResponse { OwnerAddress = owner, ContainerId = record.ContainerId, Epoch = node.EpochOf(record.ContainerId) };
    }

    private static async IAsyncEnumerable<ReceiveRequest> Prepend(ReceiveRequest first, IAsyncEnumerator<ReceiveRequest> rest)
    {
        yield return first;
        while (await rest.MoveNextAsync().ConfigureAwait(false))
        {
            yield return rest.Current;
        }
    }

    public void Map(IEndpointRouteBuilder endpoints)
    {
        endpoints.MapUnary<SendRequest, SendResponse>(P + "Send", SendRequest.Parser, SendAsync);
        endpoints.MapDuplex<ReceiveRequest, ReceiveResponse>(P + "Receive", ReceiveRequest.Parser, ReceiveAsync);
        endpoints.MapUnary<ReceiveBatchRequest, ReceiveBatchResponse>(P + "ReceiveBatch", ReceiveBatchRequest.Parser, ReceiveBatchAsync);
        endpoints.MapUnary<SettleRequest, SettleResponse>(P + "Settle", SettleRequest.Parser, SettleAsync);
        endpoints.MapUnary<RenewLockRequest, RenewLockResponse>(P + "RenewLock", RenewLockRequest.Parser, RenewLockAsync);
        endpoints.MapUnary<ReceiveDeferredRequest, ReceiveBatchResponse>(P + "ReceiveDeferred", ReceiveDeferredRequest.Parser, ReceiveDeferredAsync);
        endpoints.MapUnary<PeekRequest, PeekResponse>(P + "Peek", PeekRequest.Parser, PeekAsync);
        endpoints.MapUnary<CancelScheduledRequest, CancelScheduledResponse>(P + "CancelScheduled", CancelScheduledRequest.Parser, CancelScheduledAsync);
        endpoints.MapUnary<LookupRequest, LookupResponse>(P + "Lookup", LookupRequest.Parser, LookupAsync);
    }
}
