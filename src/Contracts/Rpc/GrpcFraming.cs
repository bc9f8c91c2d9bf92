using System.Buffers;
using Google.Protobuf;

namespace Farm.Contracts.Rpc;

/// <summary>Length-prefixed gRPC messages on a client's HTTP streams.</summary>
internal static class GrpcFraming
{
    public static byte[] Frame(IMessage message)
    {
        var size = message.CalculateSize();
        var frame = new byte[GrpcProtocol.FrameHeaderSize + size];
        GrpcProtocol.WriteFrameHeader(frame, size);
        message.WriteTo(frame.AsSpan(GrpcProtocol.FrameHeaderSize));
        return frame;
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
