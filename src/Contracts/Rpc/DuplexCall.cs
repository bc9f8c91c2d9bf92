using System.Runtime.CompilerServices;
using Google.Protobuf;

namespace Farm.Contracts.Rpc;

/// <summary>A bidirectional streaming call in progress.</summary>
/// <remarks>
/// One writer and one reader may run concurrently. Cancelling the token passed to
/// <see cref="WriteAsync"/> or <see cref="ReadAllAsync"/> cancels the whole call (HTTP/2 cannot
/// abandon half a message) and throws <see cref="OperationCanceledException"/>.
/// </remarks>
public sealed class DuplexCall<TRequest, TResponse> : IAsyncDisposable
    where TRequest : IMessage<TRequest>
    where TResponse : IMessage<TResponse>
{
    private readonly DuplexRequestContent _content;
    private readonly RpcCall _call;
    private readonly MessageParser<TResponse> _parser;
    private readonly int _maxReceiveMessageSize;
    private readonly HttpRequestMessage _request;
    private readonly Task<HttpResponseMessage> _response;

    // Set once the server's final status is known; later writes report it.
    private Exception? _ended;
    private bool _writesCompleted;
    private int _readStarted;
    private int _disposed;

    internal DuplexCall(HttpMessageInvoker invoker, HttpRequestMessage request, DuplexRequestContent content, RpcCall call, MessageParser<TResponse> parser, int maxReceiveMessageSize)
    {
        _request = request;
        _content = content;
        _call = call;
        _parser = parser;
        _maxReceiveMessageSize = maxReceiveMessageSize;
        _response = SendAsync(invoker, request);
    }

    /// <summary>Writes one request message. Not thread-safe: one writer at a time.</summary>
    public async ValueTask WriteAsync(TRequest message, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(message);
        if (_writesCompleted)
        {
            throw new InvalidOperationException("The request stream has already been completed.");
        }

        if (_ended is not null)
        {
            throw _ended;
        }

        var size = message.CalculateSize();
        using var linked = cancellationToken.CanBeCanceled ? CancellationTokenSource.CreateLinkedTokenSource(_call.Token, cancellationToken) : null;
        var token = linked?.Token ?? _call.Token;
        try
        {
            var stream = await _content.Stream.WaitAsync(token).ConfigureAwait(false);
            await GrpcFraming.WriteMessageAsync(stream, message, size, token).ConfigureAwait(false);
            // Each message is sent now, not when some buffer fills: a credit request must not wait.
            await stream.FlushAsync(token).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is not RpcException)
        {
            // When the server has already ended the call, its status says more than a broken stream.
            throw _ended ?? _call.Translate(ex, cancellationToken);
        }
    }

    /// <summary>Half-closes the request stream.</summary>
    public ValueTask CompleteAsync()
    {
        _writesCompleted = true;
        _content.Complete();
        return ValueTask.CompletedTask;
    }

    /// <summary>
    /// The response messages. Ends when the server closes the stream with OK; throws
    /// <see cref="RpcException"/> when it ends with another status or the connection drops.
    /// </summary>
    public async IAsyncEnumerable<TResponse> ReadAllAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        if (Interlocked.Exchange(ref _readStarted, 1) != 0)
        {
            throw new InvalidOperationException("The responses can be read only once.");
        }

        using var linked = cancellationToken.CanBeCanceled ? CancellationTokenSource.CreateLinkedTokenSource(_call.Token, cancellationToken) : null;
        var token = linked?.Token ?? _call.Token;

        var body = await OpenResponseAsync(token, cancellationToken).ConfigureAwait(false);
        if (body is null)
        {
            yield break;
        }

        while (await ReadNextAsync(body, token, cancellationToken).ConfigureAwait(false) is { } message)
        {
            yield return message;
        }
    }

    /// <summary>Cancels the call if it is still running.</summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        // Cancelling after the server has ended the call is harmless: it only resets our half of
        // the stream, which is how a client says it will send nothing more.
        _call.Cancel();
        _content.Complete();
        try
        {
            using var response = await _response.ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The call's failure was reported to the reader, or nobody was listening; either way
            // disposing must not throw it again.
        }

        _request.Dispose();
        _call.Dispose();
    }

    private async Task<HttpResponseMessage> SendAsync(HttpMessageInvoker invoker, HttpRequestMessage request)
    {
        try
        {
            return await invoker.SendAsync(request, _call.Token).ConfigureAwait(false);
        }
        catch (Exception ex)
        {
            var error = _call.Translate(ex);
            End(error);
            throw error;
        }
    }

    /// <summary>The response body, or null when the server answered trailers-only with OK.</summary>
    private async Task<Stream?> OpenResponseAsync(CancellationToken token, CancellationToken readerToken)
    {
        try
        {
            var response = await _response.WaitAsync(token).ConfigureAwait(false);
            if (GrpcResponse.IsTrailersOnly(response, out var error))
            {
                End((Exception?)error ?? CallEndedOk());
                return error is null ? null : throw error;
            }

            return await response.Content.ReadAsStreamAsync(token).ConfigureAwait(false);
        }
        catch (Exception ex)
        {
            var error = _call.Translate(ex, readerToken);
            End(error);
            throw error;
        }
    }

    /// <summary>The next response message, or null when the server ended the call with OK.</summary>
    private async Task<TResponse?> ReadNextAsync(Stream body, CancellationToken token, CancellationToken readerToken)
    {
        try
        {
            var message = await GrpcFraming.ReadMessageAsync(body, _parser, _maxReceiveMessageSize, token).ConfigureAwait(false);
            if (message is not null)
            {
                return message;
            }

            var error = GrpcResponse.GetFinalStatus(_response.Result);
            End((Exception?)error ?? CallEndedOk());
            return error is null ? default : throw error;
        }
        catch (Exception ex)
        {
            var error = _call.Translate(ex, readerToken);
            End(error);
            throw error;
        }
    }

    private void End(Exception error)
    {
        Interlocked.CompareExchange(ref _ended, error, null);
        // A writer still waiting for the request stream would otherwise wait forever.
        _content.Fail(error);
    }

    private static InvalidOperationException CallEndedOk() =>
        new("The call has ended: the server closed it with status OK.");
}
