using Farm.Testing;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.Contracts.V1;
using static Farm.Broker.Tests.NumberedMessages;

namespace Farm.Broker.Tests;

/// <summary>
/// A topic whose subscriptions have a message cache of a few messages (issue "Bounded memory"): a
/// subscription far behind the others keeps only its head in memory, the topic keeps none of its
/// stored copies there, and every copy goes once no subscription row points at it any more, also
/// when a deferred or dead-lettered message held it longer than the rest.
/// </summary>
public sealed class DeepTopicTests : IAsyncLifetime
{
    private const int Queued = 2000;
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync()
    {
        _farm = await BrokerHarness.StartAsync();
        NumberedMessages.UseCacheOfFive(_farm);
    }

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    /// <summary>The cache's bound, with room for what a receive holds locked and what arrives above the frontier while it is read back.</summary>
    private const int MostCached = 5 + 20 + 7;



    private static async Task<IReadOnlyList<ReceivedMessage>> ReceiveAsync(QueueEntity subscription, int max, bool deadLetter = false)
    {
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        return await subscription.ReceiveAsync(deadLetter, ReceiveMode.PeekLock, max, TimeSpan.FromMinutes(10), deadline.Token);
    }

    private static Task SettleAsync(QueueEntity subscription, IEnumerable<ReceivedMessage> messages, Disposition disposition = Disposition.Complete, bool deadLetter = false) =>
        subscription.SettleAsync(deadLetter, [.. messages.Select(m => new Settlement { LockToken = m.LockToken, Disposition = disposition })]);

    private static async Task<List<int>> DrainAsync(QueueEntity subscription, int count)
    {
        var numbers = new List<int>();
        while (numbers.Count < count)
        {
            var batch = await ReceiveAsync(subscription, 20);
            numbers.AddRange(batch.Select(NumberOf));
            await SettleAsync(subscription, batch);
            Assert.InRange(subscription.CachedMessageCount, 0, MostCached);
        }
        return numbers;
    }

    /// <summary>Sweeps the topic (its timer runs on the test's manual clock) until <paramref name="count"/> copies are left, in its count and in the database.</summary>
    private async Task CopiesLeftAsync(TopicEntity topic, int count, string what) =>
        await Eventually.UntilAsync(async () =>
        {
            topic.Sweep();
            return topic.GetCounts().Count == count && (await _farm.ReadContainerDirectlyAsync(1, topic.Id)).Messages.Count == count;
        }, TimeSpan.FromSeconds(30), what);

    [Fact]
    public async Task ASlowSubscription_BehindAFastOne_KeepsOnlyItsHead_AndGetsEveryMessageOnceInOrder_ThroughACrash()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var fast = await _farm.CreateSubscriptionAsync("t", "fast");
        var slow = await _farm.CreateSubscriptionAsync("t", "slow");
        for (var i = 0; i < Queued; i += 100)
        {
            await topic.SendAsync([.. Enumerable.Range(i + 1, 100).Select(n => Numbered(n))]);
            Assert.Equal(Enumerable.Range(i + 1, 100), await DrainAsync(fast, 100));
            Assert.InRange(slow.CachedMessageCount, 0, MostCached);
        }
        Assert.Equal(Queued, slow.GetCounts().Active);
        await CopiesLeftAsync(topic, Queued, "every copy the slow subscription points at is kept");

        var before = await DrainAsync(slow, 700);
        await CopiesLeftAsync(topic, Queued - before.Count, "the copies only the drained messages pointed at are deleted");
        await _farm.RestartAsync(crash: true);

        slow = await _farm.SubscriptionAsync("t", "slow");
        topic = await _farm.TopicAsync("t");
        Assert.InRange(slow.CachedMessageCount, 0, MostCached);
        await Eventually.UntilAsync(() => slow.GetCounts().Active == Queued - before.Count, TimeSpan.FromSeconds(10), "the slow subscription's tail counted");
        var after = await DrainAsync(slow, Queued - before.Count);
        Assert.Equal(Enumerable.Range(1, Queued), before.Concat(after));
        Assert.Empty(await (await _farm.SubscriptionAsync("t", "fast")).ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        await CopiesLeftAsync(topic, 0, "every copy is deleted once both subscriptions have them all");
        Assert.Equal(0, topic.GetCounts().Bytes);
    }

    /// <summary>
    /// A slow subscription's messages that expire past its cache go in the database, found through
    /// the expiry index with no receiver: deleted, their copies go too; dead-lettered, the
    /// dead-letter queue holds the copies until it is drained.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task ASlowSubscriptionsMessages_ExpiringPastItsCache_LetTheirCopiesGo(bool deadLetterOnExpiry)
    {
        var topic = await _farm.CreateTopicAsync("t");
        var fast = await _farm.CreateSubscriptionAsync("t", "fast");
        var slow = await _farm.CreateSubscriptionAsync("t", "slow", new SubscriptionSettings
        {
            DefaultMessageTimeToLive = TimeSpan.FromMinutes(1),
            DeadLetteringOnMessageExpiration = deadLetterOnExpiry,
        });
        for (var i = 0; i < 500; i += 100)
        {
            await topic.SendAsync([.. Enumerable.Range(i + 1, 100).Select(n => Numbered(n))]);
        }
        Assert.Equal(Enumerable.Range(1, 500), await DrainAsync(fast, 500));
        await CopiesLeftAsync(topic, 500, "the slow subscription keeps every copy");

        _farm.Time.Advance(TimeSpan.FromMinutes(2));
        await _farm.SweepUntilAsync(() =>
        {
            Assert.InRange(slow.CachedMessageCount, 0, MostCached);
            var counts = slow.GetCounts();
            return counts.Active == 0 && counts.DeadLetter == (deadLetterOnExpiry ? 500 : 0);
        }, "every message of the slow subscription expired");

        if (deadLetterOnExpiry)
        {
            await CopiesLeftAsync(topic, 500, "the dead-lettered messages keep their copies");
            var dead = new List<int>();
            while (dead.Count < 500)
            {
                var batch = await ReceiveAsync(slow, 20, deadLetter: true);
                dead.AddRange(batch.Select(NumberOf));
                await SettleAsync(slow, batch, deadLetter: true);
            }
            Assert.Equal(Enumerable.Range(1, 500), dead);
        }
        await CopiesLeftAsync(topic, 0, "every copy is deleted once nothing points at it");
    }

    /// <summary>
    /// Purging a slow subscription, and then its dead-letter queue, lets every copy go once nothing
    /// points at it; the fast subscription, already drained, is not touched.
    /// </summary>
    [Fact]
    public async Task PurgingASlowSubscriptionAndItsDeadLetterQueue_LetsTheCopiesGo()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var fast = await _farm.CreateSubscriptionAsync("t", "fast");
        var slow = await _farm.CreateSubscriptionAsync("t", "slow");
        await topic.SendAsync([.. Enumerable.Range(1, 300).Select(n => Numbered(n))]);
        await DrainAsync(fast, 300);
        var head = await ReceiveAsync(slow, 10);
        await SettleAsync(slow, head, Disposition.DeadLetter);

        var purged = await slow.DeleteMessagesAsync(false, 1000, 0, CancellationToken.None);
        Assert.Equal((300 - head.Count, false), (purged.Deleted, purged.More));
        await CopiesLeftAsync(topic, head.Count, "only the dead-lettered messages' copies are kept");
        Assert.Equal(head.Count, (await slow.DeleteMessagesAsync(true, 100, 0, CancellationToken.None)).Deleted);
        await CopiesLeftAsync(topic, 0, "every copy is deleted once nothing points at it");
        Assert.Equal(0, slow.GetCounts().Total);
    }

    [Fact]
    public async Task PeekOfASlowSubscription_WalksPastItsCache()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var slow = await _farm.CreateSubscriptionAsync("t", "slow");
        for (var i = 0; i < 500; i += 100)
        {
            await topic.SendAsync([.. Enumerable.Range(i + 1, 100).Select(n => Numbered(n))]);
        }

        var peeked = await slow.PeekAsync(false, 101, 50);

        Assert.Equal(Enumerable.Range(101, 50), peeked.Select(NumberOf));
        Assert.InRange(slow.CachedMessageCount, 0, MostCached);
    }

    [Fact]
    public async Task CopiesHeldByADeferredAndADeadLetteredMessage_GoOnceThoseAreSettled()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var fast = await _farm.CreateSubscriptionAsync("t", "fast");
        var slow = await _farm.CreateSubscriptionAsync("t", "slow");
        await topic.SendAsync([.. Enumerable.Range(1, 300).Select(n => Numbered(n))]);
        await DrainAsync(fast, 300);

        var head = await ReceiveAsync(slow, 20);
        var deferred = head.Single(m => NumberOf(m) == 3);
        var deadLettered = head.Single(m => NumberOf(m) == 5);
        await SettleAsync(slow, [deferred], Disposition.Defer);
        await SettleAsync(slow, [deadLettered], Disposition.DeadLetter);
        await SettleAsync(slow, head.Where(m => m != deferred && m != deadLettered));
        var rest = await DrainAsync(slow, 300 - head.Count);
        Assert.Equal(Enumerable.Range(head.Count + 1, 300 - head.Count), rest);

        await CopiesLeftAsync(topic, 2, "only the deferred and the dead-lettered message's copies are kept");

        var again = Assert.Single(await slow.ReceiveDeferredAsync([deferred.SequenceNumber], ReceiveMode.PeekLock));
        Assert.Equal(3, NumberOf(again));
        await SettleAsync(slow, [again]);
        await CopiesLeftAsync(topic, 1, "the deferred message's copy goes once it is completed");

        var dead = Assert.Single(await ReceiveAsync(slow, 5, deadLetter: true));
        Assert.Equal(5, NumberOf(dead));
        await SettleAsync(slow, [dead], deadLetter: true);
        await CopiesLeftAsync(topic, 0, "the dead letter's copy goes once it is completed");
    }

    [Fact]
    public async Task DeletingTheSlowSubscription_LetsItsCopiesGo()
    {
        var topic = await _farm.CreateTopicAsync("t");
        await _farm.CreateSubscriptionAsync("t", "fast");
        await _farm.CreateSubscriptionAsync("t", "slow");
        await topic.SendAsync([.. Enumerable.Range(1, 300).Select(n => Numbered(n))]);
        await DrainAsync(await _farm.SubscriptionAsync("t", "fast"), 300);
        await CopiesLeftAsync(topic, 300, "the slow subscription holds every copy");

        var record = (await _farm.Node.Farm.GetEntityAsync("t/Subscriptions/slow"))!;
        await _farm.Node.Farm.DeleteEntityAsync(record.Name);
        await _farm.Node.DropSubscriptionAsync(record);

        await CopiesLeftAsync(topic, 0, "nothing points at the copies any more");
    }
}
