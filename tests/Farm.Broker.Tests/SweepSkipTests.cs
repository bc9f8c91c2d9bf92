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
    /// A queue that remembers a MessageId for duplicate detection, and one that forwards (with nothing
    /// to forward), are quiet queues too: swept every eighth tick, not every tick. The remembered id
    /// is still forgotten by the first sweep after its window.
    /// </summary>
    [Fact]
    public async Task QuietQueuesWithDuplicateDetectionOrForwarding_AreSweptOnlyEveryEighthTick_AndIdsStillExpire()
    {
        var window = TimeSpan.FromSeconds(30);
        var deduplicating = await _farm.CreateQueueAsync("dedup", new QueueSettings { RequiresDuplicateDetection = true, DuplicateDetectionHistoryTimeWindow = window });
        await _farm.CreateQueueAsync("archive");
        var forwarding = await _farm.CreateQueueAsync("forwarding", new QueueSettings { ForwardTo = "archive", ForwardDeadLetteredMessagesTo = "archive" });
        var sentAt = _farm.Time.GetUtcNow();
        await deduplicating.SendAsync([BrokerHarness.Text("once", messageId: "id-1")]);
        Assert.Single(await deduplicating.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 1, TimeSpan.Zero, default));
        await TickAsync();
        var before = (Dedup: deduplicating.TimerSweepsRun, Forwarding: forwarding.TimerSweepsRun);

        for (var tick = 0; tick < 80; tick++)
        {
            await TickAsync();
        }

        var expected = 80 / (QueueEntity.MaxSweepsSkipped + 1);
        Assert.InRange(deduplicating.TimerSweepsRun - before.Dedup, expected, expected + 1);
        Assert.InRange(forwarding.TimerSweepsRun - before.Forwarding, expected, expected + 1);
        Assert.Equal(1, deduplicating.DuplicateIdsInMemory);
        var duplicate = await deduplicating.SendAsync([BrokerHarness.Text("again", messageId: "id-1")]);
        Assert.Equal(0L, Assert.Single(duplicate));

        // Past the window and one housekeeping round (8 ticks): the id is forgotten, and the same id is stored again.
        while (_farm.Time.GetUtcNow() < sentAt + window + (_farm.Options.SweepInterval * (QueueEntity.MaxSweepsSkipped + 1)))
        {
            await TickAsync();
        }
        Assert.Equal(0, deduplicating.DuplicateIdsInMemory);
        Assert.NotEqual(0L, Assert.Single(await deduplicating.SendAsync([BrokerHarness.Text("later", messageId: "id-1")])));
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

    /// <summary>
    /// The container's sweep goes by its schedule: fifty quiet queues are each swept once every
    /// eight ticks, and the schedule holds about one entry per queue however long they stay quiet.
    /// </summary>
    [Fact]
    public async Task QuietQueues_AreEachSweptOnceEveryEighthTick_AndTheScheduleHoldsAboutOneEntryEach()
    {
        var queues = new List<QueueEntity>();
        for (var i = 0; i < 50; i++)
        {
            queues.Add(await _farm.CreateQueueAsync($"quiet-{i}"));
        }
        var host = _farm.Node.Containers.Single(c => c.TryGetEntity(queues[0].Id, out _));
        await TickAsync();
        var before = queues.Select(q => q.TimerSweepsRun).ToArray();

        for (var tick = 0; tick < 80; tick++)
        {
            await TickAsync();
            Assert.InRange(host.SweepEntries, 0, 2 * queues.Count);
        }

        var cycles = 80 / (QueueEntity.MaxSweepsSkipped + 1);
        Assert.All(queues.Select((q, i) => q.TimerSweepsRun - before[i]), swept => Assert.InRange(swept, cycles, cycles + 1));
    }

    /// <summary>
    /// A due time sooner than the one the queue is held for adds an entry and is swept on time; a
    /// later one adds nothing; the entry left behind by the sooner one is passed by when it comes.
    /// </summary>
    [Fact]
    public async Task ASoonerDueTime_IsSweptOnTime_ALaterOneAddsNothing_AndTheStaleEntryIsPassedBy()
    {
        var queue = await _farm.CreateQueueAsync("rescheduled");
        var host = _farm.Node.Containers.Single(c => c.TryGetEntity(queue.Id, out _));
        await TickAsync();
        var entries = host.SweepEntries;
        var now = _farm.Time.GetUtcNow().ToUnixTimeMilliseconds();

        queue.ScheduleSweep(now + 60_000);
        Assert.Equal(entries, host.SweepEntries);

        var swept = queue.TimerSweepsRun;
        queue.ScheduleSweep(now + 1);
        Assert.Equal(entries + 1, host.SweepEntries);
        await TickAsync();
        Assert.Equal(swept + 1, queue.TimerSweepsRun);

        // The housekeeping entry it was held for before is stale now: its tick sweeps nothing more.
        for (var tick = 0; tick < QueueEntity.MaxSweepsSkipped; tick++)
        {
            await TickAsync();
        }
        Assert.Equal(swept + 1, queue.TimerSweepsRun);
        await TickAsync();
        Assert.Equal(swept + 2, queue.TimerSweepsRun);
    }
}
