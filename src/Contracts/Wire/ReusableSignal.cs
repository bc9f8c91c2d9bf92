using System.Threading.Tasks.Sources;

namespace Farm.Contracts;

/// <summary>
/// A wait one owner makes again and again without allocating: armed before each wait, then
/// completed by the first wake (or fault) that comes; a wake with nothing armed is dropped, so the
/// owner looks once more after arming before it awaits. Continuations run on the thread pool, so a
/// wake may come under the waker's locks. The broker's receive streams and the SDK's processor
/// workers wait this way: at thousands of quiet queues, a timer, token sources and tasks per wait
/// were what every gen0 collection promoted (perf/README "Session 41").
/// </summary>
public class ReusableSignal : IValueTaskSource
{
    private readonly Lock _gate = new();
    private ManualResetValueTaskSourceCore<bool> _core = new() { RunContinuationsAsynchronously = true };
    private bool _armed;

    /// <summary>Ready for one wait. Only its owner calls it, never while it awaits.</summary>
    protected void ArmSignal()
    {
        lock (_gate)
        {
            _core.Reset();
            _armed = true;
        }
    }

    /// <summary>Ends the current wait, if one is armed; false when none was.</summary>
    public bool Wake() => Complete(null);

    /// <summary>Ends the current wait with <paramref name="fault"/> (the awaiter throws it), if one is armed; false when none was.</summary>
    public bool Fail(Exception fault) => Complete(fault);

    private bool Complete(Exception? fault)
    {
        lock (_gate)
        {
            if (!_armed)
            {
                return false;
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
            return true;
        }
    }

    /// <summary>Completes at the first wake after arming (at once if it came already).</summary>
    public ValueTask WaitAsync() => new(this, _core.Version);

    /// <summary>The owner has its result: the wait is over.</summary>
    protected virtual void OnWaitEnded()
    {
    }

    void IValueTaskSource.GetResult(short token)
    {
        OnWaitEnded();
        _core.GetResult(token);
    }

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => _core.GetStatus(token);

    void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags) =>
        _core.OnCompleted(continuation, state, token, flags);
}
