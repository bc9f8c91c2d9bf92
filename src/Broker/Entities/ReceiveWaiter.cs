using System.Threading.Tasks.Sources;

namespace Farm.Broker.Entities;

/// <summary>
/// One receive stream's wait for messages, made once for the stream's life and used for each of
/// its waits. Armed and registered with its sub-queue before each look; woken by an arrival (the
/// sub-queue's <see cref="SubQueueState.SignalArrived"/>), by the entity's sweep once its deadline
/// passed, or by the stream itself (a drain, the call's end). Nothing is allocated per wait: at
/// 15,000 queues each waiting queue's per-wait timer, linked token sources, task and state machine
/// were what every gen0 collection promoted (perf/README "Session 40").
/// </summary>
internal sealed class ReceiveWaiter : IValueTaskSource
{
    private readonly object _gate = new();

    // Continuations run on the thread pool: wakes come under the sub-queue's and this waiter's locks.
    private ManualResetValueTaskSourceCore<bool> _core = new() { RunContinuationsAsynchronously = true };
    private bool _armed;

    /// <summary>The sub-queue it is registered with, and its neighbours in that sub-queue's list (guarded by the sub-queue).</summary>
    internal SubQueueState? RegisteredWith;

    internal ReceiveWaiter? Previous;

    internal ReceiveWaiter? Next;

    /// <summary>When the sweep wakes it though nothing arrived (node clock, ms).</summary>
    internal long DeadlineMs { get; private set; }

    /// <summary>The peek-lock credit it adds to its sub-queue's <see cref="SubQueueState.WaitingPeekLockCredit"/> while it waits (guarded by the entity lock).</summary>
    internal int WaitingCredit { get; set; }

    /// <summary>Ready for one wait: the next wake completes <see cref="WaitAsync"/>. Only its owner calls it, never while it awaits.</summary>
    public void Arm(long deadlineMs)
    {
        lock (_gate)
        {
            _core.Reset();
            _armed = true;
            DeadlineMs = deadlineMs;
        }
    }

    /// <summary>Ends the current wait, if one is armed; a wake with none armed is dropped (the owner looks before it waits again).</summary>
    public void Wake()
    {
        lock (_gate)
        {
            if (!_armed)
            {
                return;
            }
            _armed = false;
            _core.SetResult(true);
        }
    }

    /// <summary>Completes at the next wake after <see cref="Arm"/> (at once if it came already).</summary>
    public ValueTask WaitAsync() => new(this, _core.Version);

    void IValueTaskSource.GetResult(short token) => _core.GetResult(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => _core.GetStatus(token);

    void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags) =>
        _core.OnCompleted(continuation, state, token, flags);
}
