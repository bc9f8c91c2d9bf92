using Microsoft.Extensions.Time.Testing;

namespace Farm.Broker.Tests;

/// <summary>The one fake clock of the broker tests: FakeTimeProvider, started on a fixed date.</summary>
internal static class TestClock
{
    public static readonly DateTimeOffset Start = new(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);

    /// <summary>A clock the test moves (Advance); timers fire inside Advance when their time comes.</summary>
    public static FakeTimeProvider Create() => new(Start);

    /// <summary>
    /// Moves the clock on by <paramref name="total"/> one <paramref name="step"/> at a time, so timers
    /// due on the way fire with the clock at their step (FakeTimeProvider fires everything due in one
    /// Advance with the clock already at its end).
    /// </summary>
    public static void AdvanceTicking(FakeTimeProvider clock, TimeSpan total, TimeSpan step)
    {
        var left = total;
        while (left > TimeSpan.Zero)
        {
            var next = left < step ? left : step;
            clock.Advance(next);
            left -= next;
        }
    }
}
