using System.Net.Http;
using Google.Protobuf;

namespace Farm.Contracts.Rpc;

/// <summary>
/// The lifetime of one client call: its cancellation (caller's token, deadline, disposal) and the
/// translation of whatever HttpClient throws into the gRPC failure the caller sees.
/// </summary>
internal sealed class RpcCall : IDisposable
{
    private readonly Uri _address;
    private readonly CancellationToken _callerToken;
    private readonly CancellationTokenSource? _deadline;
    private readonly CancellationTokenSource _cancellation;

    public RpcCall(RpcChannel channel, CallOptions options)
    {
        _address = channel.Address;
        _callerToken = options.CancellationToken;

        if (options.Deadline is { } deadline && deadline != DateTime.MaxValue)
        {
            var now = channel.Options.TimeProvider.GetUtcNow().UtcDateTime;
            var remaining = (deadline.Kind == DateTimeKind.Local ? deadline.ToUniversalTime() : deadline) - now;
            if (remaining <= TimeSpan.Zero)
            {
                // Already late: fail without sending anything, through the same path as a timer.
                _deadline = new CancellationTokenSource();
                _deadline.Cancel();
            }
            else
            {
                Timeout = remaining;
                // Timers cannot go beyond ~49 days; such a deadline only travels to the server.
                if (remaining < TimeSpan.FromDays(30))
                {
                    _deadline = new CancellationTokenSource(remaining, channel.Options.TimeProvider);
                }
            }
        }

        _cancellation = _deadline is null
            ? CancellationTokenSource.CreateLinkedTokenSource(_callerToken)
            : CancellationTokenSource.CreateLinkedTokenSource(_callerToken, _deadline.Token);
    }

    /// <summary>The time left until the deadline when the call started, sent as grpc-timeout.</summary>
    public TimeSpan? Timeout { get; }

    /// <summary>Cancelled by the caller's token, the deadline, or <see cref="Cancel"/>.</summary>
    public CancellationToken Token => _cancellation.Token;

    public void Cancel() => _cancellation.Cancel();

    public void Dispose()
    {
        _cancellation.Dispose();
        _deadline?.Dispose();
    }

    /// <summary>What the caller sees for an exception thrown while the call ran.</summary>
    public Exception Translate(Exception exception, CancellationToken operationToken = default)
    {
        if (exception is RpcException)
        {
            return exception;
        }

        // Whatever broke, a cancellation the caller asked for is what they expect to see.
        if (_callerToken.IsCancellationRequested)
        {
            return new OperationCanceledException("The call was cancelled.", exception, _callerToken);
        }

        if (operationToken.IsCancellationRequested)
        {
            return new OperationCanceledException("The call was cancelled.", exception, operationToken);
        }

        if (_deadline?.IsCancellationRequested == true)
        {
            return new RpcException(RpcStatusCode.DeadlineExceeded, "Deadline exceeded.", inner: exception);
        }

        if (_cancellation.IsCancellationRequested)
        {
            return new RpcException(RpcStatusCode.Cancelled, "The call was cancelled.", inner: exception);
        }

        if (FindInner<HttpProtocolException>(exception) is { } reset)
        {
            return FromStreamReset(reset);
        }

        return exception switch
        {
            InvalidProtocolBufferException => new RpcException(RpcStatusCode.Internal, $"Failed to parse a response message: {exception.Message}", inner: exception),
            EndOfStreamException => new RpcException(RpcStatusCode.Internal, "The response ended in the middle of a message.", inner: exception),
            // Connection refused or reset, DNS failures, HTTP/2 not spoken by the peer, and the
            // connect timeout (an OperationCanceledException not caused by any of our tokens).
            HttpRequestException or IOException or OperationCanceledException or ObjectDisposedException =>
                new RpcException(RpcStatusCode.Unavailable, $"Error calling {_address}: {Describe(exception)}", inner: exception),
            _ => exception,
        };
    }

    // The gRPC spec's mapping of HTTP/2 RST_STREAM codes to status codes.
    private static RpcException FromStreamReset(HttpProtocolException reset)
    {
        // HttpClient reports a peer that stopped answering keep-alive pings (a frozen or cut-off
        // process) as a protocol error, but nothing was wrong with the protocol: the peer is
        // unreachable, and callers must see that so they retry elsewhere.
        if (reset.Message.Contains("ping", StringComparison.OrdinalIgnoreCase))
        {
            return new RpcException(RpcStatusCode.Unavailable, $"The peer stopped answering HTTP/2 pings: {reset.Message}", inner: reset);
        }

        var code = reset.ErrorCode switch
        {
            0x7 => RpcStatusCode.Unavailable, // REFUSED_STREAM: not processed, safe to retry
            0x8 => RpcStatusCode.Cancelled, // CANCEL
            0xB => RpcStatusCode.ResourceExhausted, // ENHANCE_YOUR_CALM
            0xC => RpcStatusCode.PermissionDenied, // INADEQUATE_SECURITY
            _ => RpcStatusCode.Internal,
        };
        return new RpcException(code, $"The HTTP/2 stream was reset (error code {reset.ErrorCode}): {reset.Message}", inner: reset);
    }

    private static string Describe(Exception exception)
    {
        // HttpRequestException's own message is often generic ("An error occurred while sending
        // the request."); the innermost one says what happened ("Connection refused").
        var innermost = exception;
        while (innermost.InnerException is not null)
        {
            innermost = innermost.InnerException;
        }

        return innermost == exception ? exception.Message : $"{exception.Message} ({innermost.Message})";
    }

    private static T? FindInner<T>(Exception exception) where T : Exception
    {
        for (Exception? e = exception; e is not null; e = e.InnerException)
        {
            if (e is T match)
            {
                return match;
            }
        }

        return null;
    }
}
