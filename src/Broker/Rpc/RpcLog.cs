using Microsoft.Extensions.Logging;

namespace Farm.Broker.Rpc;

internal static partial class RpcLog
{
    [LoggerMessage(EventId = 1, Level = LogLevel.Error, Message = "gRPC method {Method} failed; the client gets INTERNAL.")]
    public static partial void HandlerFailed(ILogger logger, string method, Exception exception);

    [LoggerMessage(EventId = 2, Level = LogLevel.Debug, Message = "gRPC call {Method} ended because the client went away ({ExceptionType}).")]
    public static partial void CallAborted(ILogger logger, string method, string exceptionType);
}
