namespace Farm.Client;

/// <summary>
/// The locks a processor's handlers hold, renewed ahead of expiry while the handlers run. One timer
/// serves them all, armed for the earliest renewal due, instead of a timer, a token source and a
/// waiting loop per message: nearly every handler returns long before its first renewal, so that
/// wait was made and cancelled for nothing (5-6% of a chain handler's CPU samples, though no A/B
/// run could tell the change from noise; perf/README "Session 42"). A held message costs a list
/// node; the timer is re-armed only when a message is due before the time it is already armed for,
/// so a processor handling one message at a time arms it about once per lock duration.
/// </summary>
internal sealed class LockRenewals(
    Func<FarmReceivedMessage, CancellationToken, Task> renew,
    TimeProvider time,
    TimeSpan maxRenewalDuration,
    Func<Exception, Task> reportError) : IDisposable
{
    private readonly Lock _gate = new();
    private readonly LinkedList<Held> _held = [];
    private ITimer? _timer;
    private DateTimeOffset? _armedFor;
    private bool _disposed;

    /// <summary>Starts renewing the lock of a message a handler now holds.</summary>
    public Held Track(FarmReceivedMessage message)
    {
        var now = time.GetUtcNow();
        var held = new Held(message, now + maxRenewalDuration);
        lock (_gate)
        {
            if (_disposed)
            {
                return held;
            }

            held.Node = _held.AddLast(held);
            Schedule(held, now);
        }
        return held;
    }

    /// <summary>
    /// Stops renewing a message's lock, before it is settled: a renewal in flight is cancelled and
    /// awaited, so none reaches the broker after the settlement (it would fail with MessageLockLost).
    /// Calling it again does nothing.
    /// </summary>
    public ValueTask StopAsync(Held held)
    {
        Task? renewal;
        lock (_gate)
        {
            if (held.Node is { } node)
            {
                _held.Remove(node);
                held.Node = null;
            }
            held.DueAt = null;
            renewal = held.Renewal;
        }

        return renewal is null || renewal.IsCompleted ? ValueTask.CompletedTask : CancelAndAwaitAsync(held, renewal);
    }

    private static async ValueTask CancelAndAwaitAsync(Held held, Task renewal)
    {
        await held.Cancel.CancelAsync().ConfigureAwait(false);
        await renewal.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
    }

    public void Dispose()
    {
        lock (_gate)
        {
            _disposed = true;
            _held.Clear();
            _timer?.Dispose();
            _timer = null;
        }
    }

    /// <summary>
    /// When the held message's lock is next renewed, as the per-message loop did: 10 s before it
    /// runs out for normal locks, half-way for short ones; never once it ran out or past the
    /// processor's MaxAutoLockRenewalDuration. Arms the timer if it is due before the timer fires.
    /// </summary>
    private void Schedule(Held held, DateTimeOffset now)
    {
        var remaining = held.Message.LockedUntil - now;
        var margin = remaining > TimeSpan.FromSeconds(20) ? TimeSpan.FromSeconds(10) : remaining / 2;
        var due = now + remaining - margin;
        held.DueAt = remaining > TimeSpan.Zero && due < held.RenewUntil ? due : null;
        if (held.DueAt is { } at && (_armedFor is not { } armed || at < armed))
        {
            Arm(at, now);
        }
    }

    private void Arm(DateTimeOffset at, DateTimeOffset now)
    {
        _armedFor = at;
        var wait = at > now ? at - now : TimeSpan.Zero;
        _timer ??= time.CreateTimer(static state => ((LockRenewals)state!).OnTimer(), this, Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
        _timer.Change(wait, Timeout.InfiniteTimeSpan);
    }

    /// <summary>Starts the renewals that are due and arms the timer for the next one, if any.</summary>
    private void OnTimer()
    {
        lock (_gate)
        {
            if (_disposed)
            {
                return;
            }

            var now = time.GetUtcNow();
            _armedFor = null;
            DateTimeOffset? next = null;
            foreach (var held in _held)
            {
                if (held.DueAt is not { } due || held.Renewal is { IsCompleted: false })
                {
                    continue;
                }

                if (due <= now)
                {
                    held.DueAt = null;
                    held.Renewal = Task.Run(() => RenewAsync(held));
                }
                else if (next is not { } earliest || due < earliest)
                {
                    next = due;
                }
            }

            if (next is { } at)
            {
                Arm(at, now);
            }
        }
    }

    private async Task RenewAsync(Held held)
    {
        try
        {
            await renew(held.Message, held.Cancel.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (held.Cancel.IsCancellationRequested)
        {
            return;
        }
        catch (Exception e) when (e is FarmException or ObjectDisposedException)
        {
            await reportError(e).ConfigureAwait(false);
            if (e is FarmException { IsTransient: false } or ObjectDisposedException)
            {
                return;
            }
            // Transient: tried again half-way to the lock's end, as long as it has not run out.
        }

        lock (_gate)
        {
            if (held.Node is not null && !_disposed)
            {
                Schedule(held, time.GetUtcNow());
            }
        }
    }

    /// <summary>A message a handler holds, in the processor's list while it is renewed.</summary>
    internal sealed class Held(FarmReceivedMessage message, DateTimeOffset renewUntil)
    {
        private CancellationTokenSource? _cancel;

        public FarmReceivedMessage Message { get; } = message;

        public DateTimeOffset RenewUntil { get; } = renewUntil;

        public LinkedListNode<Held>? Node { get; set; }

        /// <summary>When the lock is next renewed; null when it is not (being renewed, stopped, or past its limits).</summary>
        public DateTimeOffset? DueAt { get; set; }

        /// <summary>The renewal in flight or the last one.</summary>
        public Task? Renewal { get; set; }

        /// <summary>Cancels a renewal in flight; made only for a message that was renewed.</summary>
        public CancellationTokenSource Cancel => LazyInitializer.EnsureInitialized(ref _cancel);
    }
}
