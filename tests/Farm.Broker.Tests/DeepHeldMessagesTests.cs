using Farm.Testing;
using Farm.Broker.Entities;
using Farm.Contracts.V1;
using static Farm.Broker.Tests.NumberedMessages;

namespace Farm.Broker.Tests;

/// <summary>
/// Scheduled and deferred messages far past a message cache of a few messages (issue "Bounded
/// memory"): memory keeps the first to come due and some deferred ones, the rest stay in the
/// container database, are found by index when they come due or are asked for by sequence
/// number, and each is delivered once, also across a crash.
/// </summary>
public sealed class DeepHeldMessagesTests : IAsyncLifetime
{
    private const int Held = 400;
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync()
    {
        _farm = await BrokerHarness.StartAsync();
        NumberedMessages.UseCacheOfFive(_farm);
    }

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    /// <summary>The cache's bound for each kind (scheduled, deferred, active), with room for a receive's batch and a read-back.</summary>
    private const int MostCached = 3 * (5 + 7) + 20;



    private static async Task<List<int>> ReceiveAllNowAsync(QueueEntity queue)
    {
        var numbers = new List<int>();
        while (true)
        {
            var batch = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 20, TimeSpan.Zero, default);
            if (batch.Count == 0)
            {
                return numbers;
            }
            numbers.AddRange(batch.Select(NumberOf));
            await queue.SettleAsync(false, [.. batch.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        }
    }

    [Fact]
    public async Task ThousandsOfScheduledMessages_KeepTheFirstToComeDueInMemory_AndEachComesDueOnceOnTime_ThroughACrash()
    {
        var queue = await _farm.CreateQueueAsync("q");
        var start = _farm.Time.GetUtcNow();
        // Message i comes due i seconds from now, sent in a shuffled order.
        var order = Enumerable.Range(1, Held).OrderBy(i => (i * 7919) % Held).ToList();
        foreach (var chunk in order.Chunk(50))
        {
            await queue.SendAsync([.. chunk.Select(i => Numbered(i, start.AddSeconds(i)))]);
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        }
        Assert.Equal(Held, queue.GetCounts().Scheduled);

        // Cancel two that are in the database only (they come due last).
        var last = await queue.PeekAsync(false, 1, Held);
        Assert.Equal(Held, last.Count);
        var cancel = last.Where(m => NumberOf(m) is Held or Held - 1).Select(m => m.SequenceNumber).ToList();
        await queue.CancelScheduledAsync(cancel);
        Assert.Equal(Held - 2, queue.GetCounts().Scheduled);

        var received = new List<int>();
        for (var second = 10; second <= Held + 10; second += 10)
        {
            if (second == 200)
            {
                await _farm.RestartAsync(crash: true);
                queue = await _farm.QueueAsync("q");
                Assert.InRange(queue.CachedMessageCount, 0, MostCached);
            }
            _farm.Time.Advance(TimeSpan.FromSeconds(10));
            var dueNow = Math.Min(second, Held - 2);
            await Eventually.UntilAsync(async () =>
            {
                queue.Sweep();
                received.AddRange(await ReceiveAllNowAsync(queue));
                return received.Count >= dueNow;
            }, TimeSpan.FromSeconds(30), $"the messages due by {second} s");
            Assert.Equal(Enumerable.Range(1, dueNow), received.Order());
        }
        Assert.Equal(0, queue.GetCounts().Total);
    }

    [Fact]
    public async Task HundredsOfDeferredMessages_StayInTheDatabase_AndAreReceivedBySequenceNumber_ThroughACrash()
    {
        var queue = await _farm.CreateQueueAsync("q");
        var sequences = new Dictionary<int, long>();
        for (var i = 1; i <= Held; i += 50)
        {
            var sent = await queue.SendAsync([.. Enumerable.Range(i, 50).Select(n => Numbered(n))]);
            for (var k = 0; k < 50; k++)
            {
                sequences[i + k] = sent[k];
            }
        }
        while (true)
        {
            var batch = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 20, TimeSpan.FromSeconds(30), new CancellationTokenSource(TimeSpan.FromSeconds(30)).Token);
            await queue.SettleAsync(false, [.. batch.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Defer })]);
            queue.Sweep();
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
            if (queue.GetCounts().Deferred == Held)
            {
                break;
            }
        }
        Assert.Equal(0, queue.GetCounts().Active);

        var first = await queue.ReceiveDeferredAsync([sequences[1], sequences[Held / 2], sequences[Held]], ReceiveMode.PeekLock);
        Assert.Equal([1, Held / 2, Held], first.Select(NumberOf));
        Assert.All(first, m => Assert.Equal(2, m.DeliveryCount));
        await queue.SettleAsync(false, [.. first.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);
        await Assert.ThrowsAsync<BrokerException>(() => queue.ReceiveDeferredAsync([sequences[1]], ReceiveMode.PeekLock));

        await _farm.RestartAsync(crash: true);
        queue = await _farm.QueueAsync("q");
        Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        Assert.Equal(Held - 3, queue.GetCounts().Deferred);

        var rest = new List<int>();
        foreach (var chunk in sequences.Where(s => s.Key is not 1 and not Held / 2 and not Held).Select(s => s.Value).Chunk(25))
        {
            var got = await queue.ReceiveDeferredAsync(chunk, ReceiveMode.ReceiveAndDelete);
            rest.AddRange(got.Select(NumberOf));
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        }
        Assert.Equal(Enumerable.Range(1, Held).Where(i => i is not 1 and not Held / 2 and not Held), rest);
        Assert.Equal(0, queue.GetCounts().Total);
    }
}
