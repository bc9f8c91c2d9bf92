using Farm.Broker.Node;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Broker.Tests;

/// <summary>
/// The ownership loop's sleep (<see cref="OwnershipWakeUp"/>) on a test's clock, which jumps: a
/// pass must come when the clock reaches the moment the loop sleeps toward, however the jump falls
/// against the loop's own reading of the clock.
/// </summary>
public sealed class OwnershipWakeUpTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    [Fact]
    public async Task AClockThatJumpsPastTheMoment_BetweenTheReadAndTheTimer_StillEndsTheSleep()
    {
        var clock = new JumpBeforeFirstTimer(TestClock.Create(), jump: TimeSpan.FromMilliseconds(500));
        var wakeUp = new OwnershipWakeUp();

        var due = await wakeUp.SleepUntilAsync(TestClock.Start + TimeSpan.FromMilliseconds(500), clock, CancellationToken.None)
            .WaitAsync(Patience);

        Assert.True(due);
        Assert.Equal(TestClock.Start + TimeSpan.FromMilliseconds(500), clock.GetUtcNow());
    }

    [Fact]
    public async Task TheSleep_EndsWhenTheClockReachesTheMoment_AndNotBefore()
    {
        var clock = TestClock.Create();
        var wakeUp = new OwnershipWakeUp();

        var sleeping = wakeUp.SleepUntilAsync(TestClock.Start + TimeSpan.FromMilliseconds(500), clock, CancellationToken.None);
        await TestClock.AdvanceAndSettleAsync(clock, TimeSpan.FromMilliseconds(499));
        Assert.False(sleeping.IsCompleted);
        await TestClock.AdvanceAndSettleAsync(clock, TimeSpan.FromMilliseconds(1));

        Assert.True(await sleeping.WaitAsync(Patience));
    }

    [Fact]
    public async Task ARescheduleEndsTheSleep_WithoutAPass_AndANowWithOne()
    {
        var clock = TestClock.Create();
        var wakeUp = new OwnershipWakeUp();
        var far = TestClock.Start + TimeSpan.FromHours(1);

        var rescheduled = wakeUp.SleepUntilAsync(far, clock, CancellationToken.None);
        wakeUp.Reschedule();
        Assert.False(await rescheduled.WaitAsync(Patience));

        var woken = wakeUp.SleepUntilAsync(far, clock, CancellationToken.None);
        wakeUp.Now();
        Assert.True(await woken.WaitAsync(Patience));
    }

    /// <summary>
    /// A clock that jumps on by <c>jump</c> just before its first timer is made: the moment a test's
    /// Advance lands between the loop's reading of the clock and its Task.Delay.
    /// </summary>
    private sealed class JumpBeforeFirstTimer(FakeTimeProvider inner, TimeSpan jump) : TimeProvider
    {
        private int _jumped;

        public override DateTimeOffset GetUtcNow() => inner.GetUtcNow();

        public override long GetTimestamp() => inner.GetTimestamp();

        public override long TimestampFrequency => inner.TimestampFrequency;

        public override TimeZoneInfo LocalTimeZone => inner.LocalTimeZone;

        public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
        {
            if (Interlocked.Exchange(ref _jumped, 1) == 0)
            {
                inner.Advance(jump);
            }
            return inner.CreateTimer(callback, state, dueTime, period);
        }
    }
}
