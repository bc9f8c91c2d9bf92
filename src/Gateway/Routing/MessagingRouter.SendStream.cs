using System.Threading.Channels;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;

namespace Farm.Gateway.Routing;

internal sealed partial class MessagingRouter
{
    /// <summary>
    /// Sends one stream can have running at once. Past it the stream is not read until one ends,
    /// and HTTP/2 flow control holds the client back: a bound like Kestrel's limit of streams per
    /// connection, which bounds unary sends.
    /// </summary>
    internal const int MaxSendsInFlightPerStream = 128;

    /// <summary>
    /// Many sends over one stream (farm.v1 SendStream): each send is routed exactly as a Send call
    /// (run here, or forwarded to its entity's owner, held while it is between owners), all of them
    /// concurrently, and answered as it completes; answers that complete together share a write.
    /// When this node stops, the stream stops reading, answers every send it read, and ends: the
    /// client sends the rest again elsewhere.
    /// </summary>
    public override async Task SendStream(IAsyncStreamReader<SendStreamRequest> requestStream, IServerStreamWriter<SendStreamResponse> responseStream, ServerCallContext context)
    {
        var cancellationToken = context.CancellationToken;
        var direct = OwnerRouting.IsDirect(context);
        using var stopReading = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, lifetime.ApplicationStopping);
        // Disposed (its pending read cancelled and awaited) before this handler returns; see CallScopedRequestStream.
        await using var requestReads = new CallScopedRequestStream<SendStreamRequest>(requestStream, stopReading.Token);
        var answers = Channel.CreateUnbounded<StreamedSendResult>(new UnboundedChannelOptions { SingleReader = true });
        var writing = WriteSendAnswersAsync(answers.Reader, responseStream, cancellationToken);
        // Not disposed: sends cut off by the call's end still release it after this handler returned.
        var inFlight = new SemaphoreSlim(MaxSendsInFlightPerStream, MaxSendsInFlightPerStream);
        try
        {
            await foreach (var request in requestReads.ReadAllAsync(stopReading.Token).ConfigureAwait(false))
            {
                foreach (var send in request.Sends)
                {
                    await inFlight.WaitAsync(cancellationToken).ConfigureAwait(false);
                    _ = SendOneAsync(send, direct, answers.Writer, inFlight, cancellationToken);
                }
            }
            // Every send read gets its answer before the stream ends.
            for (var i = 0; i < MaxSendsInFlightPerStream; i++)
            {
                await inFlight.WaitAsync(cancellationToken).ConfigureAwait(false);
            }
        }
        finally
        {
            // Prompt either way: the channel is complete, or the call was cancelled.
            answers.Writer.TryComplete();
            await writing.ConfigureAwait(false);
        }
    }

    private async Task SendOneAsync(StreamedSend send, bool direct, ChannelWriter<StreamedSendResult> answers, SemaphoreSlim inFlight, CancellationToken cancellationToken)
    {
        StreamedSendResult result;
        // The client's deadline for this send, as a call's would be: it cancels the send and goes along with a forward.
        using var expiry = send.Timeout is { } timeout
            ? new CancellationTokenSource(timeout.ToTimeSpan(), time)
            : null;
        using var sendToken = expiry is null ? null : CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, expiry.Token);
        var token = sendToken?.Token ?? cancellationToken;
        var deadline = send.Timeout is { } forwardTimeout ? DateTime.UtcNow + forwardTimeout.ToTimeSpan() : DateTime.MaxValue;
        try
        {
            var request = send.Send ?? throw Broker.FarmErrors.Invalid("A streamed send carries no 'send'.");
            var response = await routing.RouteAsync(new RoutedCall("Send", request.Entity), direct, deadline,
                ct => local.SendAsync(request, ct), (owner, o) => owner.Messaging.SendAsync(request, o), token).ConfigureAwait(false);
            result = new StreamedSendResult { Id = send.Id, Response = response };
        }
        catch (Exception e) when (expiry?.IsCancellationRequested == true && !cancellationToken.IsCancellationRequested)
        {
            result = new StreamedSendResult
            {
                Id = send.Id,
                Failure = new RpcException(new Status(StatusCode.DeadlineExceeded, $"The deadline passed before the send completed ({e.GetType().Name}).")).ToCallFailure(),
            };
        }
        catch (Exception e)
        {
            result = new StreamedSendResult { Id = send.Id, Failure = FailureOf(e, cancellationToken) };
        }
        finally
        {
            inFlight.Release();
        }
        answers.TryWrite(result);
    }

    /// <summary>What a Send call failing with <paramref name="e"/> would have ended with (see <see cref="FarmErrorInterceptor"/>).</summary>
    private CallFailure FailureOf(Exception e, CancellationToken cancellationToken)
    {
        var status = e as RpcException ?? FarmErrorInterceptor.Known(e);
        if (status is null)
        {
            if (cancellationToken.IsCancellationRequested)
            {
                status = new RpcException(new Status(StatusCode.Unavailable, $"The send was cut off: the node is stopping or the caller went away ({e.GetType().Name})."));
            }
            else
            {
                LogStreamedSendFailed(logger, e);
                status = new RpcException(new Status(StatusCode.Internal, e.Message));
            }
        }
        return status.ToCallFailure();
    }

    /// <summary>Writes answers as they come, all that are ready in one response.</summary>
    private static async Task WriteSendAnswersAsync(ChannelReader<StreamedSendResult> answers, IServerStreamWriter<SendStreamResponse> responseStream, CancellationToken cancellationToken)
    {
        while (await answers.WaitToReadAsync(cancellationToken).ConfigureAwait(false))
        {
            var response = new SendStreamResponse();
            while (answers.TryRead(out var result))
            {
                response.Results.Add(result);
            }
            await responseStream.WriteAsync(response, cancellationToken).ConfigureAwait(false);
        }
    }

    [LoggerMessage(Level = LogLevel.Error, Message = "A streamed send failed")]
    private static partial void LogStreamedSendFailed(ILogger logger, Exception exception);
}
