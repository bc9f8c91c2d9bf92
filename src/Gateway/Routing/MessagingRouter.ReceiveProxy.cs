using System.Runtime.ExceptionServices;
using Farm.Broker.Messaging;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;

namespace Farm.Gateway.Routing;

// A receive link proxied to the entity's owner on another node: credit and settlements go up,
// messages and answers come down, each passed on as it arrives.
internal sealed partial class MessagingRouter
{
    /// <summary>
    /// How long a proxied link whose client went keeps reading the owner's stream for messages the
    /// owner sent before it heard of the drain, so it can give them back.
    /// </summary>
    internal static readonly TimeSpan HandBackWait = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Proxies one receive link to <paramref name="owner"/> (or serves it here, should the entity
    /// move to this node while the owner is waited for). Peek-lock messages the owner sent that
    /// cannot reach the client (its stream broke, it was cancelled or detached) are given back to
    /// the owner as never delivered: they are available again at once, their delivery not counted,
    /// instead of staying locked for nobody until their LockDuration runs out.
    /// </summary>
    private async Task ProxyReceiveLinkAsync(
        ReceiveRequest open, string name, string owner, IAsyncEnumerator<ReceiveRequest> incoming, IResponseStream<ReceiveResponse> responses, CancellationToken cancellationToken)
    {
        var started = time.GetTimestamp();
        // The owner's call is not cancelled with the client's: when the client goes, the owner is
        // asked to drain and its last messages are read and given back before the call is cut.
        using var ownerCancel = new CancellationTokenSource();
        AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call;
        while (true)
        {
            LogReceiveStream(logger, open.Open.Entity, "proxy to " + owner, open.Open.Credit);
            call = channels.Get(owner).Messaging.Receive(new CallOptions(FarmMetadata.DirectHeaders(), cancellationToken: ownerCancel.Token));
            try
            {
                // A dead owner shows here, before any credit went up: safe to wait for the takeover and try again.
                await call.RequestStream.WriteAsync(open, cancellationToken).ConfigureAwait(false);
                break;
            }
            catch (RpcException e) when ((CallFailures.IsBetweenOwners(e) || e.IsBrokenConnection() || e.StatusCode == StatusCode.Cancelled)
                && !cancellationToken.IsCancellationRequested && time.GetElapsedTime(started) < options.OwnerWait)
            {
                call.Dispose();
            }
            catch
            {
                call.Dispose();
                await MessagingService.DisposeQuietlyAsync(incoming).ConfigureAwait(false);
                throw;
            }
            string? next;
            try
            {
                await Task.Delay(options.OwnerPoll, time, cancellationToken).ConfigureAwait(false);
                next = await RemoteOwnerAsync(name, cancellationToken).ConfigureAwait(false);
            }
            catch
            {
                await MessagingService.DisposeQuietlyAsync(incoming).ConfigureAwait(false);
                throw;
            }
            if (next is null)
            {
                // The entity came here meanwhile.
                await ServeHereAsync(open, incoming, responses, cancellationToken).ConfigureAwait(false);
                return;
            }
            owner = next;
        }

        var peekLock = open.Open.Mode == ReceiveMode.PeekLock;
        var link = new ProxiedLink(call, ownerCancel, peekLock);
        using var ownerCall = call;
        // The client went (or the call ended): the owner gets a moment to drain, then its call is cut.
        using (cancellationToken.Register(static state => ((ProxiedLink)state!).ClientGone(), link))
        {
            // Credit flows up in the background; this call ends with the owner's stream, without waiting for it.
            _ = Task.Run(() => PassRequestsUpAsync(link, incoming), CancellationToken.None);
            await PassResponsesDownAsync(link, open.Open.Entity, owner, responses, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>The client's credit, drains and settlements, passed up to the owner.</summary>
    private async Task PassRequestsUpAsync(ProxiedLink link, IAsyncEnumerator<ReceiveRequest> incoming)
    {
        var call = link.Call;
        var ownerToken = link.OwnerToken;
        // A signal rather than Task.Delay on the token: the registration goes with the stream.
        var stoppingSignal = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var stoppingRegistration = lifetime.ApplicationStopping.Register(() => stoppingSignal.TrySetResult());
        var stopping = stoppingSignal.Task;
        var clientBroke = false;
        try
        {
            while (true)
            {
                var next = incoming.MoveNextAsync().AsTask();
                if (await Task.WhenAny(next, stopping).ConfigureAwait(false) == stopping)
                {
                    // This node is stopping (drained, or shut down) while the stream runs through it: end
                    // it cleanly rather than be cut off by the shutdown with answers in flight. The owner
                    // takes the credit back, answers the settlements it already took, and ends the stream;
                    // whatever the client sends from now on is not passed on (it makes its settlements
                    // by Settle calls, and reopens its stream through another gateway).
                    link.HandingBack();
                    await DrainOwnerAsync(call, ownerToken).ConfigureAwait(false);
                    while (await next.ConfigureAwait(false))
                    {
                        next = incoming.MoveNextAsync().AsTask();
                    }
                    return;
                }
                bool more;
                try
                {
                    more = await next.ConfigureAwait(false);
                }
                catch (Exception)
                {
                    clientBroke = true;
                    throw;
                }
                if (!more)
                {
                    break;
                }
                await call.RequestStream.WriteAsync(incoming.Current, ownerToken).ConfigureAwait(false);
            }
            if (link.IsClientGone && link.PeekLock)
            {
                // Detached: the owner stops sending, and what it sent before is given back.
                await DrainOwnerAsync(call, ownerToken).ConfigureAwait(false);
            }
            else
            {
                await call.RequestStream.CompleteAsync().ConfigureAwait(false);
            }
        }
        catch (Exception) when (clientBroke && link.PeekLock)
        {
            // The client went (cancelled, broke, detached): the owner stops sending, and what it sent before is given back.
            link.ClientGone();
            try
            {
                await DrainOwnerAsync(call, ownerToken).ConfigureAwait(false);
            }
            catch (Exception)
            {
                // The owner's call ended too: its locks run out on their own.
            }
        }
        catch (Exception)
        {
            // Either side ended the call.
        }
        finally
        {
            await MessagingService.DisposeQuietlyAsync(incoming).ConfigureAwait(false);
        }
    }

    /// <summary>The owner takes the stream's credit back (answering "drained") and ends the stream.</summary>
    private static async Task DrainOwnerAsync(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call, CancellationToken ownerToken)
    {
        await call.RequestStream.WriteAsync(new ReceiveRequest { Drain = new ReceiveDrain() }, ownerToken).ConfigureAwait(false);
        await call.RequestStream.CompleteAsync().ConfigureAwait(false);
    }

    /// <summary>
    /// The owner's messages and answers, passed down to the client. Once the client is gone, its
    /// peek-lock messages are collected instead and given back when the owner's stream ends.
    /// </summary>
    private async Task PassResponsesDownAsync(ProxiedLink link, string entity, string owner, IResponseStream<ReceiveResponse> responses, CancellationToken cancellationToken)
    {
        ExceptionDispatchInfo? clientFailure = null;
        var undelivered = new List<string>();
        try
        {
            await foreach (var response in link.Call.ResponseStream.ReadAllAsync(link.OwnerToken).ConfigureAwait(false))
            {
                if (link.IsClientGone)
                {
                    link.CollectLocks(response, undelivered);
                    continue;
                }
                if (response.Drained && link.IsHandingBack)
                {
                    // This node stopping drained the owner, not the client: the client is not told.
                    response.Drained = false;
                    if (response.Messages.Count == 0 && response.Settled is null && !response.SettlesOnStream)
                    {
                        continue;
                    }
                }
                try
                {
                    await responses.WriteAsync(response, cancellationToken).ConfigureAwait(false);
                }
                catch (Exception e)
                {
                    // Never on the client's stream, so never seen: these and what follows go back.
                    LogClientWent(logger, entity, response.Messages.Count, e.Message);
                    clientFailure = ExceptionDispatchInfo.Capture(e);
                    link.CollectLocks(response, undelivered);
                    link.ClientGone();
                }
            }
        }
        catch (RpcException e) when (!link.IsClientGone && e.FarmError() is null && e.StatusCode != StatusCode.Unavailable)
        {
            // The owner's stream broke under us (it died or was cut off): the client reopens, maybe elsewhere.
            throw new RpcException(new Status(StatusCode.Unavailable, $"The receive stream from the owner {owner} of '{entity}' broke: {e.Status.Detail}"));
        }
        catch (Exception) when (link.IsClientGone)
        {
            // The owner's stream was cut after the hand-back wait, or broke: what was collected still goes back.
        }
        finally
        {
            if (undelivered.Count > 0)
            {
                await GiveBackAsync(entity, owner, undelivered).ConfigureAwait(false);
            }
        }
        clientFailure?.Throw();
        cancellationToken.ThrowIfCancellationRequested();
    }

    /// <summary>Gives peek-lock messages back to their owner as never delivered (the SDK does the same with a closed receiver's buffer).</summary>
    private async Task GiveBackAsync(string entity, string owner, List<string> lockTokens)
    {
        var request = new SettleRequest { Entity = entity };
        request.Settlements.AddRange(lockTokens.Select(t => new Settlement { LockToken = t, Disposition = Disposition.Abandon, NotDelivered = true }));
        try
        {
            await channels.Get(owner).Messaging.SettleAsync(request, new CallOptions(FarmMetadata.DirectHeaders(), time.GetUtcNow().UtcDateTime + HandBackWait)).ConfigureAwait(false);
            LogGaveBack(logger, lockTokens.Count, entity, owner);
        }
        catch (Exception e)
        {
            // The owner is gone or moved (its locks went with it), or cannot write: the locks run out on their own.
            LogGiveBackFailed(logger, lockTokens.Count, entity, owner, e.Message);
        }
    }

    /// <summary>The state one proxied link's two directions share.</summary>
    private sealed class ProxiedLink(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call, CancellationTokenSource ownerCancel, bool peekLock)
    {
        private int _clientGone;
        private int _handingBack;

        public AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> Call { get; } = call;

        /// <summary>Cancels the owner's call: at once for a receive-and-delete link, after <see cref="HandBackWait"/> for a peek-lock one.</summary>
        public CancellationToken OwnerToken { get; } = ownerCancel.Token;

        public bool PeekLock { get; } = peekLock;

        public bool IsClientGone => Volatile.Read(ref _clientGone) == 1;

        /// <summary>This node is stopping and drained the owner itself: the owner's "drained" is not the client's.</summary>
        public bool IsHandingBack => Volatile.Read(ref _handingBack) == 1;

        public void HandingBack() => Volatile.Write(ref _handingBack, 1);

        /// <summary>Nothing more reaches the client: a peek-lock link gives the owner time to drain, a receive-and-delete one has nothing to give back.</summary>
        public void ClientGone()
        {
            if (Interlocked.Exchange(ref _clientGone, 1) == 1)
            {
                return;
            }
            try
            {
                if (PeekLock)
                {
                    ownerCancel.CancelAfter(HandBackWait);
                }
                else
                {
                    ownerCancel.Cancel();
                }
            }
            catch (ObjectDisposedException)
            {
                // The link is over already.
            }
        }

        public void CollectLocks(ReceiveResponse response, List<string> into)
        {
            if (PeekLock)
            {
                into.AddRange(response.Messages.Select(m => m.LockToken).Where(t => t.Length > 0));
            }
        }
    }

    [LoggerMessage(Level = LogLevel.Debug, Message = "A proxied receive link on {Entity} could not pass {Count} message(s) on: {Reason}")]
    private static partial void LogClientWent(ILogger logger, string entity, int count, string reason);

    [LoggerMessage(Level = LogLevel.Debug, Message = "Gave {Count} undelivered message(s) of {Entity} back to their owner {Owner}: the client's receive link went")]
    private static partial void LogGaveBack(ILogger logger, int count, string entity, string owner);

    [LoggerMessage(Level = LogLevel.Information, Message = "Could not give {Count} undelivered message(s) of {Entity} back to their owner {Owner} ({Reason}): they come again when their locks run out")]
    private static partial void LogGiveBackFailed(ILogger logger, int count, string entity, string owner, string reason);
}
