using System.Net.Http;
using Grpc.Core;

namespace Farm.Contracts;

/// <summary>
/// Grpc.Net.Client reports some broken connections as Internal rather than Unavailable: a keep-alive
/// ping the peer never answered (a frozen process), an HTTP/2 connection reset under the call. The
/// peer said nothing about the call, so callers treat these like Unavailable: try again, elsewhere
/// if need be. Only a failure whose cause is the transport counts, never an error a handler raised.
/// A connection that could not be set up within <see cref="FarmChannels.ConnectTimeout"/> (a killed
/// container whose published port now leads nowhere, a host gone from the network) comes as
/// Cancelled; it is read as Unavailable too, like a refused connection: the call never left.
/// </summary>
public static class BrokenConnections
{
    /// <summary>True when the call failed because the connection under it broke, whatever status it carries.</summary>
    public static bool IsBrokenConnection(this RpcException error) =>
        error.FarmError() is null
        && (error.StatusCode == StatusCode.Unavailable
            || (error.StatusCode == StatusCode.Internal && IsTransportCause(error.Status.DebugException))
            || error.IsConnectTimeout());

    /// <summary>
    /// True when the call failed because no connection could be set up within the handler's
    /// ConnectTimeout: Grpc.Net.Client reports it as Cancelled, with SocketsHttpHandler's
    /// TimeoutException inside, where the caller's own cancellation has none. Nothing was sent.
    /// </summary>
    public static bool IsConnectTimeout(this RpcException error)
    {
        if (error.StatusCode != StatusCode.Cancelled || error.FarmError() is not null)
        {
            return false;
        }
        for (var e = error.Status.DebugException; e is not null; e = e.InnerException)
        {
            if (e is TimeoutException)
            {
                return true;
            }
        }
        return false;
    }

    /// <summary>The failure as Unavailable when the connection broke; otherwise unchanged.</summary>
    public static RpcException AsUnavailableWhenBroken(this RpcException error) =>
        error.StatusCode is StatusCode.Internal or StatusCode.Cancelled && error.IsBrokenConnection()
            ? new RpcException(new Status(StatusCode.Unavailable, error.Status.Detail, error.Status.DebugException), error.Trailers)
            : error;

    /// <summary>
    /// For a call that failed in its transport (refused, reset, cut off by a liveness probe), one
    /// line in the transport's own words ("The farm could not be reached: Connection refused
    /// (127.0.0.1:5000)"); null for any other failure. grpc-dotnet's detail for those names
    /// exception types ("Error starting gRPC call. HttpRequestException: ..."), not a line for a person.
    /// </summary>
    public static string? TransportFailure(this RpcException error)
    {
        if (!error.IsBrokenConnection())
        {
            return null;
        }
        // The outermost transport failure says most (HttpRequestException adds the address).
        var words = TransportCause(error.Status.DebugException)?.Message;
        return string.IsNullOrWhiteSpace(words) ? null : $"The farm could not be reached: {words.ReplaceLineEndings(" ").Trim()}";
    }

    private static bool IsTransportCause(Exception? cause) => TransportCause(cause) is not null;

    /// <summary>The outermost exception in <paramref name="cause"/>'s chain that the transport raised, or null.</summary>
    private static Exception? TransportCause(Exception? cause)
    {
        for (var e = cause; e is not null; e = e.InnerException)
        {
            if (e is HttpRequestException or HttpProtocolException or IOException or System.Net.Sockets.SocketException or TimeoutException)
            {
                return e;
            }
        }
        return null;
    }
}
