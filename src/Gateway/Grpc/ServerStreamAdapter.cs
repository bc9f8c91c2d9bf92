using Farm.Broker.Messaging;
using Grpc.Core;

namespace Farm.Gateway.Grpc;

/// <summary>A gRPC response stream as the broker's <see cref="IResponseStream{T}"/>.</summary>
internal sealed class ServerStreamAdapter<T>(IServerStreamWriter<T> stream) : IResponseStream<T>
{
    public Task WriteAsync(T message, CancellationToken cancellationToken) => stream.WriteAsync(message, cancellationToken);
}
