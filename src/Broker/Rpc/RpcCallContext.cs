using Farm.Contracts.Rpc;
using Microsoft.AspNetCore.Http;

namespace Farm.Broker.Rpc;

/// <summary>What a server-side gRPC handler knows about its call.</summary>
public sealed class RpcCallContext
{
    internal RpcCallContext(HttpContext httpContext, string method, CancellationToken cancellationToken)
    {
        HttpContext = httpContext;
        Method = method;
        CancellationToken = cancellationToken;
    }

    public HttpContext HttpContext { get; }

    /// <summary>The full method name, e.g. "/farm.v1.Messaging/Send".</summary>
    public string Method { get; }

    /// <summary>Cancelled when the client cancels, disconnects, or the grpc-timeout deadline passes.</summary>
    public CancellationToken CancellationToken { get; }

    /// <summary>A request header (lower-case name), or null.</summary>
    public string? GetHeader(string name) => HttpContext.Request.Headers.TryGetValue(name, out var v) ? v.ToString() : null;

    /// <summary>Trailers to send with the final status, on success or failure.</summary>
    public IDictionary<string, string> ResponseTrailers { get; } = new Dictionary<string, string>();
}

/// <summary>Writes response messages of a streaming call.</summary>
public interface IRpcStreamWriter<in T>
{
    /// <summary>Writes and flushes one message. Not thread-safe: one writer at a time.</summary>
    ValueTask WriteAsync(T message, CancellationToken cancellationToken = default);
}
