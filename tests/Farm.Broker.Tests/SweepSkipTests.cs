using Farm.Broker.Entities;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// The container's sweep timer passes a queue with nothing due by (at most
/// <see cref="QueueEntity.MaxSweepsSkipped"/> ticks in a row), and never past a due time: a lock
/// taken, a message scheduled or one with a time to live makes the next sweep come on time.
/// </summary>
public sealed class SweepSkipTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    /// <summary>One sweep tick, returning once the sweep it fires has run (on whichever thread).</summary>
    private Task TickAsync() => TestClock.AdvanceAndSettleAsync(_farm.Time, _farm.Options.SweepInterval);

    [Fact]
    public async Task AnIdleQueue_IsSweptOnlyEveryEighthTick()
    {
        var queue = await _farm.CreateQueueAsync("idle");
        await TickAsync();
        var before = queue.TimerSweepsRun;

        for (var tick = 0; tick < 80; tick++)
        {
            await TickAsync();
        }

        Assert.InRange(queue.TimerSweepsRun - before, 80 / (QueueEntity.MaxSweepsSkipped + 1), (80 / (QueueEntity.MaxSweepsSkipped + 1)) + 1);
    }

    /// <summary>
    /// Due sooner than the sweep that runs anyway (every eighth tick), at several times: the ticks the
    /// queue is passed by fall differently against each.
    /// </summary>
    [Theory]
    [InlineData(1000)]
    [InlineData(1250)]
    [InlineData(1500)]
    public async Task ALockTakenBetweenSweeps_IsReleasedByTheFirstTickAfterItExpires(int lockMs)
    {
        var lockDuration = TimeSpan.FromMilliseconds(lockMs);
        var queue = await _farm.CreateQueueAsync("locks", new QueueSettings { LockDuration = lockDuration });
        await queue.SendAsync([BrokerHarness.Text("x")]);
        // Idle a while first, so the queue is being passed by when the lock comes.
        for (var tick = 0; tick < 3; tick++)
        {
            await TickAsync();
        }

        Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        var lockedAt = _farm.Time.GetUtcNow();
        while (_farm.Time.GetUtcNow() + _farm.Options.SweepInterval < lockedAt + lockDuration)
        {
            await TickAsync();
            Assert.Equal(1, queue.GetCounts().Locked);
        }
        // The first tick at or after the expiry.
        await TickAsync();

        Assert.Equal(0, queue.GetCounts().Locked);
    }

    [Theory]
    [InlineData(500)]
    [InlineData(1000)]
    [InlineData(1500)]
    public async Task AMessageScheduledBetweenSweeps_BecomesActiveByTheFirstTickAfterItsTime(int delayMs)
    {
        var queue = await _farm.CreateQueueAsync("scheduled");
        for (var tick = 0; tick < 3; tick++)
        {
            await TickAsync();
        }

        var at = _farm.Time.GetUtcNow() + TimeSpan.FromMilliseconds(delayMs);
        await queue.SendAsync([BrokerHarness.Text("later", scheduledAt: at)]);
        while (_farm.Time.GetUtcNow() + _farm.Options.SweepInterval < at)
        {
            await TickAsync();
            Assert.Equal(0, queue.GetCounts().Active);
        }
        await TickAsync();

        Assert.Equal(1, queue.GetCounts().Active);
    }
}
