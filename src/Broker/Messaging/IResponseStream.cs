namespace Farm.Broker.Messaging;

/// <summary>
/// Where a streaming operation writes its answers: the transport's response stream, adapted by
/// the gateway. Not thread-safe: one write at a time, as gRPC streams require.
/// </summary>
public interface IResponseStream<in T>
{
    Task WriteAsync(T message, CancellationToken cancellationToken);
}
