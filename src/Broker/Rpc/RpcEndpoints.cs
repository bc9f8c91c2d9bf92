using Farm.Contracts.Reflection.V1Alpha;
using Farm.Contracts.Rpc;
using Google.Protobuf;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Rpc;

/// <summary>
/// Maps gRPC methods onto ASP.NET Core endpoints (HTTP/2, application/grpc framing, grpc-status
/// trailers, grpc-timeout deadlines). Handlers fail a call by throwing
/// <see cref="Farm.Contracts.Rpc.RpcException"/>; any other exception becomes INTERNAL and is logged.
/// </summary>
/// <remarks>
/// Serve these endpoints on an HTTP/2 listener (<see cref="RpcKestrel.ListenGrpc"/>). A deadline
/// (grpc-timeout) cancels <see cref="RpcCallContext.CancellationToken"/>; a handler that then throws
/// <see cref="OperationCanceledException"/> ends the call with DEADLINE_EXCEEDED.
/// </remarks>
public static class RpcEndpoints
{
    /// <summary>Largest request message accepted; larger ones fail the call with RESOURCE_EXHAUSTED.</summary>
    public const int MaxRequestMessageSize = 16 * 1024 * 1024;

    public static IEndpointConventionBuilder MapUnary<TRequest, TResponse>(
        this IEndpointRouteBuilder endpoints,
        string method,
        MessageParser<TRequest> requestParser,
        Func<TRequest, RpcCallContext, Task<TResponse>> handler)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
    {
        ArgumentNullException.ThrowIfNull(requestParser);
        ArgumentNullException.ThrowIfNull(handler);

        var logger = CreateLogger(endpoints);
        return endpoints.MapPost(method, http => RpcServerCall.RunAsync(http, method, logger, async context =>
        {
            var body = http.Request.BodyReader;
            var request = await RpcServerFraming.ReadMessageAsync(body, requestParser, MaxRequestMessageSize, context.CancellationToken)
                ?? throw new RpcException(RpcStatusCode.Internal, "The request ended without a message.");
            if (await RpcServerFraming.ReadMessageAsync(body, requestParser, MaxRequestMessageSize, context.CancellationToken) is not null)
            {
                throw new RpcException(RpcStatusCode.Internal, "A unary method received more than one request message.");
            }

            var response = await handler(request, context)
                ?? throw new InvalidOperationException($"The handler of {method} returned no response.");
            await RpcServerFraming.WriteMessageAsync(http.Response.BodyWriter, response, context.CancellationToken);
        }));
    }

    /// <summary>Maps a bidirectional streaming method; the handler returns when the call should end.</summary>
    /// <remarks>
    /// The request sequence ends when the client half-closes. When the handler returns, the call
    /// ends with OK (and the client's remaining requests are discarded).
    /// </remarks>
    public static IEndpointConventionBuilder MapDuplex<TRequest, TResponse>(
        this IEndpointRouteBuilder endpoints,
        string method,
        MessageParser<TRequest> requestParser,
        Func<IAsyncEnumerable<TRequest>, IRpcStreamWriter<TResponse>, RpcCallContext, Task> handler)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
    {
        ArgumentNullException.ThrowIfNull(requestParser);
        ArgumentNullException.ThrowIfNull(handler);

        var logger = CreateLogger(endpoints);
        return endpoints.MapPost(method, http => RpcServerCall.RunAsync(http, method, logger, context =>
        {
            var requests = RpcServerFraming.ReadAllAsync(http.Request.BodyReader, requestParser, MaxRequestMessageSize, context.CancellationToken);
            var writer = new RpcStreamWriter<TResponse>(http.Response.BodyWriter, context.CancellationToken);
            return handler(requests, writer, context);
        }));
    }

    /// <summary>Answers UNIMPLEMENTED for any other gRPC method, and serves gRPC server reflection.</summary>
    public static void MapRpcFallbackAndReflection(this IEndpointRouteBuilder endpoints, params Google.Protobuf.Reflection.FileDescriptor[] files)
    {
        var reflection = new RpcReflection(files);
        Task ServeReflection(IAsyncEnumerable<ServerReflectionRequest> requests, IRpcStreamWriter<ServerReflectionResponse> writer, RpcCallContext context) =>
            reflection.ServeAsync(requests, writer, context.CancellationToken);

        endpoints.MapDuplex<ServerReflectionRequest, ServerReflectionResponse>(RpcReflection.V1AlphaMethod, ServerReflectionRequest.Parser, ServeReflection);
        // v1 has the same messages as v1alpha under another package name, so one implementation
        // serves both; the wire format does not carry type names.
        endpoints.MapDuplex<ServerReflectionRequest, ServerReflectionResponse>(RpcReflection.V1Method, ServerReflectionRequest.Parser, ServeReflection);

        var logger = CreateLogger(endpoints);
        endpoints.MapPost("{**path}", http =>
        {
            // Only gRPC requests are ours; anything else is some other endpoint's missing route.
            if (!GrpcProtocol.IsGrpcContentType(http.Request.ContentType))
            {
                http.Response.StatusCode = StatusCodes.Status404NotFound;
                return Task.CompletedTask;
            }

            var method = http.Request.Path.Value ?? "/";
            return RpcServerCall.RunAsync(http, method, logger,
                _ => throw new RpcException(RpcStatusCode.Unimplemented, $"Method {method} is not implemented"));
        })
        // After every other route, whatever its pattern.
        .WithOrder(int.MaxValue);
    }

    private static ILogger CreateLogger(IEndpointRouteBuilder endpoints) =>
        endpoints.ServiceProvider.GetRequiredService<ILoggerFactory>().CreateLogger(typeof(RpcEndpoints).FullName!);
}
