using Farm.Broker.Entities;
using Farm.Contracts.V1;
using Farm.Testing;
using static Farm.Broker.Tests.NumberedMessages;

namespace Farm.Broker.Tests;

/// <summary>
/// Peek-lock first deliveries taken in sequence order are counted durably by one delivery mark per
/// entity (every never-scheduled message of the main queue at or below it was delivered) instead of
/// a write of each row (issue 14: a third of the row writes of a peek-lock queue). The counts a
/// receiver sees, before and after a crash, stay what per-row writes gave.
/// </summary>
public sealed class DeliveryMarkTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static async Task<IReadOnlyList<ReceivedMessage>> ReceiveAsync(QueueEntity queue, int max)
    {
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        return await queue.ReceiveAsync(false, ReceiveMode.PeekLock, max, TimeSpan.FromMinutes(10), deadline.Token);
    }

    /// <summary>Receives until <paramref name="count"/> messages came (locks kept).</summary>
    private static async Task<List<ReceivedMessage>> ReceiveAllAsync(QueueEntity queue, int count)
    {
        var received = new List<ReceivedMessage>();
        while (received.Count < count)
        {
            received.AddRange(await ReceiveAsync(queue, count - received.Count));
        }
        return received;
    }

    [Fact]
    public async Task FirstDeliveries_WriteTheMarkNotTheirRows_AndACrashStillCountsEachOnce()
    {
        var queue = await _farm.CreateQueueAsync("marked");
        await queue.SendAsync([.. Enumerable.Range(1, 5).Select(n => Numbered(n))]);

        var first = await ReceiveAllAsync(queue, 5);
        Assert.All(first, m => Assert.Equal(1, m.DeliveryCount));

        var stored = await _farm.ReadContainerDirectlyAsync(1, queue.Id);
        Assert.Equal(5, stored.DeliveredThrough);
        Assert.All(stored.Messages, row => Assert.Equal(0, row.DeliveryCount));

        // A crash with all five locked: each was delivered once, so each comes again as the second.
        await _farm.RestartAsync();
        var again = await ReceiveAllAsync(await _farm.QueueAsync("marked"), 5);
        Assert.Equal([1, 2, 3, 4, 5], again.Select(NumberOf));
        Assert.All(again, m => Assert.Equal(2, m.DeliveryCount));

        // Redeliveries write their rows, and a second crash keeps them.
        await _farm.RestartAsync();
        var third = await ReceiveAllAsync(await _farm.QueueAsync("marked"), 5);
        Assert.All(third, m => Assert.Equal(3, m.DeliveryCount));
    }

    [Fact]
    public async Task AScheduledMessageBelowTheMark_IsNotCountedByIt()
    {
        var queue = await _farm.CreateQueueAsync("scheduled-below");
        var due = _farm.Time.GetUtcNow().AddMinutes(1);
        await queue.SendAsync([Numbered(1, scheduledAt: due)]);
        await queue.SendAsync([Numbered(2), Numbered(3)]);

        var taken = await ReceiveAllAsync(queue, 2);
        Assert.Equal([2, 3], taken.Select(NumberOf));
        Assert.Equal(3, (await _farm.ReadContainerDirectlyAsync(1, queue.Id)).DeliveredThrough);

        await _farm.RestartAsync();
        _farm.Time.Advance(TimeSpan.FromMinutes(2));
        var restarted = await _farm.QueueAsync("scheduled-below");
        await _farm.SweepUntilAsync(() => restarted.Peek(false, 0, 10).Count == 3, "the scheduled message to come due");
        var after = await ReceiveAllAsync(restarted, 3);

        // Never delivered: its first delivery now, whatever the mark above it says.
        Assert.Equal(1, after.Single(m => NumberOf(m) == 1).DeliveryCount);
        Assert.All(after.Where(m => NumberOf(m) != 1), m => Assert.Equal(2, m.DeliveryCount));
    }

    [Fact]
    public async Task AQueueWhoseMessagesGetOneDelivery_WritesEachRow_NotTheMark()
    {
        var queue = await _farm.CreateQueueAsync("one-delivery", new QueueSettings { MaxDeliveryCount = 1 });
        await queue.SendAsync([Numbered(1), Numbered(2)]);

        Assert.All(await ReceiveAllAsync(queue, 2), m => Assert.Equal(1, m.DeliveryCount));

        var stored = await _farm.ReadContainerDirectlyAsync(1, queue.Id);
        Assert.Equal(0, stored.DeliveredThrough);
        Assert.All(stored.Messages, row => Assert.Equal(1, row.DeliveryCount));
    }

    [Fact]
    public async Task MarkedMessagesLeftInTheDatabase_AreReadBackCounted()
    {
        var queue = await _farm.CreateQueueAsync("marked-deep");
        await queue.SendAsync([.. Enumerable.Range(1, 30).Select(n => Numbered(n))]);
        var first = await ReceiveAllAsync(queue, 12);
        Assert.All(first, m => Assert.Equal(1, m.DeliveryCount));
        Assert.Equal(12, (await _farm.ReadContainerDirectlyAsync(1, queue.Id)).DeliveredThrough);

        // The new owner loads a head of five: the other seven marked messages are read back from the
        // database as receivers complete the head.
        UseCacheOfFive(_farm);
        await _farm.RestartAsync();
        var restarted = await _farm.QueueAsync("marked-deep");
        var again = new List<ReceivedMessage>();
        while (again.Count < 14)
        {
            var batch = await ReceiveAsync(restarted, 14 - again.Count);
            again.AddRange(batch);
            await restarted.SettleAsync(false, [.. batch.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);
        }
        Assert.Equal([.. Enumerable.Range(1, 14)], again.Select(NumberOf));
        Assert.All(again.Take(12), m => Assert.Equal(2, m.DeliveryCount));
        Assert.All(again.Skip(12), m => Assert.Equal(1, m.DeliveryCount));
    }

    /// <summary>
    /// A message given back undelivered below the mark (a closed prefetch buffer) stays uncounted
    /// through a crash: its row stores <see cref="Farm.ContainerStore.Containers.MessageRecord.UncountedBelowMark"/>,
    /// which the mark does not count, while the others at or below the mark read as delivered once.
    /// </summary>
    [Fact]
    public async Task AMessageGivenBackUndeliveredBelowTheMark_StaysUncountedThroughACrash()
    {
        var queue = await _farm.CreateQueueAsync("given-back");
        await queue.SendAsync([.. Enumerable.Range(1, 3).Select(n => Numbered(n))]);
        var taken = await ReceiveAllAsync(queue, 3);
        Assert.Equal(3, (await _farm.ReadContainerDirectlyAsync(1, queue.Id)).DeliveredThrough);
        await queue.ReleaseUndeliveredAsync(false, [taken.Single(m => NumberOf(m) == 2).LockToken]);

        // While the node runs: not counted, so its next delivery is its first again.
        var next = Assert.Single(await ReceiveAsync(queue, 1));
        Assert.Equal((2, 1), (NumberOf(next), next.DeliveryCount));
        await queue.ReleaseUndeliveredAsync(false, [next.LockToken]);

        // After a crash: still never delivered; the two left locked were delivered once.
        await _farm.RestartAsync();
        var again = await ReceiveAllAsync(await _farm.QueueAsync("given-back"), 3);
        Assert.Equal([(1, 2), (2, 1), (3, 2)], again.Select(m => (NumberOf(m), m.DeliveryCount)).OrderBy(p => p.Item1));
    }

    [Fact]
    public async Task ASubscriptionsFirstDeliveries_AreCountedByItsMark()
    {
        await _farm.CreateTopicAsync("marked-topic");
        var subscription = await _farm.CreateSubscriptionAsync("marked-topic", "all");
        var topic = await _farm.TopicAsync("marked-topic");
        await topic.SendAsync([Numbered(1), Numbered(2), Numbered(3)]);

        Assert.All(await ReceiveAllAsync(subscription, 3), m => Assert.Equal(1, m.DeliveryCount));
        var stored = await _farm.ReadContainerDirectlyAsync(1, subscription.Id);
        Assert.Equal(3, stored.DeliveredThrough);

        await _farm.RestartAsync();
        var again = await ReceiveAllAsync(await _farm.SubscriptionAsync("marked-topic", "all"), 3);
        Assert.All(again, m => Assert.Equal(2, m.DeliveryCount));
    }
}
