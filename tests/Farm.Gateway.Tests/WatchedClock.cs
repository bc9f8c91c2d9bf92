using Microsoft.Extensions.Time.Testing;

namespace Farm.Gateway.Tests;

/// <summary>
/// A fake clock that knows whether anything is waiting on it: the number of its timers that are
/// armed and have not fired. A test moves it only while the code under test sleeps on one of them,
/// so the test can never run the clock ahead of a thread that has not reached its next wait yet
/// (which, on a busy machine, used to eat the code's whole time budget in a few spins).
/// </summary>
internal sealed class WatchedClock : TimeProvider
{
    private readonly FakeTimeProvider _inner = new();
    private int _armed;

    /// <summary>Timers armed and not fired, changed off or disposed.</summary>
    public int Armed => Volatile.Read(ref _armed);

    public void Advance(TimeSpan by) => _inner.Advance(by);

    public override DateTimeOffset GetUtcNow() => _inner.GetUtcNow();

    public override long GetTimestamp() => _inner.GetTimestamp();

    public override long TimestampFrequency => _inner.TimestampFrequency;

    public override TimeZoneInfo LocalTimeZone => _inner.LocalTimeZone;

    public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
    {
        var timer = new WatchedTimer(this, callback, state, period);
        timer.Arm(dueTime);
        timer.Inner = _inner.CreateTimer(static s => ((WatchedTimer)s!).Fire(), timer, dueTime, period);
        return timer;
    }

    private sealed class WatchedTimer(WatchedClock clock, TimerCallback callback, object? state, TimeSpan period) : ITimer
    {
        private int _armed;
        private TimeSpan _period = period;

        public ITimer Inner { get; set; } = null!;

        public void Arm(TimeSpan dueTime)
        {
            var armed = dueTime != Timeout.InfiniteTimeSpan ? 1 : 0;
            var was = Interlocked.Exchange(ref _armed, armed);
            Interlocked.Add(ref clock._armed, armed - was);
        }

        public void Fire()
        {
            // A one-shot timer stops being waited on as it fires: its callback may arm the next wait.
            if (_period == Timeout.InfiniteTimeSpan || _period == TimeSpan.Zero)
            {
                Arm(Timeout.InfiniteTimeSpan);
            }
            callback(state);
        }

        public bool Change(TimeSpan dueTime, TimeSpan period)
        {
            _period = period;
            Arm(dueTime);
            return Inner.Change(dueTime, period);
        }

        public void Dispose()
        {
            Arm(Timeout.InfiniteTimeSpan);
            Inner.Dispose();
        }

        public ValueTask DisposeAsync()
        {
            Dispose();
            return ValueTask.CompletedTask;
        }
    }
}
