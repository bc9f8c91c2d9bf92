using System.Net;
using Google.Protobuf;

namespace Farm.Contracts.Rpc;

/// <summary>The body of a unary call: one framed message, serialized straight into the request stream.</summary>
internal sealed class GrpcMessageContent(IMessage message) : HttpContent
{
    private readonly int _size = message.CalculateSize();

    protected override Task SerializeToStreamAsync(Stream stream, TransportContext? context) =>
        SerializeToStreamAsync(stream, context, CancellationToken.None);

    protected override Task SerializeToStreamAsync(Stream stream, TransportContext? context, CancellationToken cancellationToken) =>
        GrpcFraming.WriteMessageAsync(stream, message, _size, cancellationToken).AsTask();

    protected override bool TryComputeLength(out long length)
    {
        length = GrpcProtocol.FrameHeaderSize + _size;
        return true;
    }
}
