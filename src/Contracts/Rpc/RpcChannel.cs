using System.Net;
using System.Net.Http.Headers;
using Google.Protobuf;

namespace Farm.Contracts.Rpc;

/// <summary>
/// A gRPC client channel over HTTP/2 cleartext (prior knowledge), built on SocketsHttpHandler.
/// Farm carries the standard gRPC wire protocol itself because the registry this project builds
/// against does not serve Grpc.Net.Client's dependencies; any gRPC client (grpc-js, grpcurl)
/// talks to Farm's servers unchanged.
/// Thread-safe; share one per address. Connection failures surface as <see cref="RpcException"/>
/// with <see cref="RpcStatusCode.Unavailable"/>.
/// </summary>
/// <remarks>
/// Failures: every call fails with <see cref="RpcException"/>, except that a call whose
/// <see cref="CallOptions.CancellationToken"/> (or the token passed to a call's method) was cancelled
/// throws <see cref="OperationCanceledException"/> for that token. A passed
/// <see cref="CallOptions.Deadline"/> gives <see cref="RpcStatusCode.DeadlineExceeded"/>; disposing a
/// <see cref="DuplexCall{TRequest, TResponse}"/> in progress gives <see cref="RpcStatusCode.Cancelled"/>.
/// </remarks>
public sealed partial class RpcChannel : IDisposable
{
    private static readonly MediaTypeHeaderValue GrpcContentType = new(GrpcProtocol.ContentType);

    // HttpMessageInvoker rather than HttpClient: HttpClient only adds a timeout and response
    // buffering, and gRPC calls bring their own deadline and stream their responses.
    private readonly HttpMessageInvoker _invoker;
    private readonly string _baseAddress;

    public RpcChannel(Uri address, RpcChannelOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(address);
        Address = address;
        Options = options ?? new RpcChannelOptions();
        _baseAddress = address.AbsoluteUri.TrimEnd('/');

        var handler = new SocketsHttpHandler
        {
            // One HTTP/2 connection allows only as many concurrent streams as the server says
            // (Kestrel: 100 by default); beyond that, open more connections instead of queueing.
            EnableMultipleHttp2Connections = true,
            ConnectTimeout = Options.ConnectTimeout,
            // Pings only while calls are open: a receive stream can sit idle for minutes, and
            // without pings a dead broker would only be noticed by TCP timeouts much later.
            KeepAlivePingDelay = Options.KeepAlivePingDelay,
            KeepAlivePingTimeout = Options.KeepAlivePingTimeout,
            KeepAlivePingPolicy = HttpKeepAlivePingPolicy.WithActiveRequests,
            // Farm addresses are direct; an HTTP proxy from the environment would not speak h2c.
            UseProxy = false,
            UseCookies = false,
            AllowAutoRedirect = false,
            AutomaticDecompression = DecompressionMethods.None,
        };
        _invoker = new HttpMessageInvoker(handler, disposeHandler: true);
    }

    public Uri Address { get; }

    public RpcChannelOptions Options { get; }

    public void Dispose() => _invoker.Dispose();

    internal HttpMessageInvoker Invoker => _invoker;

    internal HttpRequestMessage CreateRequest(string method, HttpContent content, RpcCall call, CallOptions options)
    {
        content.Headers.ContentType = GrpcContentType;
        var request = new HttpRequestMessage(HttpMethod.Post, _baseAddress + method)
        {
            // h2c with prior knowledge: HTTP/2 from the first byte, never a fallback to HTTP/1.1.
            Version = HttpVersion.Version20,
            VersionPolicy = HttpVersionPolicy.RequestVersionExact,
            Content = content,
        };
        request.Headers.TryAddWithoutValidation("te", "trailers");
        if (call.Timeout is { } timeout)
        {
            request.Headers.TryAddWithoutValidation(GrpcProtocol.TimeoutHeader, GrpcProtocol.FormatTimeout(timeout));
        }

        if (options.Headers is not null)
        {
            foreach (var (name, value) in options.Headers)
            {
                request.Headers.TryAddWithoutValidation(name, value);
            }
        }

        return request;
    }
}

public sealed record RpcChannelOptions
{
    /// <summary>Largest message accepted from the server, in bytes.</summary>
    public int MaxReceiveMessageSize { get; init; } = 16 * 1024 * 1024;

    public TimeSpan ConnectTimeout { get; init; } = TimeSpan.FromSeconds(5);

    /// <summary>HTTP/2 keep-alive pings, so a dead peer is noticed on an idle stream.</summary>
    public TimeSpan KeepAlivePingDelay { get; init; } = TimeSpan.FromSeconds(10);

    public TimeSpan KeepAlivePingTimeout { get; init; } = TimeSpan.FromSeconds(5);

    /// <summary>The clock deadlines are measured with; a fake one in tests.</summary>
    public TimeProvider TimeProvider { get; init; } = TimeProvider.System;
}
