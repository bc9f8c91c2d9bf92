using System.Collections.Concurrent;
using System.Threading.Channels;
using Farm.Contracts;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;

namespace Farm.Client;

/// <summary>
/// The sends of a <see cref="FarmClient"/> to one endpoint (a gateway, or in redirect mode a
/// broker), over one SendStream instead of a Send call each: every sender of the client shares it,
/// and sends made while one is being written go together in the next request. A send on the stream
/// behaves as the Send call does (<see cref="Send"/> returns the same kind of call, failing with the
/// same <see cref="RpcException"/>), so retries, failover and errors work unchanged. The stream
/// opens on first use and again after it broke; the sends it had not answered fail as Unavailable,
/// for the retry policy to send again. A node that does not know SendStream (an older one) gets
/// Send calls from then on.
/// </summary>
internal sealed class SendStreamLink(Messaging.MessagingClient client, Metadata? headers, TimeProvider time) : IDisposable
{
    /// <summary>Bytes of sends packed into one request at most (one larger send goes alone).</summary>
    private const int MaxRequestBytes = 1024 * 1024;

    private readonly TimeProvider _time = time;

    private readonly Lock _gate = new();
    private OpenStream? _stream;
    private bool _unsupported;
    private bool _disposed;

    /// <summary>How often an open stream fails the sends whose deadline passed unanswered.</summary>
    internal static readonly TimeSpan DeadlineCheckInterval = TimeSpan.FromMilliseconds(100);

    private static readonly Task<Metadata> NoResponseHeaders = Task.FromResult(new Metadata());

    public AsyncUnaryCall<SendResponse> Send(SendRequest request, CallOptions options)
    {
        if (Volatile.Read(ref _unsupported))
        {
            return client.SendAsync(request, options);
        }
        // The answer's own task: no timer or waiting state machine per send. The stream fails the
        // send when its deadline passes (one timer per stream) or its token is cancelled.
        var pending = Current().Add(request, options);
        return new AsyncUnaryCall<SendResponse>(pending.Answer.Task, NoResponseHeaders, static () => Status.DefaultSuccess, static () => [], static () => { });
    }

    /// <summary>The open stream, opened if there is none.</summary>
    private OpenStream Current()
    {
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            if (_stream is null || _stream.IsBroken)
            {
                _stream = new OpenStream(this, client.SendStream(new CallOptions(headers)));
            }
            return _stream;
        }
    }

    /// <summary>The node answered UNIMPLEMENTED: it predates SendStream. The sends it had go by Send calls.</summary>
    private void FallBackToCalls(IEnumerable<PendingSend> sends)
    {
        Volatile.Write(ref _unsupported, true);
        foreach (var send in sends)
        {
            _ = CallInsteadAsync(send);
        }
    }

    private async Task CallInsteadAsync(PendingSend send)
    {
        try
        {
            send.Succeed(await client.SendAsync(send.Request, send.Options).ResponseAsync.ConfigureAwait(false));
        }
        catch (Exception e)
        {
            send.Fail(e);
        }
    }

    public void Dispose()
    {
        OpenStream? stream;
        lock (_gate)
        {
            _disposed = true;
            stream = _stream;
            _stream = null;
        }
        stream?.Break(new RpcException(new Status(StatusCode.Cancelled, "The client was closed.")));
    }

    private sealed class PendingSend(long id, SendRequest request, CallOptions options)
    {
        public long Id { get; } = id;

        public SendRequest Request { get; } = request;

        public CallOptions Options { get; } = options;

        /// <summary>When the send is given up unanswered (UTC); null for never.</summary>
        public DateTime? Deadline { get; } = options.Deadline is { } deadline && deadline != DateTime.MaxValue ? deadline.ToUniversalTime() : null;

        public TaskCompletionSource<SendResponse> Answer { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        /// <summary>The sender's token's callback, undone once the send has its outcome.</summary>
        public CancellationTokenRegistration Cancellation { get; set; }

        public void Succeed(SendResponse response)
        {
            Cancellation.Unregister();
            Answer.TrySetResult(response);
        }

        public void Fail(Exception error)
        {
            Cancellation.Unregister();
            Answer.TrySetException(error);
        }
    }

    /// <summary>One SendStream call: a loop writing queued sends, a loop reading answers.</summary>
    private sealed class OpenStream
    {
        private readonly SendStreamLink _link;
        private readonly AsyncDuplexStreamingCall<SendStreamRequest, SendStreamResponse> _call;
        private readonly ConcurrentDictionary<long, PendingSend> _pending = new();
        private readonly Channel<PendingSend> _outbox = Channel.CreateUnbounded<PendingSend>(new UnboundedChannelOptions { SingleReader = true });
        private long _nextId;
        private int _broken;

        private readonly ITimer _deadlines;

        public OpenStream(SendStreamLink link, AsyncDuplexStreamingCall<SendStreamRequest, SendStreamResponse> call)
        {
            _link = link;
            _call = call;
            _deadlines = link._time.CreateTimer(static s => ((OpenStream)s!).FailLateSends(), this, DeadlineCheckInterval, DeadlineCheckInterval);
            _ = WriteLoopAsync();
            _ = ReadLoopAsync();
        }

        public bool IsBroken => Volatile.Read(ref _broken) != 0;

        public PendingSend Add(SendRequest request, CallOptions options)
        {
            var send = new PendingSend(Interlocked.Increment(ref _nextId), request, options);
            _pending[send.Id] = send;
            if (options.CancellationToken.CanBeCanceled)
            {
                send.Cancellation = options.CancellationToken.UnsafeRegister(static s =>
                {
                    var (stream, cancelled) = ((OpenStream, PendingSend))s!;
                    stream.GiveUp(cancelled, new RpcException(new Status(StatusCode.Cancelled, "The send was cancelled.")));
                }, (this, send));
            }
            if (IsBroken || !_outbox.Writer.TryWrite(send))
            {
                // Broke a moment ago: fail it as the others were (the retry opens a new stream).
                Fail(send, StreamLinks.Unavailable("The send stream broke."));
            }
            return send;
        }

        /// <summary>
        /// Fails the sends whose deadline passed unanswered (DEADLINE_EXCEEDED, as a call's would): an
        /// answer that comes later goes nowhere. A send not yet written is not written at all.
        /// </summary>
        private void FailLateSends()
        {
            if (_pending.IsEmpty)
            {
                return;
            }
            var now = _link._time.GetUtcNow().UtcDateTime;
            foreach (var (_, send) in _pending)
            {
                if (send.Deadline <= now)
                {
                    GiveUp(send, new RpcException(new Status(StatusCode.DeadlineExceeded, "The send was not answered before its deadline.")));
                }
            }
        }

        /// <summary>The sender stopped waiting (its deadline or its token): its answer, if it comes, goes nowhere.</summary>
        private void GiveUp(PendingSend send, RpcException error)
        {
            if (_pending.TryRemove(send.Id, out _))
            {
                send.Fail(error);
            }
        }

        private async Task WriteLoopAsync()
        {
            try
            {
                var reader = _outbox.Reader;
                while (await reader.WaitToReadAsync().ConfigureAwait(false))
                {
                    var request = new SendStreamRequest();
                    var bytes = 0;
                    while (bytes < MaxRequestBytes && reader.TryRead(out var send))
                    {
                        if (!_pending.ContainsKey(send.Id))
                        {
                            continue; // given up on before it was written
                        }
                        var streamed = new StreamedSend { Id = send.Id, Send = send.Request };
                        if (send.Options.Deadline is { } deadline && deadline != DateTime.MaxValue)
                        {
                            var left = deadline - _link._time.GetUtcNow().UtcDateTime;
                            streamed.Timeout = Duration.FromTimeSpan(left > TimeSpan.Zero ? left : TimeSpan.Zero);
                        }
                        bytes += streamed.CalculateSize();
                        request.Sends.Add(streamed);
                    }
                    if (request.Sends.Count > 0)
                    {
                        await _call.RequestStream.WriteAsync(request).ConfigureAwait(false);
                    }
                }
            }
            catch (Exception e)
            {
                Break(e as RpcException ?? StreamLinks.Unavailable($"The send stream broke: {e.Message}"));
            }
        }

        private async Task ReadLoopAsync()
        {
            try
            {
                while (await _call.ResponseStream.MoveNext(CancellationToken.None).ConfigureAwait(false))
                {
                    foreach (var result in _call.ResponseStream.Current.Results)
                    {
                        if (!_pending.TryRemove(result.Id, out var send))
                        {
                            continue;
                        }
                        if (result.Failure is { } failure)
                        {
                            send.Fail(failure.ToRpcException());
                        }
                        else
                        {
                            send.Succeed(result.Response ?? new SendResponse());
                        }
                    }
                }
                // The node ended the stream (it is stopping): it answered every send it read.
                Break(StreamLinks.Unavailable("The node ended the send stream."));
            }
            catch (RpcException e) when (e.StatusCode == StatusCode.Unimplemented)
            {
                MarkBroken();
                _link.FallBackToCalls(_pending.TakeAll());
            }
            catch (Exception e)
            {
                Break(e is RpcException rpc ? rpc.AsUnavailableWhenBroken() : StreamLinks.Unavailable($"The send stream broke: {e.Message}"));
            }
        }

        /// <summary>Ends the stream: every send not answered fails with <paramref name="error"/>.</summary>
        public void Break(RpcException error)
        {
            MarkBroken();
            foreach (var send in _pending.TakeAll())
            {
                Fail(send, error);
            }
        }

        private void MarkBroken()
        {
            if (Interlocked.Exchange(ref _broken, 1) == 0)
            {
                _deadlines.Dispose();
                _outbox.Writer.TryComplete();
                _call.Dispose();
            }
        }

        private void Fail(PendingSend send, RpcException error)
        {
            _pending.TryRemove(send.Id, out _);
            send.Fail(error);
        }
    }
}
