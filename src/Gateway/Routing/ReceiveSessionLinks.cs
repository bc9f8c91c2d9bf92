using System.Threading.Channels;
using Farm.Broker.Messaging;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;

namespace Farm.Gateway.Routing;

/// <summary>
/// The links of one receive session on the node side: which are open, the requests each has been
/// sent, and the <see cref="FrameBatcher{TFrame}"/> that puts every link's frames on the session's
/// response stream, all frames ready together in one response. A link's write returns once its
/// frame is on the stream (or failed), as a Receive call's write does, so an undelivered peek-lock
/// message is released.
/// </summary>
internal sealed class ReceiveSessionLinks : IDisposable
{
    /// <summary>Bytes of frames packed into one response at most (one larger frame goes alone).</summary>
    private const int MaxResponseBytes = 4 * 1024 * 1024;

    private readonly IServerStreamWriter<ReceiveSessionResponse> _responses;
    private readonly int _maxLinks;
    private readonly CancellationToken _callToken;
    // Cancels every link: the call ended, or the response stream broke.
    private readonly CancellationTokenSource _cancelLinks;
    // Ends the session's reading: the node is stopping and no link is left.
    private readonly CancellationTokenSource _ending;
    private readonly FrameBatcher<LinkResponse> _frames;

    private readonly Lock _gate = new();
    private readonly Dictionary<long, Link> _links = [];
    private readonly TaskCompletionSource _allEnded = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private bool _stopping;
    private bool _closing;

    public ReceiveSessionLinks(IServerStreamWriter<ReceiveSessionResponse> responses, int maxLinks, CancellationToken callToken)
    {
        _responses = responses;
        _maxLinks = maxLinks;
        _callToken = callToken;
        _cancelLinks = CancellationTokenSource.CreateLinkedTokenSource(callToken);
        _ending = CancellationTokenSource.CreateLinkedTokenSource(callToken);
        _frames = new FrameBatcher<LinkResponse>(WriteBatchAsync, SizeOf, MaxResponseBytes);
    }

    /// <summary>
    /// The client reads shared messages (it said so in a request): a message this session delivers
    /// to several links in one response goes out once (<see cref="SharedMessages"/>).
    /// </summary>
    public bool SharesMessages { get; set; }

    /// <summary>A write to the session's response stream failed: the stream is gone, nothing more reaches the client.</summary>
    public bool StreamBroken => _frames.Failure is not null;

    /// <summary>Cancelled when the session should stop reading: the call ended, or the node is stopping with no link left.</summary>
    public CancellationToken Ending => _ending.Token;

    /// <summary>
    /// Hands one frame of the client to its link. Returns the link when the frame opened it (the
    /// caller runs it); a frame that cannot open one is answered by the link's end.
    /// </summary>
    public Link? Dispatch(LinkRequest frame)
    {
        Link? link;
        lock (_gate)
        {
            _links.TryGetValue(frame.Link, out link);
        }
        if (link is not null)
        {
            link.Take(frame);
            return null;
        }
        if (frame.Request is null)
        {
            // A detach or half-close of a link that already ended: nothing to do.
            return null;
        }
        if (frame.Request.KindCase != ReceiveRequest.KindOneofCase.Open)
        {
            // Credit or a settlement for a link that is not open: it ended a moment ago (the client
            // learns that from its end frame), or it never was.
            Refuse(frame.Link, FarmErrorInterceptor.Known(Broker.FarmErrors.Invalid($"Link {frame.Link} is not open: a link's first request must be 'open'."))!);
            return null;
        }
        lock (_gate)
        {
            if (_stopping || _closing)
            {
                link = null;
            }
            else if (_links.Count >= _maxLinks)
            {
                link = null;
            }
            else
            {
                link = new Link(this, frame.Link, _cancelLinks.Token).Started();
                _links.Add(frame.Link, link);
            }
        }
        if (link is null)
        {
            Refuse(frame.Link, _stopping || _closing
                ? new RpcException(new Status(StatusCode.Unavailable, "This node is stopping: open the link elsewhere."))
                : new RpcException(new Status(StatusCode.ResourceExhausted, $"A receive session holds at most {_maxLinks} links; open another session.")));
            return null;
        }
        link.Take(frame);
        return link;
    }

    /// <summary>The link's run is over: the client hears how it ended, unless it detached.</summary>
    public void Ended(Link link, CallFailure? failure)
    {
        link.Close();
        if (!link.Detached)
        {
            _frames.Post(new LinkResponse { Link = link.Id, Ended = true, Failure = failure });
        }
        lock (_gate)
        {
            _links.Remove(link.Id);
            if (_links.Count == 0)
            {
                if (_closing)
                {
                    _allEnded.TrySetResult();
                }
                if (_stopping)
                {
                    CancelQuietly(_ending);
                }
            }
        }
    }

    /// <summary>The node is stopping: no new links, and the session ends once the open ones did.</summary>
    public void Stop()
    {
        lock (_gate)
        {
            _stopping = true;
            if (_links.Count == 0)
            {
                CancelQuietly(_ending);
            }
        }
    }

    /// <summary>
    /// Ends every link (as a half-closed call ends, or at once when <paramref name="cancel"/>),
    /// waits for their ends to be written, and ends the writer.
    /// </summary>
    public async Task EndAllAsync(bool cancel)
    {
        List<Link> open;
        lock (_gate)
        {
            _closing = true;
            open = [.. _links.Values];
            if (_links.Count == 0)
            {
                _allEnded.TrySetResult();
            }
        }
        if (cancel)
        {
            CancelQuietly(_cancelLinks);
        }
        foreach (var link in open)
        {
            link.HalfClose();
        }
        await _allEnded.Task.ConfigureAwait(false);
        await _frames.FlushAsync().ConfigureAwait(false);
        _frames.Fail(new RpcException(new Status(StatusCode.Unavailable, "The receive session ended.")));
    }

    private void Refuse(long id, RpcException error) =>
        _frames.Post(new LinkResponse { Link = id, Ended = true, Failure = error.ToCallFailure() });

    /// <summary>A link's response: returns once it is on the stream; throws when the stream broke.</summary>
    private Task WriteAsync(long id, ReceiveResponse response) => _frames.WriteAsync(new LinkResponse { Link = id, Response = response });

    // Only messages weigh anything; credit answers and ends are a few bytes. Stored deliveries count their bytes.
    private static int SizeOf(LinkResponse frame) => frame.Response is { Messages.Count: > 0 } ? StoredDeliveries.SizeOf(frame) : 16;

    private async Task WriteBatchAsync(IReadOnlyList<LinkResponse> frames)
    {
        var response = new ReceiveSessionResponse();
        response.Links.AddRange(frames);
        var shared = SharesMessages ? SharedMessages.Share(response) : null;
        try
        {
            await _responses.WriteAsync(response, _callToken).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The stream is gone: no frame can go out any more, and every link ends.
            CancelQuietly(_cancelLinks);
            throw;
        }
        finally
        {
            // Serialized by now; the links may read their deliveries again (to release them).
            if (shared is not null)
            {
                SharedMessages.Restore(response, shared);
            }
        }
    }

    private static void CancelQuietly(CancellationTokenSource source)
    {
        try
        {
            source.Cancel();
        }
        catch (ObjectDisposedException)
        {
            // The session is over already.
        }
    }

    public void Dispose()
    {
        _cancelLinks.Dispose();
        _ending.Dispose();
    }

    /// <summary>One link of the session: what a Receive call's request and response streams are to it.</summary>
    internal sealed class Link(ReceiveSessionLinks session, long id, CancellationToken sessionToken) : IResponseStream<ReceiveResponse>
    {
        private readonly Channel<ReceiveRequest> _requests = Channel.CreateUnbounded<ReceiveRequest>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = true });
        private readonly CancellationTokenSource _cancel = CancellationTokenSource.CreateLinkedTokenSource(sessionToken);
        private int _detached;

        public long Id { get; } = id;

        /// <summary>Cancelled when the client detached the link or the session's links were cancelled.</summary>
        public CancellationToken Cancellation { get; private set; }

        public bool Detached => Volatile.Read(ref _detached) == 1;

        /// <summary>
        /// The link's requests until the client half-closes; throws <see cref="OperationCanceledException"/>
        /// once the link is cancelled (nothing after that is read). The channel is read without the
        /// token: a cancellable read makes a new wait object each time it waits, which on a quiet
        /// link is once per message; the cancellation completes the channel instead (<see cref="Started"/>).
        /// </summary>
        public async IAsyncEnumerable<ReceiveRequest> ReadRequestsAsync()
        {
            var reader = _requests.Reader;
            while (await reader.WaitToReadAsync().ConfigureAwait(false))
            {
                while (reader.TryRead(out var request))
                {
                    Cancellation.ThrowIfCancellationRequested();
                    yield return request;
                }
            }
            Cancellation.ThrowIfCancellationRequested();
        }

        /// <summary>A frame of the client for this link (only the session's reader calls this).</summary>
        public void Take(LinkRequest frame)
        {
            if (frame.Request is { } request)
            {
                _requests.Writer.TryWrite(request);
            }
            if (frame.HalfClose)
            {
                HalfClose();
            }
            if (frame.Detach)
            {
                // Cancelled before its requests end: whoever reads them learns the client went, not
                // that it half-closed (a proxied link then gives back what the owner sent it).
                Volatile.Write(ref _detached, 1);
                CancelQuietly(_cancel);
                _requests.Writer.TryComplete();
            }
        }

        public void HalfClose() => _requests.Writer.TryComplete();

        /// <summary>Reads the token once, before anything can dispose its source.</summary>
        public Link Started()
        {
            Cancellation = _cancel.Token;
            Cancellation.UnsafeRegister(static requests => ((Channel<ReceiveRequest>)requests!).Writer.TryComplete(), _requests);
            return this;
        }

        /// <summary>
        /// Returns once the frame is on the session's stream, or throws once the link is cancelled
        /// (detached, or the session's links cut) while it waits: a frame of a detached link that
        /// goes out later is dropped by the client, so what it carries counts as not delivered.
        /// </summary>
        public Task WriteAsync(ReceiveResponse message, CancellationToken cancellationToken) => session.WriteAsync(Id, message).WaitAsync(Cancellation);

        /// <summary>The run is over: its requests end and its token goes with it.</summary>
        public void Close()
        {
            _requests.Writer.TryComplete();
            _cancel.Dispose();
        }
    }
}
