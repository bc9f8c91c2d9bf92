using Google.Protobuf;

namespace Farm.Contracts.Rpc;

/// <summary>
/// A gRPC client channel over HTTP/2 cleartext (prior knowledge), built on HttpClient.
/// Farm carries the standard gRPC wire protocol itself because the registry this project builds
/// against does not serve Grpc.Net.Client's dependencies; any gRPC client (grpc-js, grpcurl)
/// talks to Farm's servers unchanged.
/// Thread-safe; share one per address. Connection failures surface as <see cref="RpcException"/>
/// with <see cref="RpcStatusCode.Unavailable"/>.
/// </summary>
public sealed partial class RpcChannel : IDisposable
{
    public RpcChannel(Uri address, RpcChannelOptions? options = null)
    {
        Address = address;
        Options = options ?? new RpcChannelOptions();
        throw new NotImplementedException();
    }

    public Uri Address { get; }

    public RpcChannelOptions Options { get; }

    /// <summary>Calls a unary method, e.g. "/farm.v1.Messaging/Send".</summary>
    public Task<TResponse> UnaryAsync<TRequest, TResponse>(string method, TRequest request, MessageParser<TResponse> responseParser, CallOptions options = default)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
        => throw new NotImplementedException();

    /// <summary>Opens a bidirectional streaming call. Dispose the call to cancel it.</summary>
    public DuplexCall<TRequest, TResponse> Duplex<TRequest, TResponse>(string method, MessageParser<TResponse> responseParser, CallOptions options = default)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
        => throw new NotImplementedException();

    public void Dispose() => throw new NotImplementedException();
}

public sealed record RpcChannelOptions
{
    /// <summary>Largest message accepted from the server, in bytes.</summary>
    public int MaxReceiveMessageSize { get; init; } = 16 * 1024 * 1024;

    public TimeSpan ConnectTimeout { get; init; } = TimeSpan.FromSeconds(5);

    /// <summary>HTTP/2 keep-alive pings, so a dead peer is noticed on an idle stream.</summary>
    public TimeSpan KeepAlivePingDelay { get; init; } = TimeSpan.FromSeconds(10);

    public TimeSpan KeepAlivePingTimeout { get; init; } = TimeSpan.FromSeconds(5);
}

/// <summary>A bidirectional streaming call in progress.</summary>
public sealed class DuplexCall<TRequest, TResponse> : IAsyncDisposable
    where TRequest : IMessage<TRequest>
    where TResponse : IMessage<TResponse>
{
    /// <summary>Writes one request message. Not thread-safe: one writer at a time.</summary>
    public ValueTask WriteAsync(TRequest message, CancellationToken cancellationToken = default) => throw new NotImplementedException();

    /// <summary>Half-closes the request stream.</summary>
    public ValueTask CompleteAsync() => throw new NotImplementedException();

    /// <summary>
    /// The response messages. Ends when the server closes the stream with OK; throws
    /// <see cref="RpcException"/> when it ends with another status or the connection drops.
    /// </summary>
    public IAsyncEnumerable<TResponse> ReadAllAsync(CancellationToken cancellationToken = default) => throw new NotImplementedException();

    /// <summary>Cancels the call if it is still running.</summary>
    public ValueTask DisposeAsync() => throw new NotImplementedException();
}
