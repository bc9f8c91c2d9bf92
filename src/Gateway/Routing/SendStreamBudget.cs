namespace Farm.Gateway.Routing;

/// <summary>
/// What one send stream may have running at once: at most <see cref="MaxSends"/> sends and
/// <see cref="MaxBytes"/> of them (one larger send runs alone). The stream's reader takes from it
/// before it starts a send, so past it the stream is not read and HTTP/2 flow control holds the
/// client back; each send gives its share back when answered. Generous on purpose: sends held while
/// their entity is between owners wait in it, and must not hold up the client's other sends.
/// </summary>
internal sealed class SendStreamBudget(int maxSends, long maxBytes)
{
    private readonly Lock _gate = new();
    private int _sends;
    private long _bytes;
    private TaskCompletionSource _released = NewSignal();

    public int MaxSends { get; } = maxSends;

    public long MaxBytes { get; } = maxBytes;

    public int Sends
    {
        get
        {
            lock (_gate)
            {
                return _sends;
            }
        }
    }

    /// <summary>Waits until a send of <paramref name="bytes"/> fits, then counts it. One taker at a time (the stream's reader).</summary>
    public async Task TakeAsync(long bytes, CancellationToken cancellationToken)
    {
        while (true)
        {
            Task released;
            lock (_gate)
            {
                if (_sends == 0 || (_sends < MaxSends && _bytes + bytes <= MaxBytes))
                {
                    _sends++;
                    _bytes += bytes;
                    return;
                }
                released = _released.Task;
            }
            await released.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
    }

    public void Give(long bytes)
    {
        TaskCompletionSource released;
        lock (_gate)
        {
            _sends--;
            _bytes -= bytes;
            released = _released;
            _released = NewSignal();
        }
        released.TrySetResult();
    }

    /// <summary>Waits until every send taken was given back.</summary>
    public async Task EmptyAsync(CancellationToken cancellationToken)
    {
        while (true)
        {
            Task released;
            lock (_gate)
            {
                if (_sends == 0)
                {
                    return;
                }
                released = _released.Task;
            }
            await released.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
    }

    private static TaskCompletionSource NewSignal() => new(TaskCreationOptions.RunContinuationsAsynchronously);
}
