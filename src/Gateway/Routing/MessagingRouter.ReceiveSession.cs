using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;

namespace Farm.Gateway.Routing;

internal sealed partial class MessagingRouter
{
    /// <summary>Links one receive session may hold open at once; an open past it is refused (RESOURCE_EXHAUSTED).</summary>
    internal const int MaxLinksPerSession = 50_000;

    /// <summary>
    /// Many receive links over one stream (farm.v1 ReceiveSession): each link runs exactly as a
    /// Receive call would (<see cref="ReceiveLinkAsync"/>: here, or proxied to the owner), and its
    /// frames go out with the frames of other links that are ready at the same moment. What one
    /// HTTP/2 stream per link cost (its buffers, a write and a flush per delivery) is paid once per
    /// session, which is what lets one client receive from thousands of quiet queues.
    /// </summary>
    public override async Task ReceiveSession(IAsyncStreamReader<ReceiveSessionRequest> requestStream, IServerStreamWriter<ReceiveSessionResponse> responseStream, ServerCallContext context)
    {
        var cancellationToken = context.CancellationToken;
        var direct = OwnerRouting.IsDirect(context);
        using var session = new ReceiveSessionLinks(responseStream, MaxLinksPerSession, cancellationToken);
        using var stopping = lifetime.ApplicationStopping.Register(session.Stop);
        var cancelLinks = true;
        try
        {
            // Disposed (its pending read cancelled and awaited) before the links end; see CallScopedRequestStream.
            await using var requestReads = new CallScopedRequestStream<ReceiveSessionRequest>(requestStream, session.Ending);
            try
            {
                await foreach (var request in requestReads.ReadAllAsync(session.Ending).ConfigureAwait(false))
                {
                    if (request.AcceptsSharedMessages)
                    {
                        session.SharesMessages = true;
                    }
                    foreach (var frame in request.Links)
                    {
                        if (session.Dispatch(frame) is { } opened)
                        {
                            _ = RunSessionLinkAsync(session, opened, direct);
                        }
                    }
                }
            }
            catch (OperationCanceledException) when (session.Ending.IsCancellationRequested && !cancellationToken.IsCancellationRequested)
            {
                // This node is stopping and the session has no links left: end it cleanly.
            }
            cancelLinks = false;
        }
        finally
        {
            // The client sends nothing more (or the node is stopping): every link ends as a
            // half-closed Receive call would, once its credit is used up, and says so before the
            // session ends. When the call broke, they end at once.
            await session.EndAllAsync(cancelLinks).ConfigureAwait(false);
        }
    }

    private async Task RunSessionLinkAsync(ReceiveSessionLinks session, ReceiveSessionLinks.Link link, bool direct)
    {
        CallFailure? failure = null;
        try
        {
            await ReceiveLinkAsync(link.ReadRequestsAsync(), link, direct, link.Cancellation).ConfigureAwait(false);
        }
        catch (Exception) when (!link.Detached && session.StreamBroken)
        {
            // The session's stream broke (the client reset it, its connection went): no link's end
            // can reach the client, and each link's failure is that one, not one of its own.
        }
        catch (Exception e) when (!link.Detached)
        {
            failure = FailureOf(e, "receive link", link.Cancellation);
        }
        catch (Exception)
        {
            // Detached by the client: it waits for nothing more from this link.
        }
        session.Ended(link, failure);
    }
}
