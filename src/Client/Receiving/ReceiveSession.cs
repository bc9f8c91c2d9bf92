using System.Collections.Concurrent;
using System.Threading.Channels;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Client;

/// <summary>
/// The receive links of a <see cref="FarmClient"/> to one endpoint (a gateway, or in redirect mode
/// a broker), over one ReceiveSession stream instead of a Receive call each. Every receiver of the
/// client shares it; frames of different links that are ready together go in one request. A link
/// looks to <see cref="ReceiveLink"/> exactly like a Receive call (<see cref="Receive"/> returns
/// the same kind of call, ending with the same <see cref="RpcException"/>), so reopening, failover
/// and settling on the stream work unchanged. The session opens on first use and again after it
/// broke; its links then fail as Unavailable and their receivers reopen them. A node that does not
/// know ReceiveSession (an older one) gets Receive calls from then on, the links already asked for
/// moved onto calls of their own.
/// </summary>
internal sealed class ReceiveSession(Messaging.MessagingClient client, Metadata? headers) : IDisposable
{
    /// <summary>Bytes of frames packed into one request at most (one larger frame goes alone).</summary>
    private const int MaxRequestBytes = 1024 * 1024;

    private readonly Lock _gate = new();
    private OpenSession? _session;
    private bool _unsupported;
    private bool _disposed;

    private Messaging.MessagingClient Client => client;

    public AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> Receive(CallOptions options)
    {
        if (Volatile.Read(ref _unsupported))
        {
            return client.Receive(options);
        }
        var link = Current().Attach(options);
        return new AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>(link, link, Task.FromResult(new Metadata()), link.GetStatus, link.GetTrailers, link.Dispose);
    }

    /// <summary>The open session, opened if there is none.</summary>
    private OpenSession Current()
    {
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            if (_session is null || _session.IsBroken)
            {
                _session = new OpenSession(this, client.ReceiveSession(new CallOptions(headers)));
            }
            return _session;
        }
    }

    public void Dispose()
    {
        OpenSession? session;
        lock (_gate)
        {
            _disposed = true;
            session = _session;
            _session = null;
        }
        session?.Break(new RpcException(new Status(StatusCode.Cancelled, "The client was closed.")));
    }

    /// <summary>One ReceiveSession call: the links' frames go out through a <see cref="FrameBatcher{TFrame}"/>, a loop hands out the node's.</summary>
    private sealed class OpenSession
    {
        private readonly ReceiveSession _owner;
        private readonly AsyncDuplexStreamingCall<ReceiveSessionRequest, ReceiveSessionResponse> _call;
        private readonly ConcurrentDictionary<long, SessionLink> _links = new();
        private readonly FrameBatcher<LinkRequest> _frames;
        private long _nextId;
        private int _broken;

        public OpenSession(ReceiveSession owner, AsyncDuplexStreamingCall<ReceiveSessionRequest, ReceiveSessionResponse> call)
        {
            _owner = owner;
            _call = call;
            _frames = new FrameBatcher<LinkRequest>(WriteBatchAsync, SizeOf, MaxRequestBytes);
            _ = ReadLoopAsync();
        }

        public bool IsBroken => Volatile.Read(ref _broken) != 0;

        public SessionLink Attach(CallOptions options)
        {
            var link = new SessionLink(this, Interlocked.Increment(ref _nextId), options);
            _links[link.Id] = link;
            if (options.CancellationToken.IsCancellationRequested)
            {
                // Cancelled before it was attached: its detach may have run before it was listed.
                Forget(link.Id);
            }
            if (IsBroken)
            {
                // Broke a moment ago: the link fails as the others did (its receiver reopens it on a new session).
                Forget(link.Id);
                link.End(StreamLinks.Unavailable("The receive session broke."));
            }
            return link;
        }

        /// <summary>Writes a frame; throws (UNAVAILABLE) when the session is gone.</summary>
        public async Task WriteAsync(LinkRequest frame)
        {
            try
            {
                await _frames.WriteAsync(frame).ConfigureAwait(false);
            }
            catch (Exception e)
            {
                throw e as RpcException ?? StreamLinks.Unavailable($"The receive session broke: {e.Message}");
            }
        }

        /// <summary>Queues a frame without waiting for it; false when the session is gone.</summary>
        public bool Post(LinkRequest frame) => !IsBroken && _frames.Post(frame);

        public void Forget(long id) => _links.TryRemove(id, out _);

        // Only settlements weigh anything; credit and detaches are a few bytes.
        private static int SizeOf(LinkRequest frame) => frame.Request?.KindCase == ReceiveRequest.KindOneofCase.Settle ? frame.CalculateSize() : 16;

        private async Task WriteBatchAsync(IReadOnlyList<LinkRequest> frames)
        {
            // Every request says so (two bytes): the node may read any of them first.
            var request = new ReceiveSessionRequest { AcceptsSharedMessages = true };
            request.Links.AddRange(frames);
            try
            {
                await _call.RequestStream.WriteAsync(request).ConfigureAwait(false);
            }
            catch (Exception e)
            {
                Break(e as RpcException ?? StreamLinks.Unavailable($"The receive session broke: {e.Message}"));
                throw;
            }
        }

        private async Task ReadLoopAsync()
        {
            try
            {
                while (await _call.ResponseStream.MoveNext(CancellationToken.None).ConfigureAwait(false))
                {
                    // A message delivered to several links comes once: each delivery gets that one (read-only) message.
                    SharedMessages.Resolve(_call.ResponseStream.Current);
                    foreach (var frame in _call.ResponseStream.Current.Links)
                    {
                        if (!_links.TryGetValue(frame.Link, out var link))
                        {
                            continue; // detached: nobody waits for it
                        }
                        if (frame.Response is { } response)
                        {
                            link.Deliver(response);
                        }
                        if (frame.Ended)
                        {
                            Forget(link.Id);
                            link.End(frame.Failure?.ToRpcException());
                        }
                    }
                }
                // The node ended the session (it is stopping): its links reopen, elsewhere or later.
                Break(StreamLinks.Unavailable("The node ended the receive session."));
            }
            catch (RpcException e) when (e.StatusCode == StatusCode.Unimplemented)
            {
                // An older node: every link asked for so far becomes a Receive call of its own.
                Volatile.Write(ref _owner._unsupported, true);
                MarkBroken();
                foreach (var link in _links.TakeAll())
                {
                    link.FallBack(_owner.Client);
                }
            }
            catch (Exception e)
            {
                Break(e is RpcException rpc ? rpc.AsUnavailableWhenBroken() : StreamLinks.Unavailable($"The receive session broke: {e.Message}"));
            }
        }

        /// <summary>Ends the session: every link fails with <paramref name="error"/>.</summary>
        public void Break(RpcException error)
        {
            MarkBroken();
            foreach (var link in _links.TakeAll())
            {
                link.End(error);
            }
        }

        private void MarkBroken()
        {
            if (Interlocked.Exchange(ref _broken, 1) == 0)
            {
                _frames.Fail(StreamLinks.Unavailable("The receive session broke."));
                _call.Dispose();
            }
        }

    }

    /// <summary>
    /// One link, as the Receive call it stands for: its request stream queues frames on the
    /// session, its response stream reads what the session handed it.
    /// </summary>
    private sealed class SessionLink : IClientStreamWriter<ReceiveRequest>, IAsyncStreamReader<ReceiveResponse>
    {
        private readonly OpenSession _session;
        private readonly CallOptions _options;
        // Synchronous continuations: the receiver's pump takes each response on the session's read
        // loop, without a hand-over to another thread (it only buffers it and reads again).
        private readonly Channel<ReceiveResponse> _inbox = Channel.CreateUnbounded<ReceiveResponse>(
            new UnboundedChannelOptions { SingleReader = true, SingleWriter = true, AllowSynchronousContinuations = true });
        private readonly CancellationTokenRegistration _cancelled;
        private readonly Lock _gate = new();
        // What the link asked for before the node answered anything: replayed on a Receive call if
        // the node turns out not to know sessions. Dropped at the first answer.
        private List<ReceiveRequest>? _unanswered = [];
        private AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? _fallback;
        private Task _fallbackReady = Task.CompletedTask;
        private Status? _status;
        // The node's trailers with the failure that ended the link ("farm-error", "farm-owner"): a
        // link's end is read as a Receive call's would be, SERVICE_BUSY as busy, not by status alone.
        private Metadata _trailers = Metadata.Empty;

        public SessionLink(OpenSession session, long id, CallOptions options)
        {
            _session = session;
            _options = options;
            Id = id;
            _cancelled = options.CancellationToken.Register(() => Detach(new Status(StatusCode.Cancelled, "The receive link was cancelled.")));
        }

        public long Id { get; }

        public ReceiveResponse Current { get; private set; } = null!;

        public WriteOptions? WriteOptions { get; set; }

        public Status GetStatus() => _fallback?.GetStatus() ?? _status ?? throw new InvalidOperationException("The receive link has not ended.");

        public Metadata GetTrailers() => _fallback?.GetTrailers() ?? _trailers;

        public Task WriteAsync(ReceiveRequest message) => WriteAsync(message, CancellationToken.None);

        public async Task WriteAsync(ReceiveRequest message, CancellationToken cancellationToken)
        {
            AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? fallback;
            lock (_gate)
            {
                fallback = _fallback;
                if (fallback is null)
                {
                    if (_status is { } ended)
                    {
                        throw new RpcException(ended, _trailers);
                    }
                    _unanswered?.Add(message);
                }
            }
            if (fallback is null)
            {
                await _session.WriteAsync(new LinkRequest { Link = Id, Request = message }).ConfigureAwait(false);
                return;
            }
            await _fallbackReady.ConfigureAwait(false);
            await fallback.RequestStream.WriteAsync(message, cancellationToken).ConfigureAwait(false);
        }

        public async Task CompleteAsync()
        {
            AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? fallback;
            lock (_gate)
            {
                fallback = _fallback;
                if (fallback is null)
                {
                    _session.Post(new LinkRequest { Link = Id, HalfClose = true });
                    return;
                }
            }
            await _fallbackReady.ConfigureAwait(false);
            await fallback.RequestStream.CompleteAsync().ConfigureAwait(false);
        }

        public async Task<bool> MoveNext(CancellationToken cancellationToken)
        {
            if (Volatile.Read(ref _fallback) is null)
            {
                try
                {
                    if (await _inbox.Reader.WaitToReadAsync(cancellationToken).ConfigureAwait(false) && _inbox.Reader.TryRead(out var response))
                    {
                        Current = response;
                        return true;
                    }
                }
                catch (ChannelClosedException)
                {
                    // Ended with an error: see below.
                }
                if (Volatile.Read(ref _fallback) is null)
                {
                    var status = _status ?? new Status(StatusCode.Unavailable, "The receive link ended.");
                    return status.StatusCode == StatusCode.OK ? false : throw new RpcException(status, _trailers);
                }
            }
            // Moved onto a Receive call of its own (the node does not know sessions).
            var call = _fallback!;
            if (!await call.ResponseStream.MoveNext(cancellationToken).ConfigureAwait(false))
            {
                return false;
            }
            Current = call.ResponseStream.Current;
            return true;
        }

        /// <summary>A response of the node for this link.</summary>
        public void Deliver(ReceiveResponse response)
        {
            if (Volatile.Read(ref _unanswered) is not null)
            {
                lock (_gate)
                {
                    _unanswered = null;
                }
            }
            _inbox.Writer.TryWrite(response);
        }

        /// <summary>The node ended the link (<paramref name="error"/> null: cleanly), or the session broke.</summary>
        public void End(RpcException? error)
        {
            lock (_gate)
            {
                if (_status is null)
                {
                    _status = error?.Status ?? Status.DefaultSuccess;
                    _trailers = error?.Trailers ?? Metadata.Empty;
                }
            }
            _inbox.Writer.TryComplete();
            _cancelled.Dispose();
        }

        /// <summary>The session is not known to the node: the link goes on as a Receive call, asked for what it asked the session.</summary>
        public void FallBack(Messaging.MessagingClient client)
        {
            List<ReceiveRequest> replay;
            lock (_gate)
            {
                if (_status is not null)
                {
                    return;
                }
                replay = _unanswered ?? [];
                _unanswered = null;
                var call = client.Receive(_options);
                _fallbackReady = ReplayAsync(call, replay);
                Volatile.Write(ref _fallback, call);
            }
            // Wakes a reader waiting on the session's inbox: it goes on with the call.
            _inbox.Writer.TryComplete();
        }

        private static async Task ReplayAsync(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call, List<ReceiveRequest> replay)
        {
            try
            {
                foreach (var request in replay)
                {
                    await call.RequestStream.WriteAsync(request).ConfigureAwait(false);
                }
            }
            catch (Exception)
            {
                // The call broke: its response stream says how.
            }
        }

        /// <summary>The receiver is done with the link (the call is disposed).</summary>
        public void Dispose() => Detach(new Status(StatusCode.Cancelled, "The receive link was closed."));

        private void Detach(Status status)
        {
            AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>? fallback;
            bool wasOpen;
            lock (_gate)
            {
                fallback = _fallback;
                wasOpen = _status is null;
                _status ??= status;
            }
            if (fallback is not null)
            {
                fallback.Dispose();
                return;
            }
            if (wasOpen)
            {
                _session.Forget(Id);
                _session.Post(new LinkRequest { Link = Id, Detach = true });
            }
            _inbox.Writer.TryComplete();
            _cancelled.Dispose();
        }
    }
}
