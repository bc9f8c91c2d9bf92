using Google.Protobuf;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Routing;

namespace Farm.Broker.Rpc;

/// <summary>
/// Maps gRPC methods onto ASP.NET Core endpoints (HTTP/2, application/grpc framing, grpc-status
/// trailers, grpc-timeout deadlines). Handlers fail a call by throwing
/// <see cref="Farm.Contracts.Rpc.RpcException"/>; any other exception becomes INTERNAL and is logged.
/// </summary>
public static class RpcEndpoints
{
    public static IEndpointConventionBuilder MapUnary<TRequest, TResponse>(
        this IEndpointRouteBuilder endpoints,
        string method,
        MessageParser<TRequest> requestParser,
        Func<TRequest, RpcCallContext, Task<TResponse>> handler)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
        => throw new NotImplementedException();

    /// <summary>Maps a bidirectional streaming method; the handler returns when the call should end.</summary>
    public static IEndpointConventionBuilder MapDuplex<TRequest, TResponse>(
        this IEndpointRouteBuilder endpoints,
        string method,
        MessageParser<TRequest> requestParser,
        Func<IAsyncEnumerable<TRequest>, IRpcStreamWriter<TResponse>, RpcCallContext, Task> handler)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
        => throw new NotImplementedException();

    /// <summary>Answers UNIMPLEMENTED for any other gRPC method, and serves gRPC server reflection.</summary>
    public static void MapRpcFallbackAndReflection(this IEndpointRouteBuilder endpoints, params Google.Protobuf.Reflection.FileDescriptor[] files)
        => throw new NotImplementedException();
}
