using Farm.Contracts;

namespace Farm.Broker.Entities;

/// <summary>
/// One receive stream's wait for messages, made once for the stream's life and used for each of
/// its waits (a <see cref="ReusableSignal"/>). Armed and registered with its sub-queue before each
/// look; woken by an arrival (the sub-queue's <see cref="SubQueueState.SignalArrived"/>), by the
/// entity's sweep once its deadline passed, or by the stream itself (a drain, the call's end).
/// </summary>
internal sealed class ReceiveWaiter : ReusableSignal
{
    /// <summary>The sub-queue it is registered with, and its neighbours in that sub-queue's list (guarded by the sub-queue).</summary>
    internal SubQueueState? RegisteredWith;

    internal ReceiveWaiter? Previous;

    internal ReceiveWaiter? Next;

    /// <summary>When the sweep wakes it though nothing arrived (node clock, ms).</summary>
    internal long DeadlineMs { get; private set; }

    /// <summary>The peek-lock credit it adds to its sub-queue's <see cref="SubQueueState.WaitingPeekLockCredit"/> while it waits (guarded by the entity lock).</summary>
    internal int WaitingCredit { get; set; }

    /// <summary>Ready for one wait that the sweep ends at <paramref name="deadlineMs"/>; registering it with the sub-queue publishes the deadline.</summary>
    public void Arm(long deadlineMs)
    {
        DeadlineMs = deadlineMs;
        ArmSignal();
    }
}
