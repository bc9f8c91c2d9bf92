namespace Farm.Broker.Node;

/// <summary>
/// What the ownership loop sleeps on between passes: its interval, or an earlier wake-up. The crash
/// watch asks for a pass the moment a peer's process is found gone, so the dead node's containers
/// are released and taken without waiting for the next tick; a pass that knows when its next change
/// falls (a peer's heartbeat going stale, an orphan's lease running out) has the loop sleep only
/// until then. A wake-up that arrives while a pass runs is kept: the next sleep returns at once.
/// </summary>
internal sealed class OwnershipWakeUp
{
    private TaskCompletionSource _signal = NewSignal();
    private int _passWanted;

    /// <summary>Asks for a pass now (or, while one runs, right after it).</summary>
    public void Now()
    {
        Volatile.Write(ref _passWanted, 1);
        Volatile.Read(ref _signal).TrySetResult();
    }

    /// <summary>Has the loop work out when to wake again (a pass outside it expects a change sooner), without a pass.</summary>
    public void Reschedule() => Volatile.Read(ref _signal).TrySetResult();

    /// <summary>
    /// Sleeps until <paramref name="wakeAt"/> on <paramref name="clock"/>, or until woken. True when a
    /// pass is due: the moment came or <see cref="Now"/> asked for one; false after <see cref="Reschedule"/>.
    /// </summary>
    public async Task<bool> SleepUntilAsync(DateTimeOffset wakeAt, TimeProvider clock, CancellationToken cancellationToken)
    {
        var signal = Volatile.Read(ref _signal);
        var elapsed = clock.GetUtcNow() >= wakeAt;
        if (!elapsed && !signal.Task.IsCompleted)
        {
            using var sleeping = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            var delay = wakeAt - clock.GetUtcNow();
            var timer = Task.Delay(delay > TimeSpan.Zero ? delay : TimeSpan.Zero, clock, sleeping.Token);
            // A clock that moved past the moment between the read above and the timer's start (a
            // test's clock jumps; the real one creeps) would leave the timer a whole delay late.
            elapsed = clock.GetUtcNow() >= wakeAt
                || await Task.WhenAny(timer, signal.Task).ConfigureAwait(false) == timer;
            await sleeping.CancelAsync().ConfigureAwait(false);
            cancellationToken.ThrowIfCancellationRequested();
        }
        if (signal.Task.IsCompleted)
        {
            // Consumed: a later wake-up sets the fresh one.
            Interlocked.CompareExchange(ref _signal, NewSignal(), signal);
        }
        return Interlocked.Exchange(ref _passWanted, 0) == 1 || elapsed;
    }

    private static TaskCompletionSource NewSignal() => new(TaskCreationOptions.RunContinuationsAsynchronously);
}
