using System.Threading.Channels;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;

namespace Farm.Gateway.Routing;

internal sealed partial class MessagingRouter
{
    /// <summary>Sends one stream may have running at once (see <see cref="SendStreamBudget"/>).</summary>
    internal const int MaxSendsInFlightPerStream = 4096;

    /// <summary>Bytes of sends one stream may have running at once.</summary>
    internal const long MaxSendBytesInFlightPerStream = 64L * 1024 * 1024;

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
        var inFlight = new SendStreamBudget(MaxSendsInFlightPerStream, MaxSendBytesInFlightPerStream);
        try
        {
            await foreach (var request in requestReads.ReadAllAsync(stopReading.Token).ConfigureAwait(false))
            {
                foreach (var send in request.Sends)
                {
                    var bytes = send.Send?.CalculateSize() ?? 0;
                    await inFlight.TakeAsync(bytes, cancellationToken).ConfigureAwait(false);
                    _ = SendOneAsync(send, bytes, direct, answers.Writer, inFlight, cancellationToken);
                }
            }
            // Every send read gets its answer before the stream ends.
            await inFlight.EmptyAsync(cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            // Prompt either way: the channel is complete, or the call was cancelled.
            answers.Writer.TryComplete();
            await writing.ConfigureAwait(false);
        }
    }

    private async Task SendOneAsync(StreamedSend send, long bytes, bool direct, ChannelWriter<StreamedSendResult> answers, SendStreamBudget inFlight, CancellationToken cancellationToken)
    {
        var result = new StreamedSendResult { Id = send.Id };
        try
        {
            if (send.Send is { } request && routing.IsLoadedSendTargetHere(request.Entity))
            {
                _ = TimeoutOf(send); // a malformed one is refused here too
                // Served and loaded here, as nearly every send is: run it without the routing layers,
                // the deadline's timer and token sources (it waits for nothing but its commit, which
                // no deadline could call back) or the tries' copies.
                try
                {
                    result.Response = await local.SendAsync(request, cancellationToken).ConfigureAwait(false);
                }
                catch (Exception e) when (!direct && CallFailures.IsBetweenOwners(e) && !cancellationToken.IsCancellationRequested)
                {
                    // The container moved a moment ago: routed from a fresh look, held while between
                    // owners, as a repeat of the try that failed here (as OwnerRouting.RouteAsync does).
                    result.Response = await RouteStreamedSendAsync(send, direct, RepeatableTries.AfterFirst(request), cancellationToken).ConfigureAwait(false);
                }
            }
            else
            {
                result.Response = await RouteStreamedSendAsync(send, direct, tries: null, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (Exception e)
        {
            result.Failure = FailureOf(e, "send", cancellationToken);
        }
        finally
        {
            // The answer first: once every send gave its share back the stream ends, and an answer
            // written after that would be lost (the client would send a stored message again).
            answers.TryWrite(result);
            inFlight.Give(bytes);
        }
    }

    /// <summary>Longest timeout a streamed send keeps (a timer's limit is about 49 days); longer is none.</summary>
    private static readonly TimeSpan MaxSendTimeout = TimeSpan.FromDays(1);

    /// <summary>The send's timeout; null for none (unset, or longer than <see cref="MaxSendTimeout"/>).</summary>
    private static TimeSpan? TimeoutOf(StreamedSend send)
    {
        if (send.Timeout is not { } timeout)
        {
            return null;
        }
        if (timeout.Seconds < 0 || timeout.Nanos is < 0 or >= 1_000_000_000)
        {
            throw Broker.FarmErrors.Invalid($"A streamed send's timeout must be a duration of zero or more; got {timeout}.");
        }
        var span = timeout.ToTimeSpan();
        return span <= MaxSendTimeout ? span : null;
    }

    /// <summary>One send of the stream, routed as a Send call with the client's timeout as its deadline.</summary>
    /// <param name="tries">The tries so far (null: none yet).</param>
    private async Task<SendResponse> RouteStreamedSendAsync(StreamedSend send, bool direct, RepeatableTries<SendRequest>? tries, CancellationToken cancellationToken)
    {
        var request = send.Send ?? throw Broker.FarmErrors.Invalid("A streamed send carries no 'send'.");
        var timeout = TimeoutOf(send);
        // The client's deadline for this send, as a call's would be: it cancels the send and goes along with a forward.
        using var expiry = timeout is { } limit ? new CancellationTokenSource(limit, time) : null;
        using var sendToken = expiry is null ? null : CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, expiry.Token);
        var deadline = timeout is { } forward ? DateTime.UtcNow + forward : DateTime.MaxValue;
        tries ??= RepeatableTries.Of(request);
        try
        {
            return await routing.RouteAsync(new RoutedCall("Send", request.Entity), direct, deadline,
                ct => local.SendAsync(tries.Next(), ct), (owner, o) => ForwardSend(owner, tries.Next(), o), sendToken?.Token ?? cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (expiry?.IsCancellationRequested == true && !cancellationToken.IsCancellationRequested && e is not RpcException and not Broker.BrokerException)
        {
            throw new RpcException(new Status(StatusCode.DeadlineExceeded, $"The deadline passed before the send completed ({e.GetType().Name})."));
        }
    }

    /// <summary>What a call (<paramref name="what"/>) failing with <paramref name="e"/> would have ended with (see <see cref="FarmErrorInterceptor"/>).</summary>
    private CallFailure FailureOf(Exception e, string what, CancellationToken cancellationToken)
    {
        var status = e as RpcException ?? FarmErrorInterceptor.Known(e);
        if (status is null)
        {
            if (cancellationToken.IsCancellationRequested)
            {
                status = FarmErrorInterceptor.CutOff(what, e);
            }
            else
            {
                // A stream that broke under it (the client reset it, its connection went) is not
                // logged as an error: nobody reads the answer (see FarmErrorInterceptor.IsStreamBroken).
                if (!FarmErrorInterceptor.IsStreamBroken(e))
                {
                    LogStreamedOperationFailed(logger, what, e);
                }
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

    [LoggerMessage(Level = LogLevel.Error, Message = "A {What} inside a stream failed")]
    private static partial void LogStreamedOperationFailed(ILogger logger, string what, Exception exception);
}
