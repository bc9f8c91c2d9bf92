using System.Threading.Tasks.Sources;

namespace Farm.Client;

/// <summary>
/// The one wait of a receive link's only receiver (a processor with one call at a time), made once
/// for the link's life: armed before each wait and completed by the link when a message is
/// buffered, when it closes or faults (then the wait throws the fault), or when the waiter's token is
/// cancelled. A receive that waits holds a timer, linked token sources, a channel read and four
/// async frames for as long as its queue is quiet; with thousands of quiet queues in one process
/// those were what every gen0 collection promoted (perf/README "Session 41").
/// </summary>
internal sealed class SoleWaiter : IValueTaskSource
{
    private readonly Lock _gate = new();
    // Continuations run on the thread pool: wakes come from the link's read loop and under its lock.
    private ManualResetValueTaskSourceCore<bool> _core = new() { RunContinuationsAsynchronously = true };
    private bool _armed;
    private int _inUse;
    private CancellationToken _token;
    private CancellationTokenRegistration _registration;

    /// <summary>
    /// Arms it for one wait that <paramref name="cancellationToken"/> also ends. The token is
    /// registered once and kept while the next waits pass the same one, as a processor's worker does.
    /// </summary>
    public void Arm(CancellationToken cancellationToken)
    {
        if (Interlocked.Exchange(ref _inUse, 1) == 1)
        {
            throw new InvalidOperationException("A receive link has one sole waiter: one wait at a time.");
        }
        if (!cancellationToken.Equals(_token))
        {
            _registration.Dispose();
            _token = cancellationToken;
            _registration = cancellationToken.UnsafeRegister(static waiter => ((SoleWaiter)waiter!).Wake(), this);
        }
        lock (_gate)
        {
            _core.Reset();
            _armed = true;
        }
    }

    /// <summary>Ends the wait, if one is armed.</summary>
    public void Wake() => Complete(null);

    /// <summary>Ends the wait with <paramref name="fault"/>, if one is armed.</summary>
    public void Fail(Exception fault) => Complete(fault);

    private void Complete(Exception? fault)
    {
        lock (_gate)
        {
            if (!_armed)
            {
                return;
            }
            _armed = false;
            if (fault is null)
            {
                _core.SetResult(true);
            }
            else
            {
                _core.SetException(fault);
            }
        }
    }

    public ValueTask WaitAsync() => new(this, _core.Version);

    /// <summary>Lets go of the token it was registered with (the link closes).</summary>
    public void Release() => _registration.Dispose();

    void IValueTaskSource.GetResult(short token)
    {
        Volatile.Write(ref _inUse, 0);
        _core.GetResult(token);
    }

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => _core.GetStatus(token);

    void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags) =>
        _core.OnCompleted(continuation, state, token, flags);
}
