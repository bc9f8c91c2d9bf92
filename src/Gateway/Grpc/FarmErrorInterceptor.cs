using Farm.Broker;
using Farm.ContainerStore.Containers;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;
using Grpc.Core.Interceptors;

namespace Farm.Gateway.Grpc;

/// <summary>
/// The one place where the broker's failures become gRPC: a <see cref="BrokerException"/> ends the
/// call with the status its code maps to and the "farm-error" (and "farm-owner") trailers; any
/// other exception is INTERNAL with its message, and logged. Handlers just throw.
/// </summary>
internal sealed partial class FarmErrorInterceptor(ILogger<FarmErrorInterceptor> logger) : Interceptor
{
    public override async Task<TResponse> UnaryServerHandler<TRequest, TResponse>(
        TRequest request, ServerCallContext context, UnaryServerMethod<TRequest, TResponse> continuation)
    {
        try
        {
            return await continuation(request, context).ConfigureAwait(false);
        }
        catch (Exception e) when (Translate(e, context) is { } status)
        {
            throw status;
        }
    }

    public override async Task DuplexStreamingServerHandler<TRequest, TResponse>(
        IAsyncStreamReader<TRequest> requestStream, IServerStreamWriter<TResponse> responseStream, ServerCallContext context,
        DuplexStreamingServerMethod<TRequest, TResponse> continuation)
    {
        try
        {
            await continuation(requestStream, responseStream, context).ConfigureAwait(false);
        }
        catch (Exception e) when (Translate(e, context) is { } status)
        {
            throw status;
        }
    }

    /// <summary>The RpcException to end the call with, or null to let it through as it is (it already is one).</summary>
    private RpcException? Translate(Exception e, ServerCallContext context)
    {
        switch (e)
        {
            case RpcException:
                // Already a status: a forwarded call's answer, passed on unchanged.
                return null;
            case var _ when Known(e) is { } known:
                return known;
            case OperationCanceledException when context.Deadline <= DateTime.UtcNow:
                // The caller's deadline passed (said here, not left to a rethrow the server may call UNKNOWN).
                return new RpcException(new Status(StatusCode.DeadlineExceeded, "The deadline passed before the call completed."));
            case var _ when context.CancellationToken.IsCancellationRequested:
                return CutOff("call", e);
            default:
                // A stream that broke under the call ends the same way; only its log is quieter.
                if (IsStreamBroken(e))
                {
                    LogStreamBroken(logger, context.Method, e.Message);
                }
                else
                {
                    LogHandlerFailed(logger, context.Method, e);
                }
                return new RpcException(new Status(StatusCode.Internal, e.Message));
        }
    }

    /// <summary>
    /// Work cut off with its call or stream: the caller went away (then nobody reads this), or this
    /// node is stopping under it. Unavailable, so a caller still there tries again, elsewhere.
    /// </summary>
    public static RpcException CutOff(string what, Exception e) =>
        new(new Status(StatusCode.Unavailable, $"The {what} was cut off: the node is stopping or the caller went away ({e.GetType().Name})."));

    /// <summary>
    /// The call's own stream broke under it: the client reset it or its connection went (Kestrel's
    /// IOException on a read or write, which can come before the call's token says so). Logged at
    /// Debug, not as an error with its stack trace: nobody reads the status, and an overloaded node
    /// whose clients give up on it logged one per call, falling further behind doing it.
    /// </summary>
    public static bool IsStreamBroken(Exception e) => e is IOException;

    /// <summary>The status of a failure the broker names (its own, or a container closed under the call); null for any other.</summary>
    public static RpcException? Known(Exception e) => e switch
    {
        BrokerException farm => ToRpc(farm),
        // Closed under the call, before it wrote anything: the caller looks the owner up again and retries.
        ContainerDatabaseClosedException => ToRpc(new BrokerException(FarmErrorCode.NotOwner,
            "The container this call needed was closed under it: it moved away from this node, or the node is stopping.")),
        _ => null,
    };

    public static RpcException ToRpc(BrokerException e)
    {
        var trailers = new Metadata { { FarmMetadata.ErrorTrailer, FarmErrorNames.Of(e.Code) } };
        if (e.Owner is not null)
        {
            trailers.Add(FarmMetadata.OwnerTrailer, e.Owner);
        }
        // An overloaded node's SERVICE_BUSY: RESOURCE_EXHAUSTED, gRPC's "slow down", which a
        // gateway passes on rather than holding it for another owner (CallFailures.IsBetweenOwners).
        var status = e.Overloaded ? StatusCode.ResourceExhausted : StatusOf(e.Code);
        return new RpcException(new Status(status, e.Message), trailers);
    }

    /// <summary>The gRPC status a failure travels under; the trailer says precisely what it is.</summary>
    public static StatusCode StatusOf(FarmErrorCode code) => code switch
    {
        FarmErrorCode.InvalidArgument or FarmErrorCode.MessageSizeExceeded => StatusCode.InvalidArgument,
        FarmErrorCode.MessagingEntityNotFound or FarmErrorCode.MessageNotFound or FarmErrorCode.ContainerNotFound => StatusCode.NotFound,
        FarmErrorCode.MessagingEntityAlreadyExists => StatusCode.AlreadyExists,
        FarmErrorCode.MessageLockLost => StatusCode.FailedPrecondition,
        // Not UNIMPLEMENTED: generic gRPC clients read that as "no such method".
        FarmErrorCode.NotSupported => StatusCode.FailedPrecondition,
        FarmErrorCode.QuotaExceeded => StatusCode.ResourceExhausted,
        // Transient: nothing was done; the same call may succeed elsewhere or in a moment.
        FarmErrorCode.NotOwner or FarmErrorCode.StaleEpoch or FarmErrorCode.ServiceBusy or FarmErrorCode.StoreUnavailable => StatusCode.Unavailable,
        _ => StatusCode.Unknown,
    };

    [LoggerMessage(Level = LogLevel.Debug, Message = "{Method} ended: its stream broke ({Why})")]
    private static partial void LogStreamBroken(ILogger logger, string method, string why);

    [LoggerMessage(Level = LogLevel.Error, Message = "{Method} failed")]
    private static partial void LogHandlerFailed(ILogger logger, string method, Exception exception);
}
