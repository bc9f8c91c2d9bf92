using System.Buffers;
using System.IO.Pipelines;
using System.Runtime.CompilerServices;
using Farm.Contracts.Rpc;
using Google.Protobuf;

namespace Farm.Broker.Rpc;

/// <summary>Length-prefixed gRPC messages on Kestrel's request and response pipes.</summary>
internal static class RpcServerFraming
{
    /// <summary>Reads the next request message, or returns null when the client has half-closed.</summary>
    public static async ValueTask<T?> ReadMessageAsync<T>(PipeReader reader, MessageParser<T> parser, int maxMessageSize, CancellationToken cancellationToken)
        where T : IMessage<T>
    {
        while (true)
        {
            var result = await reader.ReadAsync(cancellationToken);
            var buffer = result.Buffer;
            if (TryReadFrame(ref buffer, maxMessageSize, out var payload))
            {
                try
                {
                    return parser.ParseFrom(payload);
                }
                catch (InvalidProtocolBufferException ex)
                {
                    throw new RpcException(RpcStatusCode.Internal, $"Failed to parse the request message: {ex.Message}", inner: ex);
                }
                finally
                {
                    // Only now: the payload points into the pipe's memory.
                    reader.AdvanceTo(buffer.Start);
                }
            }

            if (result.IsCompleted)
            {
                reader.AdvanceTo(buffer.End);
                return buffer.IsEmpty
                    ? default
                    : throw new RpcException(RpcStatusCode.Internal, "The request ended in the middle of a message.");
            }

            // Nothing consumed, everything examined: wake up only when more data arrives.
            reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    public static async IAsyncEnumerable<T> ReadAllAsync<T>(PipeReader reader, MessageParser<T> parser, int maxMessageSize, [EnumeratorCancellation] CancellationToken cancellationToken)
        where T : IMessage<T>
    {
        while (await ReadMessageAsync(reader, parser, maxMessageSize, cancellationToken) is { } message)
        {
            yield return message;
        }
    }

    public static async ValueTask WriteMessageAsync(PipeWriter writer, IMessage message, CancellationToken cancellationToken)
    {
        var size = message.CalculateSize();
        GrpcProtocol.WriteFrameHeader(writer.GetSpan(GrpcProtocol.FrameHeaderSize), size);
        writer.Advance(GrpcProtocol.FrameHeaderSize);
        message.WriteTo(writer);
        await writer.FlushAsync(cancellationToken);
    }

    private static bool TryReadFrame(ref ReadOnlySequence<byte> buffer, int maxMessageSize, out ReadOnlySequence<byte> payload)
    {
        payload = default;
        if (buffer.Length < GrpcProtocol.FrameHeaderSize)
        {
            return false;
        }

        Span<byte> header = stackalloc byte[GrpcProtocol.FrameHeaderSize];
        buffer.Slice(0, GrpcProtocol.FrameHeaderSize).CopyTo(header);
        // Checked before the message arrives, so an oversized one is refused without buffering it.
        var length = GrpcProtocol.ReadFrameHeader(header, maxMessageSize);
        if (buffer.Length < GrpcProtocol.FrameHeaderSize + length)
        {
            return false;
        }

        payload = buffer.Slice(GrpcProtocol.FrameHeaderSize, length);
        buffer = buffer.Slice(payload.End);
        return true;
    }
}

internal sealed class RpcStreamWriter<T>(PipeWriter writer, CancellationToken callToken) : IRpcStreamWriter<T>
    where T : IMessage<T>
{
    public async ValueTask WriteAsync(T message, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(message);
        // A slow reader blocks the flush; the call's end (deadline, client gone) must still release it.
        using var linked = cancellationToken.CanBeCanceled ? CancellationTokenSource.CreateLinkedTokenSource(callToken, cancellationToken) : null;
        await RpcServerFraming.WriteMessageAsync(writer, message, linked?.Token ?? callToken);
    }
}
