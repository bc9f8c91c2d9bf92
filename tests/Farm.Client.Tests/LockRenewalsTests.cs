using System.Collections.Concurrent;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Client.Tests;

/// <summary>
/// A processor's lock renewals on a driven clock: when each held message is renewed, that a
/// message let go is not, and that the one timer is re-armed for whatever is due next.
/// </summary>
public sealed class LockRenewalsTests
{
    private static readonly TimeSpan LockDuration = TimeSpan.FromSeconds(30);
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);
    private static readonly DateTimeOffset Start = new(2026, 11, 30, 12, 0, 0, TimeSpan.Zero);

    private readonly FakeTimeProvider _time = new(Start);
    private readonly ConcurrentQueue<(long Sequence, TimeSpan At)> _renewals = new();
    private readonly ConcurrentQueue<Exception> _errors = new();

    private FarmReceivedMessage Locked(long sequence) => new() { SequenceNumber = sequence, LockToken = $"lock-{sequence}", LockedUntil = _time.GetUtcNow() + LockDuration };

    private TimeSpan Now => _time.GetUtcNow() - Start;

    /// <summary>Renews as the broker would: the lock runs for another lock duration from now.</summary>
    private Task Renew(FarmReceivedMessage message, CancellationToken cancellationToken)
    {
        message.LockedUntil = _time.GetUtcNow() + LockDuration;
        _renewals.Enqueue((message.SequenceNumber, Now));
        return Task.CompletedTask;
    }

    /// <summary>The sequence numbers of each RenewLock call, in the order the calls were made.</summary>
    private readonly ConcurrentQueue<long[]> _calls = new();

    /// <summary>
    /// Renewals whose calls go through <paramref name="renew"/> one lock at a time (its failure is
    /// that lock's outcome; a cancellation ends the call), each call recorded in <see cref="_calls"/>.
    /// </summary>
    private LockRenewals Renewals(Func<FarmReceivedMessage, CancellationToken, Task>? renew = null, TimeSpan? maxDuration = null)
        => new(async (messages, cancellationToken) =>
        {
            _calls.Enqueue([.. messages.Select(m => m.SequenceNumber)]);
            var outcomes = new Exception?[messages.Count];
            for (var i = 0; i < messages.Count; i++)
            {
                try
                {
                    await (renew ?? Renew)(messages[i], cancellationToken);
                }
                catch (Exception e) when (e is not OperationCanceledException)
                {
                    outcomes[i] = e;
                }
            }
            return outcomes;
        }, _time, maxDuration ?? TimeSpan.FromMinutes(5), e =>
        {
            _errors.Enqueue(e);
            return Task.CompletedTask;
        });

    /// <summary>Moves the clock to <paramref name="at"/> after the start.</summary>
    private void AdvanceTo(TimeSpan at) => _time.Advance(at - Now);

    /// <summary>
    /// The renewal the last advance started, run to its end: the timer fires inside the advance, so
    /// the renewal's task is there to await, and the message is scheduled again before it completes.
    /// </summary>
    private static async Task RenewedAsync(LockRenewals.Held held, DateTimeOffset? due)
    {
        Assert.NotNull(held.Renewal);
        await held.Renewal.WaitAsync(Patience);
        Assert.Equal(due, held.DueAt);
    }

    [Fact]
    public async Task AHeldMessage_IsRenewedTenSecondsBeforeItsLockRunsOut_AndAgainBeforeTheRenewedLockDoes()
    {
        using var renewals = Renewals();
        var held = renewals.Track(Locked(1));

        AdvanceTo(TimeSpan.FromSeconds(19.9));
        Assert.Empty(_renewals);
        AdvanceTo(TimeSpan.FromSeconds(20));
        await RenewedAsync(held, Start + TimeSpan.FromSeconds(40));

        AdvanceTo(TimeSpan.FromSeconds(40));
        await RenewedAsync(held, Start + TimeSpan.FromSeconds(60));
        Assert.Equal([(1L, TimeSpan.FromSeconds(20)), (1L, TimeSpan.FromSeconds(40))], _renewals);
        Assert.Empty(_errors);
    }

    [Fact]
    public async Task MessagesLetGo_AreNeverRenewed_AndTheTimerIsArmedAgainForTheNextOneDue()
    {
        using var renewals = Renewals();
        var first = renewals.Track(Locked(1));                 // due at 20 s: the timer is armed for it
        AdvanceTo(TimeSpan.FromSeconds(5));
        await renewals.StopAsync(first);
        AdvanceTo(TimeSpan.FromSeconds(10));
        var second = renewals.Track(Locked(2));                // due at 30 s, after the timer fires

        AdvanceTo(TimeSpan.FromSeconds(29.9));
        Assert.Empty(_renewals);
        AdvanceTo(TimeSpan.FromSeconds(30));
        await RenewedAsync(second, Start + TimeSpan.FromSeconds(50));
        await renewals.StopAsync(second);

        // Idle, then held again: renewed on time although nothing was due when the timer last fired.
        AdvanceTo(TimeSpan.FromSeconds(100));
        var third = renewals.Track(Locked(3));
        AdvanceTo(TimeSpan.FromSeconds(120));
        await RenewedAsync(third, Start + TimeSpan.FromSeconds(140));
        Assert.Equal([(2L, TimeSpan.FromSeconds(30)), (3L, TimeSpan.FromSeconds(120))], _renewals);
        await renewals.StopAsync(third);
        await renewals.StopAsync(third);
    }

    [Fact]
    public async Task Stopping_CancelsARenewalInFlight_AndReturnsOnlyOnceItEnded()
    {
        var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var mayEnd = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var cancelled = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var renewals = Renewals(async (_, cancellationToken) =>
        {
            started.SetResult();
            await Task.Delay(Timeout.Infinite, cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
            if (cancellationToken.IsCancellationRequested)
            {
                cancelled.SetResult();
            }
            await mayEnd.Task;
            cancellationToken.ThrowIfCancellationRequested();
        });
        var held = renewals.Track(Locked(1));
        AdvanceTo(TimeSpan.FromSeconds(20));
        await started.Task.WaitAsync(Patience);

        var stopping = renewals.StopAsync(held).AsTask();
        await cancelled.Task.WaitAsync(Patience);
        Assert.False(stopping.IsCompleted, "StopAsync returned while the renewal was still running");
        mayEnd.SetResult();
        await stopping.WaitAsync(Patience);
        Assert.Empty(_errors);
    }

    [Fact]
    public async Task RenewalsEnd_AtMaxAutoLockRenewalDuration()
    {
        using var renewals = Renewals(maxDuration: TimeSpan.FromSeconds(60));
        var held = renewals.Track(Locked(1));

        AdvanceTo(TimeSpan.FromSeconds(20));
        await RenewedAsync(held, Start + TimeSpan.FromSeconds(40));
        AdvanceTo(TimeSpan.FromSeconds(40));
        await RenewedAsync(held, null);                        // the next (60 s) is not before the limit
        AdvanceTo(TimeSpan.FromSeconds(120));

        Assert.Equal(2, _renewals.Count);
    }

    [Fact]
    public async Task ATransientFailure_IsReported_AndTriedAgainHalfWayToTheLocksEnd_ButALostLockIsNot()
    {
        var busy = new FarmException("busy", FarmFailureReason.ServiceBusy, "q");
        var lost = new FarmException("lost", FarmFailureReason.MessageLockLost, "q");
        var failures = new ConcurrentQueue<Exception>([busy, lost]);
        using var renewals = Renewals((message, _) =>
        {
            _renewals.Enqueue((message.SequenceNumber, Now));
            return failures.TryDequeue(out var failure) ? Task.FromException(failure) : Task.CompletedTask;
        });
        var held = renewals.Track(Locked(1));

        AdvanceTo(TimeSpan.FromSeconds(20));
        await RenewedAsync(held, Start + TimeSpan.FromSeconds(25));      // 10 s left: tried again after 5
        AdvanceTo(TimeSpan.FromSeconds(25));
        await RenewedAsync(held, null);                                  // lost: not tried again
        AdvanceTo(TimeSpan.FromSeconds(60));

        Assert.Equal([(1L, TimeSpan.FromSeconds(20)), (1L, TimeSpan.FromSeconds(25))], _renewals);
        Assert.Equal([busy, lost], _errors);
        Assert.Null(held.DueAt);
    }

    [Fact]
    public async Task LocksDueTogether_AreRenewedInOneCall_WithThoseDueWithinHalfTheirMargin()
    {
        using var renewals = Renewals();
        var held = new List<LockRenewals.Held> { renewals.Track(Locked(1)), renewals.Track(Locked(2)) };   // due at 20 s
        AdvanceTo(TimeSpan.FromSeconds(4));
        held.Add(renewals.Track(Locked(3)));           // due at 24 s: may go from 19 s on, so with the first two
        AdvanceTo(TimeSpan.FromSeconds(6));
        var later = renewals.Track(Locked(4));         // due at 26 s: may go from 21 s on, so not with them

        AdvanceTo(TimeSpan.FromSeconds(20));
        foreach (var h in held)
        {
            await RenewedAsync(h, Start + TimeSpan.FromSeconds(40));
        }
        Assert.Null(later.Renewal);
        AdvanceTo(TimeSpan.FromSeconds(26));
        await RenewedAsync(later, Start + TimeSpan.FromSeconds(46));

        Assert.Equal([[1L, 2L, 3L], [4L]], _calls);
        Assert.Empty(_errors);
    }

    [Fact]
    public async Task ALockLetGoWhileItsCallRuns_DoesNotWaitForTheCall_AndWhatTheCallSaysOfItIsIgnored()
    {
        var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var mayEnd = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var renewals = Renewals(async (message, cancellationToken) =>
        {
            started.TrySetResult();
            await mayEnd.Task;
            cancellationToken.ThrowIfCancellationRequested();
            if (message.SequenceNumber == 1)
            {
                // Settled meanwhile: the broker no longer knows the lock.
                throw new FarmException("lost", FarmFailureReason.MessageLockLost, "q");
            }
            await Renew(message, CancellationToken.None);
        });
        var first = renewals.Track(Locked(1));
        var second = renewals.Track(Locked(2));
        AdvanceTo(TimeSpan.FromSeconds(20));
        await started.Task.WaitAsync(Patience);

        var stopping = renewals.StopAsync(first);
        // The processor stops renewing after the handler and again on its way out: once counts.
        var stoppingAgain = renewals.StopAsync(first);
        Assert.True(stopping.IsCompleted && stoppingAgain.IsCompleted, "StopAsync waited for a call that also renews another held lock");
        mayEnd.SetResult();
        await RenewedAsync(second, Start + TimeSpan.FromSeconds(40));

        Assert.Null(first.DueAt);
        Assert.Empty(_errors);
        Assert.Equal([[1L, 2L]], _calls);
    }

    [Fact]
    public async Task MoreLocksDueAtOnceThanACallCarries_GoInSeveralCalls()
    {
        using var renewals = Renewals();
        var count = LockRenewals.MaxLocksPerCall + 1;
        var held = Enumerable.Range(1, count).Select(i => renewals.Track(Locked(i))).ToList();

        AdvanceTo(TimeSpan.FromSeconds(20));
        foreach (var h in held)
        {
            await RenewedAsync(h, Start + TimeSpan.FromSeconds(40));
        }

        // The calls run side by side: which is recorded first is not fixed.
        Assert.Equal([1, LockRenewals.MaxLocksPerCall], _calls.Select(c => c.Length).Order());
        Assert.Equal(Enumerable.Range(1, count).Select(i => (long)i), _calls.SelectMany(c => c).Order());
    }
}
