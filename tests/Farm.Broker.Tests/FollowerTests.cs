using Farm.Testing;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.Contracts.V1;
using System.Data.Common;
using Microsoft.Data.Sqlite;
using Npgsql;
using static Farm.Broker.Tests.NumberedMessages;

namespace Farm.Broker.Tests;

/// <summary>
/// Subscriptions that follow their topic (QueueEntity.Follower.cs): a message they get unchanged is
/// theirs by the copy's membership, without a row. On a real node and real SQLite files, crashed
/// and restarted: each subscription keeps exactly what it had not settled, whatever it did with
/// the rest, and in-order completes write a done mark instead of a row per message.
/// </summary>
public sealed class FollowerTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;
    private PostgresFarmDatabase? _postgres;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync()
    {
        await _farm.DisposeAsync();
        if (_postgres is not null)
        {
            await _postgres.DisposeAsync();
        }
    }

    /// <summary>Moves the test to a node whose farm and container databases are on the PostgreSQL server.</summary>
    private async Task UsePostgresAsync()
    {
        await _farm.DisposeAsync();
        (_farm, _postgres) = await PostgresFarmDatabase.StartHarnessAsync("farm_follow");
    }

    private static async Task<IReadOnlyList<ReceivedMessage>> ReceiveAsync(QueueEntity subscription, int max, bool deadLetter = false)
    {
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        return await subscription.ReceiveAsync(deadLetter, ReceiveMode.PeekLock, max, TimeSpan.FromSeconds(10), deadline.Token);
    }

    private static Task SettleAsync(QueueEntity subscription, IEnumerable<ReceivedMessage> messages, Disposition disposition = Disposition.Complete, bool deadLetter = false) =>
        subscription.SettleAsync(deadLetter, [.. messages.Select(m => new Settlement { LockToken = m.LockToken, Disposition = disposition })]);

    /// <summary>
    /// Receives and completes <paramref name="count"/> messages (waiting for read-backs), then finds
    /// none left: the numbers and delivery counts in the order received.
    /// </summary>
    private static async Task<List<(int Number, int DeliveryCount)>> DrainAsync(QueueEntity subscription, int count, bool deadLetter = false)
    {
        var all = new List<(int, int)>();
        while (all.Count < count)
        {
            var batch = await ReceiveAsync(subscription, Math.Min(50, count - all.Count), deadLetter);
            all.AddRange(batch.Select(m => (NumberOf(m), m.DeliveryCount)));
            await SettleAsync(subscription, batch, deadLetter: deadLetter);
        }
        var left = subscription.GetCounts();
        Assert.Equal(0, deadLetter ? left.DeadLetter : left.Active);
        return all;
    }

    /// <summary>Rows the container database holds for an entity, tombstones included (the store's reads never return those).</summary>
    private async Task<long> RowsAsync(long entityId)
    {
        var record = await _farm.Node.Farm.GetContainerAsync(1) ?? throw new InvalidOperationException("no container");
        await using DbConnection connection = _postgres is null
            ? new SqliteConnection(record.ConnectionString)
            : new NpgsqlConnection(new NpgsqlConnectionStringBuilder(record.ConnectionString) { Pooling = false }.ConnectionString);
        await connection.OpenAsync();
        await using var command = connection.CreateCommand();
        command.CommandText = $"SELECT COUNT(*) FROM messages WHERE entity_id = {entityId}";
        return Convert.ToInt64(await command.ExecuteScalarAsync(), System.Globalization.CultureInfo.InvariantCulture);
    }

    private Task CopiesGoneAsync(TopicEntity topic, string what) => Eventually.UntilAsync(async () =>
    {
        topic.Sweep();
        return topic.GetCounts().Count == 0 && (await _farm.ReadContainerDirectlyAsync(1, topic.Id)).Messages.Count == 0;
    }, TimeSpan.FromSeconds(30), what);

    [Fact]
    public async Task AFollowerCompletingInOrder_WritesItsDoneMark_NotARowPerMessage()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        await topic.SendAsync([.. Enumerable.Range(1, 50).Select(n => Numbered(n))]);
        Assert.Equal(0, await RowsAsync(a.Id));
        Assert.Equal(0, await RowsAsync(b.Id));

        Assert.Equal(Enumerable.Range(1, 50), (await DrainAsync(a, 50)).Select(m => m.Number));

        // Nothing written per message: no row, no tombstone; the done mark says all 50 are settled.
        Assert.Equal(0, await RowsAsync(a.Id));
        var head = await _farm.ReadSubscriptionHeadDirectlyAsync(1, a.Id, topic.Id);
        Assert.Empty(head.Messages);
        Assert.Equal(50, head.Follower!.DoneThrough);
        // b holds every copy until it settles them too.
        Assert.Equal(50, (await _farm.ReadSubscriptionHeadDirectlyAsync(1, b.Id, topic.Id)).Messages.Count);
        Assert.Equal(Enumerable.Range(1, 50), (await DrainAsync(b, 50)).Select(m => m.Number));
        await CopiesGoneAsync(topic, "every copy goes once both followers settled it");
    }

    [Fact]
    public Task AfterACrash_EachFollowerHasExactlyWhatItHadNotSettled_InOrderOrNot_AbandonedDeferredOrDeadLettered() => CrashScenarioAsync();

    [PostgresFact]
    public async Task OnPostgreSql_AfterACrash_EachFollowerHasExactlyWhatItHadNotSettled()
    {
        await UsePostgresAsync();
        await CrashScenarioAsync();
    }

    private async Task CrashScenarioAsync()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        var c = await _farm.CreateSubscriptionAsync("t", "c");
        await topic.SendAsync([.. Enumerable.Range(1, 10).Select(n => Numbered(n))]);
        await topic.SendAsync([.. Enumerable.Range(11, 10).Select(n => Numbered(n))]);
        // Every one of them is theirs by the copies' memberships: no rows.
        Assert.Equal(0, await RowsAsync(c.Id));

        // a completes its first ten in order.
        var fromA = await ReceiveAsync(a, 10);
        await SettleAsync(a, fromA);
        // b takes ten and settles some of them out of order, with every disposition; 1, 8 and 10 stay locked.
        var fromB = (await ReceiveAsync(b, 10)).ToDictionary(NumberOf);
        Assert.Equal(Enumerable.Range(1, 10), fromB.Keys.Order());
        await SettleAsync(b, [fromB[2], fromB[5], fromB[7], fromB[9]]);
        await SettleAsync(b, [fromB[3]], Disposition.Abandon);
        await SettleAsync(b, [fromB[4]], Disposition.Defer);
        await SettleAsync(b, [fromB[6]], Disposition.DeadLetter);

        await _farm.RestartAsync(crash: true);
        a = await _farm.SubscriptionAsync("t", "a");
        b = await _farm.SubscriptionAsync("t", "b");
        c = await _farm.SubscriptionAsync("t", "c");

        Assert.Equal(Enumerable.Range(11, 10).Select(n => (n, 1)), await DrainAsync(a, 10));
        // b: the ones it held locked were delivered once (its delivery mark), the abandoned one once
        // (its row), the rest never; the completed ones are gone, the deferred and dead-lettered kept.
        Assert.Equal(
            new[] { (1, 2), (3, 2), (8, 2), (10, 2) }.Concat(Enumerable.Range(11, 10).Select(n => (n, 1))),
            await DrainAsync(b, 14));
        var deferred = Assert.Single(await b.ReceiveDeferredAsync([fromB[4].SequenceNumber], ReceiveMode.PeekLock));
        Assert.Equal(4, NumberOf(deferred));
        await SettleAsync(b, [deferred]);
        // Delivered once before it was dead-lettered, and once more from the dead-letter queue.
        Assert.Equal([(6, 2)], await DrainAsync(b, 1, deadLetter: true));
        Assert.Equal(Enumerable.Range(1, 20).Select(n => (n, 1)), await DrainAsync(c, 20));

        var restarted = await _farm.TopicAsync("t");
        await CopiesGoneAsync(restarted, "every copy goes once every follower settled it");
        // The tombstones went with the done marks that passed them.
        Assert.Equal(0, await RowsAsync(b.Id));
    }

    /// <summary>
    /// Without ordering a send can be overtaken: the first is accepted (sequence 1) and held before
    /// its fan-out, the second (2) commits, a follower receives and completes it, and only then
    /// does the first commit. The done mark written with that complete must stay below 1, or the
    /// first message's membership, committed later, would read as settled after a crash and be lost.
    /// </summary>
    [Fact]
    public async Task AnOvertakenSend_IsNotCoveredByTheDoneMarkOfTheOneThatOvertookIt_AcrossACrash()
    {
        var topic = await _farm.CreateTopicAsync("t", new TopicSettings { SupportOrdering = false });
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        await _farm.CreateSubscriptionAsync("t", "b");
        using var held = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        var holding = 0;
        topic.AcceptedForTests = _ =>
        {
            if (Interlocked.Exchange(ref holding, 1) == 0)
            {
                held.Set();
                release.Wait(TimeSpan.FromSeconds(60));
            }
        };
        var first = Task.Run(() => topic.SendAsync([Numbered(1)]));
        Assert.True(held.Wait(TimeSpan.FromSeconds(30)), "the first send never reached its fan-out");

        await topic.SendAsync([Numbered(2)]);
        var overtaking = Assert.Single(await ReceiveAsync(a, 10));
        Assert.Equal(2, NumberOf(overtaking));
        await SettleAsync(a, [overtaking]);
        Assert.True((await _farm.ReadSubscriptionHeadDirectlyAsync(1, a.Id, topic.Id)).Follower!.DoneThrough < 1,
            "the done mark passed a send that was accepted and not yet handed over");
        release.Set();
        await first;

        await _farm.RestartAsync(crash: true);
        a = await _farm.SubscriptionAsync("t", "a");
        var b = await _farm.SubscriptionAsync("t", "b");

        Assert.Equal([(1, 1)], await DrainAsync(a, 1));
        Assert.Equal([1, 2], (await DrainAsync(b, 2)).Select(m => m.Number).Order());
    }

    [Fact]
    public async Task ADeadLetteredOrDeferredMessage_DoesNotHoldTheDoneMarkBack()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        await _farm.CreateSubscriptionAsync("t", "b");
        await topic.SendAsync([.. Enumerable.Range(1, 10).Select(n => Numbered(n))]);

        var received = (await ReceiveAsync(a, 10)).ToDictionary(NumberOf);
        await SettleAsync(a, [received[1]], Disposition.DeadLetter);
        await SettleAsync(a, [received[2]], Disposition.Defer);
        await SettleAsync(a, received.Values.Where(m => NumberOf(m) > 2));

        // Their rows keep the two; the eight completes past them wrote the mark, not tombstones.
        Assert.Equal(2, await RowsAsync(a.Id));
        Assert.Equal(10, (await _farm.ReadSubscriptionHeadDirectlyAsync(1, a.Id, topic.Id)).Follower!.DoneThrough);

        await _farm.RestartAsync(crash: true);
        a = await _farm.SubscriptionAsync("t", "a");
        Assert.Equal([(1, 2)], await DrainAsync(a, 1, deadLetter: true));
        var deferred = Assert.Single(await a.ReceiveDeferredAsync([received[2].SequenceNumber], ReceiveMode.PeekLock));
        await SettleAsync(a, [deferred]);
        Assert.Equal(0, a.GetCounts().Total);
        Assert.Equal(0, await RowsAsync(a.Id));
    }

    [Fact]
    public async Task AFollowerPastItsCacheGetsRows_AndKeepsItsOrderAcrossACrash()
    {
        UseCacheOfFive(_farm);
        await _farm.RestartAsync(crash: false);
        var topic = await _farm.CreateTopicAsync("t");
        var fast = await _farm.CreateSubscriptionAsync("t", "fast");
        var slow = await _farm.CreateSubscriptionAsync("t", "slow");
        for (var i = 0; i < 300; i += 100)
        {
            await topic.SendAsync([.. Enumerable.Range(i + 1, 100).Select(n => Numbered(n))]);
        }
        Assert.Equal(Enumerable.Range(1, 300), (await DrainAsync(fast, 300)).Select(m => m.Number));
        // The slow one holds a few without rows (its cache's room), the rest as rows in order after them.
        Assert.InRange(await RowsAsync(slow.Id), 300 - 10, 300);

        await _farm.RestartAsync(crash: true);
        slow = await _farm.SubscriptionAsync("t", "slow");

        Assert.Equal(Enumerable.Range(1, 300), (await DrainAsync(slow, 300)).Select(m => m.Number));
        await CopiesGoneAsync(await _farm.TopicAsync("t"), "every copy goes once the slow one settled it");
    }

    [Fact]
    public async Task ASubscriptionTakingADeletedOnesSlot_GetsNoneOfItsMessages_BeforeOrAfterACrash()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var keep = await _farm.CreateSubscriptionAsync("t", "keep");
        var gone = await _farm.CreateSubscriptionAsync("t", "gone");
        await topic.SendAsync([.. Enumerable.Range(1, 5).Select(n => Numbered(n))]);
        var record = (await _farm.Node.Farm.GetEntityAsync("t/Subscriptions/gone"))!;
        var goneSlot = gone.Follower!.Slot;
        await _farm.Node.Farm.DeleteEntityAsync(record.Name);
        await _farm.Node.DropSubscriptionAsync(record);

        var next = await _farm.CreateSubscriptionAsync("t", "next");
        // It took the freed slot, following from the topic's next message only.
        Assert.Equal(goneSlot, next.Follower!.Slot);
        Assert.Equal(6, next.Follower.FollowFrom);
        Assert.Empty(await next.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default));
        await topic.SendAsync([Numbered(6)]);

        await _farm.RestartAsync(crash: true);
        Assert.Equal([6], (await DrainAsync(await _farm.SubscriptionAsync("t", "next"), 1)).Select(m => m.Number));
        Assert.Equal(Enumerable.Range(1, 6), (await DrainAsync(await _farm.SubscriptionAsync("t", "keep"), 6)).Select(m => m.Number));
        Assert.Equal(0, keep.Follower!.Slot);
    }
}
