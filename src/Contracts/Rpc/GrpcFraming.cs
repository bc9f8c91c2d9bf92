using System.Buffers;
using Google.Protobuf;

namespace Farm.Contracts.Rpc;

/// <summary>Length-prefixed gRPC messages on a client's HTTP streams.</summary>
internal static class GrpcFraming
{
    /// <summary>
    /// Writes one framed message. The frame lives in a pooled buffer only for the write: a batch
    /// of a hundred 1 KB messages would otherwise land on the large object heap on every call.
    /// </summary>
    public static async ValueTask WriteMessageAsync(Stream stream, IMessage message, int size, CancellationToken cancellationToken)
    {
        var length = GrpcProtocol.FrameHeaderSize + size;
        var buffer = ArrayPool<byte>.Shared.Rent(length);
        try
        {
            GrpcProtocol.WriteFrameHeader(buffer, size);
            message.WriteTo(buffer.AsSpan(GrpcProtocol.FrameHeaderSize, size));
            await stream.WriteAsync(buffer.AsMemory(0, length), cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }

    /// <summary>Reads the next message, or returns null at the end of the stream.</summary>
    public static async ValueTask<T?> ReadMessageAsync<T>(Stream stream, MessageParser<T> parser, int maxMessageSize, CancellationToken cancellationToken)
        where T : IMessage<T>
    {
        var header = new byte[GrpcProtocol.FrameHeaderSize];
        var read = await stream.ReadAtLeastAsync(header, header.Length, throwOnEndOfStream: false, cancellationToken).ConfigureAwait(false);
        if (read == 0)
        {
            return default;
        }

        if (read < header.Length)
        {
            throw new RpcException(RpcStatusCode.Internal, "The response ended in the middle of a message header.");
        }

        var length = GrpcProtocol.ReadFrameHeader(header, maxMessageSize);
        var buffer = ArrayPool<byte>.Shared.Rent(length);
        try
        {
            await stream.ReadExactlyAsync(buffer.AsMemory(0, length), cancellationToken).ConfigureAwait(false);
            return parser.ParseFrom(buffer.AsSpan(0, length));
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(buffer);
        }
    }
}
