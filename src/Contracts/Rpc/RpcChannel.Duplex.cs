using Google.Protobuf;

namespace Farm.Contracts.Rpc;

public sealed partial class RpcChannel
{
    /// <summary>
    /// Opens a bidirectional streaming call. Dispose the call to cancel it. The call starts at
    /// once; connection failures surface from the first <c>WriteAsync</c> or from <c>ReadAllAsync</c>.
    /// </summary>
    public DuplexCall<TRequest, TResponse> Duplex<TRequest, TResponse>(string method, MessageParser<TResponse> responseParser, CallOptions options = default)
        where TRequest : IMessage<TRequest>
        where TResponse : IMessage<TResponse>
    {
        ArgumentNullException.ThrowIfNull(responseParser);

        var call = new RpcCall(this, options);
        var content = new DuplexRequestContent();
        var request = CreateRequest(method, content, call, options);
        return new DuplexCall<TRequest, TResponse>(_invoker, request, content, call, responseParser, Options.MaxReceiveMessageSize);
    }
}

/// <summary>
/// A request body that stays open while the caller writes: HttpClient hands it the HTTP/2 request
/// stream and it does not return until the caller half-closes (or the call ends), which is when
/// HttpClient sends END_STREAM.
/// </summary>
internal sealed class DuplexRequestContent : HttpContent
{
    private readonly TaskCompletionSource<Stream> _stream = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly TaskCompletionSource _completed = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>The request stream, once HttpClient has sent the request headers.</summary>
    public Task<Stream> Stream => _stream.Task;

    /// <summary>Half-closes the request.</summary>
    public void Complete() => _completed.TrySetResult();

    /// <summary>The call failed before the request body started: writers waiting for it fail too.</summary>
    public void Fail(Exception exception) => _stream.TrySetException(exception);

    protected override Task SerializeToStreamAsync(Stream stream, System.Net.TransportContext? context) =>
        SerializeToStreamAsync(stream, context, CancellationToken.None);

    protected override async Task SerializeToStreamAsync(Stream stream, System.Net.TransportContext? context, CancellationToken cancellationToken)
    {
        // HttpClient holds the request headers back until the body writes something; a receive
        // stream may write nothing for a while, and the server must see the call start now.
        await stream.FlushAsync(cancellationToken).ConfigureAwait(false);
        _stream.TrySetResult(stream);
        // HttpClient cancels this when the request is aborted; returning then frees the stream.
        await _completed.Task.WaitAsync(cancellationToken).ConfigureAwait(false);
    }

    protected override bool TryComputeLength(out long length)
    {
        length = -1;
        return false;
    }
}
