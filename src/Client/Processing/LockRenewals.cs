namespace Farm.Client;

/// <summary>
/// The locks a processor's handlers hold, renewed ahead of expiry while the handlers run. One timer
/// serves them all, armed for the earliest renewal due, instead of a timer, a token source and a
/// waiting loop per message: nearly every handler returns long before its first renewal, so that
/// wait was made and cancelled for nothing (5-6% of a chain handler's CPU samples, though no A/B
/// run could tell the change from noise; perf/README "Session 42"). A held message costs a list
/// node; the timer is re-armed only when a message is due before the time it is already armed for,
/// so a processor handling one message at a time arms it about once per lock duration.
/// <para>
/// The locks due together go in one RenewLock call (the call takes many tokens, and answers each),
/// and so do those due a little later: a lock is renewed up to half its margin early when a call
/// goes anyway. A processor with a hundred long handlers makes a call or two per renewal round
/// instead of a hundred.
/// </para>
/// </summary>
/// <param name="renew">One RenewLock call for the messages given: an outcome per message, in order
/// (null where renewed; <see cref="FarmReceiver.RenewMessageLocksAsync"/>); throws when the call failed.</param>
internal sealed class LockRenewals(
    Func<IReadOnlyList<FarmReceivedMessage>, CancellationToken, Task<IReadOnlyList<Exception?>>> renew,
    TimeProvider time,
    TimeSpan maxRenewalDuration,
    Func<Exception, Task> reportError) : IDisposable
{
    /// <summary>Locks one RenewLock call carries at most; more due at once go in several calls.</summary>
    internal const int MaxLocksPerCall = 500;

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
    /// Stops renewing a message's lock, before it is settled. A renewal in flight for it alone is
    /// cancelled and awaited, so none reaches the broker after the settlement (it would fail with
    /// MessageLockLost); one that carries other held locks too goes on for them, and what it says
    /// of this one is ignored. Calling it again does nothing.
    /// </summary>
    public ValueTask StopAsync(Held held)
    {
        RenewalCall? call;
        lock (_gate)
        {
            if (held.Node is { } node)
            {
                _held.Remove(node);
                held.Node = null;
            }
            held.DueAt = null;
            call = held.Call;
            // Counted out of its call once, however often it is stopped.
            held.Call = null;
            if (call is null || --call.Live > 0)
            {
                return ValueTask.CompletedTask;
            }
        }

        return call.Task is not { IsCompleted: false } running ? ValueTask.CompletedTask : CancelAndAwaitAsync(call, running);
    }

    private static async ValueTask CancelAndAwaitAsync(RenewalCall call, Task running)
    {
        await call.Cancel.CancelAsync().ConfigureAwait(false);
        await running.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
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
    /// processor's MaxAutoLockRenewalDuration. It may go with a call made up to half that margin
    /// earlier. Arms the timer if it is due before the timer fires.
    /// </summary>
    private void Schedule(Held held, DateTimeOffset now)
    {
        var remaining = held.Message.LockedUntil - now;
        var margin = remaining > TimeSpan.FromSeconds(20) ? TimeSpan.FromSeconds(10) : remaining / 2;
        var due = now + remaining - margin;
        held.DueAt = remaining > TimeSpan.Zero && due < held.RenewUntil ? due : null;
        held.JoinsFrom = due - margin / 2;
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

    /// <summary>
    /// Renews the locks that are due, with those that may join them, and arms the timer for the
    /// next one due, if any.
    /// </summary>
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
            var anyDue = false;
            foreach (var held in _held)
            {
                anyDue |= held is { DueAt: { } due, Call: null } && due <= now;
            }

            List<Held>? renewing = null;
            DateTimeOffset? next = null;
            foreach (var held in _held)
            {
                if (held.DueAt is not { } due || held.Call is not null)
                {
                    continue;
                }

                if (anyDue && held.JoinsFrom <= now)
                {
                    (renewing ??= []).Add(held);
                }
                else if (next is not { } earliest || due < earliest)
                {
                    next = due;
                }
            }

            for (var start = 0; renewing is not null && start < renewing.Count; start += MaxLocksPerCall)
            {
                Start(renewing.GetRange(start, Math.Min(MaxLocksPerCall, renewing.Count - start)));
            }

            if (next is { } at)
            {
                Arm(at, now);
            }
        }
    }

    /// <summary>One RenewLock call for <paramref name="renewing"/>; under the gate.</summary>
    private void Start(List<Held> renewing)
    {
        var call = new RenewalCall(renewing);
        foreach (var held in renewing)
        {
            held.DueAt = null;
            held.Call = call;
        }
        call.Task = Task.Run(() => RenewAsync(call));
        foreach (var held in renewing)
        {
            held.Renewal = call.Task;
        }
    }

    private async Task RenewAsync(RenewalCall call)
    {
        IReadOnlyList<Exception?> outcomes;
        try
        {
            outcomes = await renew(call.Messages, call.Cancel.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (call.Cancel.IsCancellationRequested)
        {
            // Every lock it carried was let go.
            return;
        }
        catch (Exception e)
        {
            outcomes = [.. call.Held.Select(_ => e)];
        }

        List<Exception>? report = null;
        lock (_gate)
        {
            var now = time.GetUtcNow();
            for (var i = 0; i < call.Held.Count; i++)
            {
                var held = call.Held[i];
                held.Call = null;
                if (held.Node is null || _disposed)
                {
                    continue;   // let go while the call ran: its outcome does not matter
                }

                if (outcomes[i] is { } failure)
                {
                    // One failed call is one error, however many locks it carried.
                    if (report is null || !report.Contains(failure))
                    {
                        (report ??= []).Add(failure);
                    }
                    if (failure is not FarmException { IsTransient: true })
                    {
                        continue;
                    }
                    // Transient: tried again half-way to the lock's end, as long as it has not run out.
                }
                Schedule(held, now);
            }
        }

        foreach (var failure in report ?? [])
        {
            await reportError(failure).ConfigureAwait(false);
        }
    }

    /// <summary>A message a handler holds, in the processor's list while it is renewed.</summary>
    internal sealed class Held(FarmReceivedMessage message, DateTimeOffset renewUntil)
    {
        public FarmReceivedMessage Message { get; } = message;

        public DateTimeOffset RenewUntil { get; } = renewUntil;

        public LinkedListNode<Held>? Node { get; set; }

        /// <summary>When the lock is next renewed; null when it is not (being renewed, stopped, or past its limits).</summary>
        public DateTimeOffset? DueAt { get; set; }

        /// <summary>From when the lock may be renewed with others' that are due.</summary>
        public DateTimeOffset JoinsFrom { get; set; }

        /// <summary>The renewal call in flight for this lock, if any.</summary>
        public RenewalCall? Call { get; set; }

        /// <summary>The renewal in flight or the last one.</summary>
        public Task? Renewal { get; set; }
    }

    /// <summary>One RenewLock call: the locks it carries, how many of them are still held, and its cancellation.</summary>
    internal sealed class RenewalCall(List<Held> held)
    {
        public List<Held> Held { get; } = held;

        public IReadOnlyList<FarmReceivedMessage> Messages { get; } = [.. held.Select(h => h.Message)];

        /// <summary>Locks of the call not let go yet; the call is cancelled when it reaches 0.</summary>
        public int Live { get; set; } = held.Count;

        public CancellationTokenSource Cancel { get; } = new();

        public Task? Task { get; set; }
    }
}
