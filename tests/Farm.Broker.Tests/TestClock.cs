using Microsoft.Extensions.Time.Testing;

namespace Farm.Broker.Tests;

/// <summary>The one fake clock of the broker tests: FakeTimeProvider, started on a fixed date.</summary>
internal static class TestClock
{
    public static readonly DateTimeOffset Start = new(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);

    /// <summary>
    /// A clock the test moves (Advance); timers fire inside Advance when their time comes, unless
    /// another thread is inside the clock then (see <see cref="AdvanceAndSettleAsync"/>).
    /// </summary>
    public static FakeTimeProvider Create() => new(Start);

    /// <summary>
    /// Moves the clock on by <paramref name="delta"/> and returns once every timer due by then has
    /// fired and its callback returned. <see cref="FakeTimeProvider.Advance"/> alone does not promise
    /// that: the clock fires timers on whichever thread is inside it (any GetUtcNow, CreateTimer or
    /// Change, such as the node's ownership loop reading the time), and an Advance that comes while
    /// another thread is in there returns at once, leaving the callbacks to that thread. A timer due
    /// now and created last fires after those (earliest due first, then earliest scheduled), and only
    /// once the one before it has been rescheduled, so its firing marks the end of the tick.
    /// </summary>
    public static async Task AdvanceAndSettleAsync(FakeTimeProvider clock, TimeSpan delta)
    {
        clock.Advance(delta);
        var fired = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var marker = clock.CreateTimer(_ => fired.TrySetResult(), null, TimeSpan.Zero, Timeout.InfiniteTimeSpan);
        await fired.Task.WaitAsync(TimeSpan.FromSeconds(30));
    }

    /// <summary>
    /// Moves the clock on by <paramref name="total"/> one <paramref name="step"/> at a time, so timers
    /// due on the way fire with the clock at their step (FakeTimeProvider fires everything due in one
    /// Advance with the clock already at its end). Each step settles (<see cref="AdvanceAndSettleAsync"/>)
    /// before the next: a step's timers left to another thread would otherwise fire with the clock
    /// already moved on.
    /// </summary>
    public static async Task AdvanceTickingAsync(FakeTimeProvider clock, TimeSpan total, TimeSpan step)
    {
        var left = total;
        while (left > TimeSpan.Zero)
        {
            var next = left < step ? left : step;
            await AdvanceAndSettleAsync(clock, next);
            left -= next;
        }
    }
}
