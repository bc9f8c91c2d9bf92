using Farm.Broker.Entities;
using Farm.Contracts.V1;
using static Farm.Broker.Tests.NumberedMessages;

namespace Farm.Broker.Tests;

/// <summary>
/// The node's message cache budget (MessageCacheSizePerNode), shared by all its entities: several
/// deep queues together keep no more than it (plus each one's floor) in memory, every one of them
/// keeps delivering in order, and the accounting comes back to zero once they are drained.
/// </summary>
public sealed class NodeMessageCacheTests : IAsyncLifetime
{
    private const int PerQueue = 300;
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync()
    {
        _farm = await BrokerHarness.StartAsync();
        _farm.Options.MessageCacheSizePerEntity = 100 * MessageBytes;
        _farm.Options.MessageCacheSizePerNode = 20 * MessageBytes;
        _farm.Options.MaxMessagesPerRefill = 7;
        // The node reads its options when it starts: start it again with these.
        await _farm.RestartAsync(crash: false);
    }

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    /// <summary>The node's budget, each queue's floor (an eighth of its own) and what one receive and one read-back add.</summary>
    private static long MostCachedBytes(int queues) => (20 * MessageBytes) + (queues * ((100 * MessageBytes / 8) + ((20 + 7) * MessageBytes)));



    [Fact]
    public async Task DeepQueues_ShareTheNodesBudget_AndEachDeliversEverythingInOrder()
    {
        var queues = new List<QueueEntity>();
        for (var q = 0; q < 3; q++)
        {
            var queue = await _farm.CreateQueueAsync($"q{q}");
            for (var i = 1; i <= PerQueue; i += 50)
            {
                await queue.SendAsync([.. Enumerable.Range(i, 50).Select(n => Numbered(n))]);
                Assert.InRange(_farm.Node.MessageCache.UsedBytes, 0, MostCachedBytes(q + 1));
            }
            queues.Add(queue);
        }
        // Without the node's budget each queue alone would keep 100 messages.
        Assert.True(queues.Sum(q => q.CachedMessageCount) < 3 * 100, $"{queues.Sum(q => q.CachedMessageCount)} messages cached");

        var received = queues.Select(_ => new List<int>()).ToList();
        while (received.Any(r => r.Count < PerQueue))
        {
            for (var q = 0; q < queues.Count; q++)
            {
                if (received[q].Count == PerQueue)
                {
                    continue;
                }
                using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
                var batch = await queues[q].ReceiveAsync(false, ReceiveMode.PeekLock, 20, TimeSpan.FromMinutes(10), deadline.Token);
                received[q].AddRange(batch.Select(NumberOf));
                await queues[q].SettleAsync(false, [.. batch.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);
                Assert.InRange(_farm.Node.MessageCache.UsedBytes, 0, MostCachedBytes(3));
            }
        }

        Assert.All(received, r => Assert.Equal(Enumerable.Range(1, PerQueue), r));
        Assert.Equal(0, _farm.Node.MessageCache.UsedBytes);
    }
    /// <summary>
    /// Many queues past the node's budget keep a floor each that shrinks with their number: 40 queues
    /// with a floor of an eighth of their own budget (12 messages) kept 20 + 40 x 12 messages; now the
    /// floors together stay within the node's budget, and every queue still delivers all, in order.
    /// </summary>
    [Fact]
    public async Task ManyQueues_PastTheNodesBudget_KeepFloorsThatShareIt_AndEachDeliversEverythingInOrder()
    {
        const int count = 40;
        const int each = 30;
        var queues = new List<QueueEntity>();
        for (var q = 0; q < count; q++)
        {
            queues.Add(await _farm.CreateQueueAsync($"many{q}"));
        }
        foreach (var queue in queues)
        {
            await queue.SendAsync([.. Enumerable.Range(1, each).Select(n => Numbered(n))]);
        }

        // Each queue keeps what its send brought while the node's budget had room, then at most one message more.
        var cached = queues.Sum(q => q.CachedMessageCount);
        Assert.True(cached <= 20 + (2 * count), $"{cached} messages cached by {count} queues");

        foreach (var queue in queues)
        {
            var received = new List<int>();
            while (received.Count < each)
            {
                using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
                var batch = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 20, TimeSpan.FromMinutes(10), deadline.Token);
                received.AddRange(batch.Select(NumberOf));
                await queue.SettleAsync(false, [.. batch.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);
            }
            Assert.Equal(Enumerable.Range(1, each), received);
        }
        Assert.Equal(0, _farm.Node.MessageCache.UsedBytes);
    }
}
