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
/// The gateway's side of farm.v1.Messaging: a call for an entity this node's broker serves runs
/// here; any other goes to the owning broker (forward mode). A call marked direct is never
/// forwarded: it is answered NOT_OWNER with the owner's address, for the caller to follow.
/// </summary>
internal sealed partial class MessagingRouter(MessagingService local, BrokerNode node, NodeOptions options, OwnerChannels channels, ILogger<MessagingRouter> logger)
    : Messaging.MessagingBase
{
    private static bool IsDirect(ServerCallContext context) => FarmMetadata.IsDirect(context.RequestHeaders);

    /// <summary>
    /// How long a gateway holds a call whose entity has no live owner (a failover or a planned
    /// move in progress) before giving the client the error: the client sees a slower call, not
    /// a failure and a retry backoff.
    /// </summary>
    public static readonly TimeSpan OwnerWait = TimeSpan.FromSeconds(10);

    private static readonly TimeSpan OwnerPoll = TimeSpan.FromMilliseconds(100);

    /// <summary>
    /// Runs the call here when this node serves the entity, else forwards it to the owner. While
    /// the entity is between owners it tries again every <see cref="OwnerPoll"/>, up to
    /// <see cref="OwnerWait"/>. A direct call is never forwarded or held: its caller follows.
    /// </summary>
    private async Task<TResponse> RouteAsync<TRequest, TResponse>(
        string method, TRequest request, ServerCallContext context, string entityPath,
        Func<TRequest, CancellationToken, Task<TResponse>> here, Forward<TRequest, TResponse> forward)
    {
        if (IsDirect(context))
        {
            return await here(request, context.CancellationToken).ConfigureAwait(false);
        }
        var started = System.Diagnostics.Stopwatch.GetTimestamp();
        while (true)
        {
            try
            {
                try
                {
                    return await here(request, context.CancellationToken).ConfigureAwait(false);
                }
                catch (BrokerException e) when (CallFailures.OwnerOf(e) is { } owner
                    && !string.Equals(owner, node.Address, StringComparison.OrdinalIgnoreCase))
                {
                    return await ForwardAsync(owner, method, request, context, entityPath, forward).ConfigureAwait(false);
                }
            }
            catch (Exception e) when (CallFailures.IsBetweenOwners(e) && System.Diagnostics.Stopwatch.GetElapsedTime(started) < OwnerWait)
            {
                await Task.Delay(OwnerPoll, context.CancellationToken).ConfigureAwait(false);
            }
        }
    }

    /// <summary>Makes one call of the generated client on the owner's channel.</summary>
    private delegate AsyncUnaryCall<TResponse> Forward<in TRequest, TResponse>(Messaging.MessagingClient owner, TRequest request, CallOptions options);

    private async Task<TResponse> ForwardAsync<TRequest, TResponse>(
        string owner, string method, TRequest request, ServerCallContext context, string entityPath, Forward<TRequest, TResponse> forward)
    {
        // A deadline of our own: an owner that froze or was cut off never answers, and HTTP/2
        // keep-alive would take 15 s to say so, longer than this gateway holds a call. Past it the
        // call is only given up once the farm agrees the owner is gone (dead, or no longer the
        // owner): a slow owner may still commit it, and a retry would then store a second copy.
        var timeout = options.ForwardTimeout + (request is ReceiveBatchRequest { MaxWait: { } wait } && wait.ToTimeSpan() > TimeSpan.Zero
            ? wait.ToTimeSpan()
            : TimeSpan.Zero);
        using var giveUp = CancellationTokenSource.CreateLinkedTokenSource(context.CancellationToken);
        using var pending = forward(channels.Get(owner).Messaging, request, new CallOptions(FarmMetadata.DirectHeaders(), cancellationToken: giveUp.Token));
        var call = pending.ResponseAsync;
        try
        {
            try
            {
                return await call.WaitAsync(timeout).ConfigureAwait(false);
            }
            catch (TimeoutException)
            {
                // Late: keep waiting while the owner is alive and still the owner, as far as the farm knows.
            }
            while (await IsStillOwnerAsync(owner, entityPath, context.CancellationToken).ConfigureAwait(false))
            {
                if (await Task.WhenAny(call, Task.Delay(OwnerPoll, context.CancellationToken)).ConfigureAwait(false) == call)
                {
                    return await call.ConfigureAwait(false);
                }
            }
            await giveUp.CancelAsync().ConfigureAwait(false);
            try
            {
                return await call.ConfigureAwait(false);
            }
            catch (RpcException e) when (e.StatusCode == StatusCode.Cancelled && !context.CancellationToken.IsCancellationRequested)
            {
                // Unreachable as far as this call is concerned: Unavailable, so RouteAsync holds it for the next owner.
                LogForwardGivenUp(logger, method, entityPath, owner, timeout.TotalSeconds);
                throw new RpcException(new Status(StatusCode.Unavailable,
                    $"The broker at {owner} did not answer {method} for '{entityPath}' within {timeout.TotalSeconds:0.#} s and is no longer its live owner."));
            }
        }
        catch (RpcException e) when (CallFailures.CodeOf(e) == FarmErrorCode.MessagingEntityNotFound)
        {
            // Deleted (or re-created elsewhere) since this node cached where it lives.
            if (EntityNames.TryParsePath(entityPath, out var name, out _, out _))
            {
                node.ForgetEntity(name);
            }
            throw;
        }
    }

    /// <summary>True while the last ownership pass names <paramref name="owner"/> as the live owner of the entity's container.</summary>
    private async Task<bool> IsStillOwnerAsync(string owner, string entityPath, CancellationToken cancellationToken)
    {
        if (!EntityNames.TryParsePath(entityPath, out var name, out _, out _))
        {
            return false;
        }
        var record = await node.FindEntityAsync(name, cancellationToken).ConfigureAwait(false);
        return string.Equals(node.OwnerAddressOf(record.ContainerId), owner, StringComparison.OrdinalIgnoreCase);
    }

    public override Task<SendResponse> Send(SendRequest r, ServerCallContext c) =>
        RouteAsync("Send", r, c, r.Entity, local.SendAsync, static (owner, request, options) => owner.SendAsync(request, options));

    public override Task<ReceiveBatchResponse> ReceiveBatch(ReceiveBatchRequest r, ServerCallContext c) =>
        RouteAsync("ReceiveBatch", r, c, r.Entity, local.ReceiveBatchAsync, static (owner, request, options) => owner.ReceiveBatchAsync(request, options));

    public override Task<SettleResponse> Settle(SettleRequest r, ServerCallContext c) =>
        RouteAsync("Settle", r, c, r.Entity, local.SettleAsync, static (owner, request, options) => owner.SettleAsync(request, options));

    public override Task<RenewLockResponse> RenewLock(RenewLockRequest r, ServerCallContext c) =>
        RouteAsync("RenewLock", r, c, r.Entity, local.RenewLockAsync, static (owner, request, options) => owner.RenewLockAsync(request, options));

    public override Task<ReceiveBatchResponse> ReceiveDeferred(ReceiveDeferredRequest r, ServerCallContext c) =>
        RouteAsync("ReceiveDeferred", r, c, r.Entity, local.ReceiveDeferredAsync, static (owner, request, options) => owner.ReceiveDeferredAsync(request, options));

    public override Task<PeekResponse> Peek(PeekRequest r, ServerCallContext c) =>
        RouteAsync("Peek", r, c, r.Entity, local.PeekAsync, static (owner, request, options) => owner.PeekAsync(request, options));

    public override Task<CancelScheduledResponse> CancelScheduled(CancelScheduledRequest r, ServerCallContext c) =>
        RouteAsync("CancelScheduled", r, c, r.Entity, local.CancelScheduledAsync, static (owner, request, options) => owner.CancelScheduledAsync(request, options));

    /// <summary>
    /// The receive stream: served here when this node owns the entity, otherwise proxied to the
    /// owner message by message in both directions (credit up, messages down).
    /// </summary>
    public override async Task Receive(IAsyncStreamReader<ReceiveRequest> requestStream, IServerStreamWriter<ReceiveResponse> responseStream, ServerCallContext context)
    {
        var cancellationToken = context.CancellationToken;
        var requests = requestStream.ReadAllAsync(cancellationToken);
        var responses = new ServerStreamAdapter<ReceiveResponse>(responseStream);
        // Not disposed here: the task that reads it last disposes it (see MessagingService.ReceiveAsync).
        var incoming = requests.GetAsyncEnumerator(cancellationToken);
        ReceiveRequest open;
        string? owner;
        Farm.ContainerStore.FarmDatabase.EntityRecord? record;
        try
        {
            if (!await incoming.MoveNextAsync().ConfigureAwait(false) || incoming.Current.KindCase != ReceiveRequest.KindOneofCase.Open)
            {
                throw FarmErrors.Invalid("The first message of a receive stream must be 'open'.");
            }
            open = incoming.Current;
            if (!EntityNames.TryParsePath(open.Open.Entity, out var name, out _, out var error))
            {
                throw FarmErrors.Invalid(error!);
            }
            record = await node.FindEntityAsync(name, cancellationToken).ConfigureAwait(false);
            owner = IsDirect(context) ? null : await WaitForOwnerAsync(record, cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            await MessagingService.DisposeQuietlyAsync(incoming).ConfigureAwait(false);
            throw;
        }

        var started = System.Diagnostics.Stopwatch.GetTimestamp();
        AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call;
        while (true)
        {
            if (owner is null)
            {
                // This node serves it (or the call was sent here directly).
                LogReceiveStream(logger, open.Open.Entity, "here", open.Open.Credit);
                await local.ReceiveAsync(Prepend(open, incoming), responses, cancellationToken).ConfigureAwait(false);
                return;
            }
            LogReceiveStream(logger, open.Open.Entity, "proxy to " + owner, open.Open.Credit);
            call = channels.Get(owner).Messaging.Receive(new CallOptions(FarmMetadata.DirectHeaders(), cancellationToken: cancellationToken));
            try
            {
                // A dead owner shows here, before any credit went up: safe to wait for the takeover and try again.
                await call.RequestStream.WriteAsync(open, cancellationToken).ConfigureAwait(false);
                break;
            }
            catch (RpcException e) when ((CallFailures.IsBetweenOwners(e) || (e.StatusCode == StatusCode.Cancelled && !cancellationToken.IsCancellationRequested))
                && System.Diagnostics.Stopwatch.GetElapsedTime(started) < OwnerWait)
            {
                call.Dispose();
                await Task.Delay(OwnerPoll, cancellationToken).ConfigureAwait(false);
                owner = await WaitForOwnerAsync(record!, cancellationToken).ConfigureAwait(false);
            }
            catch
            {
                call.Dispose();
                await MessagingService.DisposeQuietlyAsync(incoming).ConfigureAwait(false);
                throw;
            }
        }

        using var ownerCall = call;
        // Credit flows up in the background; this call ends with the owner's stream, without waiting for it.
        _ = Task.Run(async () =>
        {
            try
            {
                while (await incoming.MoveNextAsync().ConfigureAwait(false))
                {
                    await call.RequestStream.WriteAsync(incoming.Current, cancellationToken).ConfigureAwait(false);
                }
                await call.RequestStream.CompleteAsync().ConfigureAwait(false);
            }
            catch (Exception)
            {
                // Either side ended the call.
            }
            finally
            {
                await MessagingService.DisposeQuietlyAsync(incoming).ConfigureAwait(false);
            }
        }, CancellationToken.None);
        try
        {
            await foreach (var response in call.ResponseStream.ReadAllAsync(cancellationToken).ConfigureAwait(false))
            {
                await responses.WriteAsync(response, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (RpcException e) when (!cancellationToken.IsCancellationRequested && e.FarmError() is null && e.StatusCode != StatusCode.Unavailable)
        {
            // The owner's stream broke under us (it died or was cut off): the client reopens, maybe elsewhere.
            throw new RpcException(new Status(StatusCode.Unavailable, $"The receive stream from the owner {owner} of '{open.Open.Entity}' broke: {e.Status.Detail}"));
        }
    }

    /// <summary>Names the broker that serves an entity, for clients in redirect mode.</summary>
    public override async Task<LookupResponse> Lookup(LookupRequest request, ServerCallContext context)
    {
        if (!EntityNames.TryParsePath(request.Entity, out var name, out _, out var error))
        {
            throw FarmErrors.Invalid(error!);
        }
        var record = await node.FindEntityAsync(name, context.CancellationToken).ConfigureAwait(false);
        var owner = await WaitForOwnerAsync(record, context.CancellationToken).ConfigureAwait(false) ?? node.Address;
        return new LookupResponse { OwnerAddress = owner, ContainerId = record.ContainerId, Epoch = node.EpochOf(record.ContainerId) };
    }

    /// <summary>
    /// The live owner's address, null when it is this node; waits up to <see cref="OwnerWait"/>
    /// while the entity's container is between owners.
    /// </summary>
    private async Task<string?> WaitForOwnerAsync(Farm.ContainerStore.FarmDatabase.EntityRecord record, CancellationToken cancellationToken)
    {
        var started = System.Diagnostics.Stopwatch.GetTimestamp();
        while (true)
        {
            if (node.IsLocal(record))
            {
                return null;
            }
            if (node.OwnerAddressOf(record.ContainerId) is { } owner)
            {
                return owner;
            }
            if (System.Diagnostics.Stopwatch.GetElapsedTime(started) >= OwnerWait)
            {
                throw FarmErrors.NotOwner(record.Name, null);
            }
            await Task.Delay(OwnerPoll, cancellationToken).ConfigureAwait(false);
        }
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

    [LoggerMessage(Level = LogLevel.Warning, Message = "Forwarded {Method} for {Entity} to {Owner}: no answer within {Seconds} s and the owner is gone; holding it for the next owner")]
    private static partial void LogForwardGivenUp(ILogger logger, string method, string entity, string owner, double seconds);

    [LoggerMessage(Level = LogLevel.Debug, Message = "Receive stream on {Entity}: {Route}, credit {Credit}")]
    private static partial void LogReceiveStream(ILogger logger, string entity, string route, int credit);
}
