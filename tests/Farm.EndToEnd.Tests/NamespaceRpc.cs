using System.Net;
using System.Net.Sockets;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;
using Grpc.Net.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>How a gRPC call made from inside a namespace ended: a response, or a status and the farm-error trailer.</summary>
internal sealed record RpcOutcome<T>(T? Response, StatusCode Status, string? FarmError, string Message)
    where T : class
{
    public bool Succeeded => Status == StatusCode.OK && Response is not null;

    public override string ToString() => Succeeded ? "OK" : $"status {Status} {FarmError ?? "(no farm-error)"}: {Message}";
}

/// <summary>
/// A unary gRPC call to a node from a client standing inside a namespace (next to a cut-off node):
/// a standard gRPC channel whose sockets are opened inside the namespace.
/// </summary>
internal static class NamespaceRpc
{
    public static async Task<RpcOutcome<TResponse>> UnaryAsync<TResponse>(
        NetworkNamespaces network, int fromNode, string endpoint, TimeSpan timeout,
        Func<Messaging.MessagingClient, CallOptions, AsyncUnaryCall<TResponse>> call)
        where TResponse : class
    {
        var handler = new SocketsHttpHandler
        {
            UseProxy = false,
            ConnectCallback = async (context, cancellationToken) =>
            {
                var target = new IPEndPoint(IPAddress.Parse(context.DnsEndPoint.Host), context.DnsEndPoint.Port);
                return new NetworkStream(await network.ConnectInsideAsync(fromNode, target, cancellationToken), ownsSocket: true);
            },
        };
        using var channel = GrpcChannel.ForAddress(endpoint, new GrpcChannelOptions { HttpHandler = handler, DisposeHttpClient = true, MaxReceiveMessageSize = FarmChannels.MaxMessageSize });
        try
        {
            using var pending = call(new Messaging.MessagingClient(channel), new CallOptions(deadline: DateTime.UtcNow + timeout));
            return new RpcOutcome<TResponse>(await pending.ResponseAsync, StatusCode.OK, null, "");
        }
        catch (RpcException e)
        {
            return new RpcOutcome<TResponse>(null, e.StatusCode, e.FarmError(), e.Status.Detail);
        }
    }
}
