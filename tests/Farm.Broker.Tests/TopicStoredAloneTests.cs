using Farm.Testing;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;
using Google.Protobuf;
using static Farm.Broker.Tests.BrokerHarness;
using static Farm.Broker.Tests.NumberedMessages;

namespace Farm.Broker.Tests;

/// <summary>
/// A message exactly one subscription gets is stored as that subscription's row alone, payload and
/// all, with no copy in the topic (issue 14: a topic with one subscription costs what a queue does);
/// a message several get is stored once as the topic's copy. Either way the topic counts it once
/// towards its size and MaxSizeInMegabytes, also after a crash, a cache that holds only a few
/// messages, and a settlement that changes the message.
/// </summary>
public sealed class TopicStoredAloneTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static Message To(string who, int i)
    {
        var message = new Message { MessageId = $"{who}-{i}", Body = ByteString.CopyFromUtf8($"{who}-{i}") };
        message.ApplicationProperties["to"] = new PropertyValue { StringValue = who };
        return message;
    }

    private static async Task<IReadOnlyList<ReceivedMessage>> ReceiveAsync(QueueEntity subscription, int max)
    {
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        return await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, max, TimeSpan.FromSeconds(10), deadline.Token);
    }

    private static Task CompleteAsync(QueueEntity subscription, IEnumerable<ReceivedMessage> messages) =>
        subscription.SettleAsync(false, [.. messages.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);

    /// <summary>Every row the container database holds for <paramref name="entityId"/>.</summary>
    private async Task<IReadOnlyList<MessageRecord>> RowsAsync(long entityId) => (await _farm.ReadContainerDirectlyAsync(1, entityId)).Messages;

    [Fact]
    public async Task AMessageOneSubscriptionGets_IsItsRowAlone_AndOneSeveralGet_IsTheTopicsCopy_EachCountedOnce()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a", null, SqlRule("a", "to IN ('a', 'both')"));
        var b = await _farm.CreateSubscriptionAsync("t", "b", null, SqlRule("b", "to IN ('b', 'both')"));

        await topic.SendAsync([To("a", 1), To("both", 2), To("b", 3)]);

        var copies = await RowsAsync(topic.Id);
        var both = Assert.Single(copies);
        Assert.Equal("both-2", Message.Parser.ParseFrom(both.Payload).MessageId);
        // The message both got is theirs by the copy's membership (they follow the topic): no rows.
        var aRows = await RowsAsync(a.Id);
        Assert.Equal("a-1", Message.Parser.ParseFrom(Assert.Single(aRows).Payload).MessageId);
        var aHead = await _farm.ReadSubscriptionHeadDirectlyAsync(1, a.Id, topic.Id);
        Assert.True(aHead.Messages.Single(m => m.SequenceNumber == both.SequenceNumber).Implicit);
        var bAlone = (await RowsAsync(b.Id)).Single(r => r.Payload is not null);
        var aAlone = aRows.Single(r => r.Payload is not null);
        Assert.Equal((3L, (long)both.PayloadSize + aAlone.PayloadSize + bAlone.PayloadSize), topic.GetCounts());

        var fromA = await ReceiveAsync(a, 10);
        Assert.Equal(["a-1", "both-2"], fromA.Select(m => m.Message.MessageId).Order());
        Assert.Equal("a-1", fromA.Single(m => m.Message.MessageId == "a-1").Message.Body.ToStringUtf8());
        await CompleteAsync(a, fromA);
        Assert.Equal((2L, (long)both.PayloadSize + bAlone.PayloadSize), topic.GetCounts());
        Assert.Single(await RowsAsync(topic.Id));

        var fromB = await ReceiveAsync(b, 10);
        Assert.Equal(["b-3", "both-2"], fromB.Select(m => m.Message.MessageId).Order());
        await CompleteAsync(b, fromB);
        await Eventually.UntilAsync(async () =>
        {
            topic.Sweep();
            return topic.GetCounts() == (0, 0) && (await RowsAsync(topic.Id)).Count == 0;
        }, TimeSpan.FromSeconds(30), "the copy goes once both subscriptions completed it; nothing is counted");
        Assert.Empty(await RowsAsync(a.Id));
        Assert.Empty(await RowsAsync(b.Id));
    }

    /// <summary>
    /// A topic with one subscription and a cache of five: most of its messages wait in the database,
    /// stored alone; after a crash the new node counts them from the database, and they arrive once,
    /// in order, with their bodies, leaving nothing counted and nothing stored.
    /// </summary>
    [Fact]
    public async Task MessagesStoredAlone_PastTheCacheAndThroughACrash_AreCountedFromTheDatabase_AndArriveOnceInOrder()
    {
        UseCacheOfFive(_farm);
        await _farm.RestartAsync(crash: false);
        var topic = await _farm.CreateTopicAsync("t");
        var only = await _farm.CreateSubscriptionAsync("t", "only");
        const int Sent = 300;
        for (var i = 0; i < Sent; i += 50)
        {
            await topic.SendAsync([.. Enumerable.Range(i + 1, 50).Select(n => Numbered(n))]);
        }
        Assert.Empty(await RowsAsync(topic.Id));
        var bytes = (await RowsAsync(only.Id)).Sum(r => (long)r.PayloadSize);
        Assert.Equal(((long)Sent, bytes), topic.GetCounts());

        var received = new List<int>();
        var first = await ReceiveAsync(only, 20);
        received.AddRange(first.Select(NumberOf));
        await CompleteAsync(only, first);
        var left = (await RowsAsync(only.Id)).Sum(r => (long)r.PayloadSize);
        Assert.Equal(((long)Sent - received.Count, left), topic.GetCounts());

        await _farm.RestartAsync(crash: true);
        topic = await _farm.TopicAsync("t");
        only = await _farm.SubscriptionAsync("t", "only");
        Assert.Equal(((long)Sent - received.Count, left), topic.GetCounts());

        while (received.Count < Sent)
        {
            var batch = await ReceiveAsync(only, 20);
            received.AddRange(batch.Select(NumberOf));
            await CompleteAsync(only, batch);
        }
        Assert.Equal(Enumerable.Range(1, Sent), received);
        Assert.Equal((0L, 0L), topic.GetCounts());
        Assert.Empty(await RowsAsync(only.Id));
        Assert.Empty(await RowsAsync(topic.Id));
    }

    /// <summary>
    /// MaxSizeInMegabytes counts messages stored alone as it counts copies: a 1 MB topic with one
    /// subscription takes five 200 KB messages, refuses the sixth, still refuses it after a crash
    /// (the new node counts the rows), and takes it once one was completed.
    /// </summary>
    [Fact]
    public async Task MaxSizeInMegabytes_CountsMessagesStoredAlone_ThroughACrash()
    {
        var topic = await _farm.CreateTopicAsync("t", new TopicSettings { MaxSizeInMegabytes = 1 });
        await _farm.CreateSubscriptionAsync("t", "only");
        var big = new Message { Body = ByteString.CopyFrom(new byte[200 * 1024]) };
        for (var i = 0; i < 5; i++)
        {
            await topic.SendAsync([big]);
        }
        Assert.Equal("QUOTA_EXCEEDED", Farm.Contracts.FarmErrorNames.Of((await Assert.ThrowsAsync<BrokerException>(() => topic.SendAsync([big]))).Code));

        await _farm.RestartAsync(crash: true);
        topic = await _farm.TopicAsync("t");
        var only = await _farm.SubscriptionAsync("t", "only");
        Assert.Equal(5, topic.GetCounts().Count);
        Assert.Equal("QUOTA_EXCEEDED", Farm.Contracts.FarmErrorNames.Of((await Assert.ThrowsAsync<BrokerException>(() => topic.SendAsync([big]))).Code));

        await CompleteAsync(only, await ReceiveAsync(only, 1));
        await topic.SendAsync([big]);
        Assert.Equal(5, topic.GetCounts().Count);
        Assert.Equal(5, only.GetCounts().Active);
    }

    /// <summary>
    /// An abandon that adds properties rewrites a message stored alone: the topic's size follows the
    /// new payload, in memory and, after a crash, from the database.
    /// </summary>
    [Fact]
    public async Task AnAbandonThatModifiesAMessageStoredAlone_ChangesTheTopicsSize_AsTheDatabaseHasIt()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var only = await _farm.CreateSubscriptionAsync("t", "only");
        await topic.SendAsync([To("x", 1), To("x", 2)]);
        var before = topic.GetCounts();

        var message = (await ReceiveAsync(only, 1)).Single();
        await only.SettleAsync(false, [new Settlement
        {
            LockToken = message.LockToken,
            Disposition = Disposition.Abandon,
            PropertiesToModify = { ["reason"] = new PropertyValue { StringValue = new string('r', 500) } },
        }]);

        var stored = (await RowsAsync(only.Id)).Sum(r => (long)r.PayloadSize);
        Assert.True(stored > before.Bytes + 500, $"the modified payload is stored: {stored} bytes against {before.Bytes}");
        Assert.Equal((2L, stored), topic.GetCounts());
        await _farm.RestartAsync(crash: true);
        Assert.Equal((2L, stored), (await _farm.TopicAsync("t")).GetCounts());
    }

    /// <summary>A scheduled message keeps its topic copy even with one subscription: cancelling it finds it there.</summary>
    [Fact]
    public async Task AScheduledMessage_KeepsItsCopy_AndCancels()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var only = await _farm.CreateSubscriptionAsync("t", "only");
        var scheduled = Numbered(1, _farm.Time.GetUtcNow().AddMinutes(5));

        var sequence = (await topic.SendAsync([scheduled])).Single();

        Assert.Equal(sequence, Assert.Single(await RowsAsync(topic.Id)).SequenceNumber);
        await topic.CancelScheduledAsync([sequence]);
        Assert.Equal(0, only.GetCounts().Scheduled);
        Assert.Empty(await RowsAsync(only.Id));
    }

    /// <summary>
    /// Messages stored alone leave the topic's count however they leave their subscription:
    /// forwarded on (ForwardTo), purged, or with the subscription deleted.
    /// </summary>
    [Fact]
    public async Task MessagesStoredAlone_LeaveTheTopicsCount_WhenForwarded_Purged_OrTheirSubscriptionDeleted()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var audit = await _farm.CreateQueueAsync("audit");
        await _farm.CreateSubscriptionAsync("t", "fwd", new SubscriptionSettings { ForwardTo = "audit" }, SqlRule("fwd", "to = 'fwd'"));
        var purged = await _farm.CreateSubscriptionAsync("t", "purged", null, SqlRule("purged", "to = 'purged'"));
        await _farm.CreateSubscriptionAsync("t", "deleted", null, SqlRule("deleted", "to = 'deleted'"));

        await topic.SendAsync([To("fwd", 1), To("fwd", 2), To("purged", 3), To("purged", 4), To("deleted", 5)]);
        Assert.Empty(await RowsAsync(topic.Id));
        await Eventually.UntilAsync(() => audit.GetCounts().Active == 2, TimeSpan.FromSeconds(30), "both forwarded to the queue");
        // A forward commits at the target first and deletes from the subscription after, so the
        // topic's count drops a moment after the queue has the messages.
        await Eventually.UntilAsync(() => topic.GetCounts().Count == 3, TimeSpan.FromSeconds(30), "the forwarded two leave the topic's count");

        var (deleted, _, more) = await purged.DeleteMessagesAsync(false, 10, 0, CancellationToken.None);
        Assert.Equal((2, false), (deleted, more));
        Assert.Equal(1, topic.GetCounts().Count);

        var record = (await _farm.Node.Farm.GetEntityAsync("t/Subscriptions/deleted"))!;
        await _farm.Node.Farm.DeleteEntityAsync(record.Name);
        await _farm.Node.DropSubscriptionAsync(record);
        Assert.Equal((0L, 0L), topic.GetCounts());
    }
}
