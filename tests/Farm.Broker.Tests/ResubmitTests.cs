using Farm.Broker.Entities;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Testing;

namespace Farm.Broker.Tests;

/// <summary>
/// Resubmitting dead letters (issue "Watch and steer the farm"): each goes back to its queue as a
/// new message with the same body and properties, a fresh delivery count and time to live, and
/// leaves the dead-letter queue in the same transaction, so a crash leaves it in exactly one place.
/// A subscription's go back in place (they share their topic's stored body), to that subscription only.
/// </summary>
public sealed class ResubmitTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static string Body(ReceivedMessage m) => m.Message.Body.ToStringUtf8();

    /// <summary>Sends the messages and dead-letters each (received once, then dead-lettered by the receiver).</summary>
    private static async Task<List<ReceivedMessage>> DeadLetterAsync(QueueEntity queue, params Message[] messages)
    {
        await queue.SendAsync(messages);
        var received = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, messages.Length, TimeSpan.Zero, default);
        await queue.SettleAsync(false, [.. received.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.DeadLetter, DeadLetterReason = "test" })]);
        return [.. queue.Peek(true, 0, 100)];
    }

    [Fact]
    public async Task ANamedDeadLetter_GoesBack_AsANewMessageWithAFreshDeliveryCountAndTimeToLive()
    {
        var queue = await _farm.CreateQueueAsync("q", new QueueSettings { DefaultMessageTimeToLive = TimeSpan.FromMinutes(1) });
        var message = BrokerHarness.Text("one", "id-1");
        message.ApplicationProperties["tenant"] = new PropertyValue { StringValue = "blue" };
        var dead = await DeadLetterAsync(queue, message, BrokerHarness.Text("two", "id-2"));
        _farm.Time.Advance(TimeSpan.FromMinutes(2));

        var (resubmitted, more) = await queue.ResubmitDeadLettersAsync([dead[0].SequenceNumber], 0, default);

        Assert.Equal((1, true), (resubmitted, more));
        var back = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default));
        Assert.Equal(("one", "id-1", "blue", 1), (Body(back), back.Message.MessageId, back.Message.ApplicationProperties["tenant"].StringValue, back.DeliveryCount));
        Assert.True(back.SequenceNumber > dead[1].SequenceNumber, "resubmitted as a new message, at the end of the queue");
        Assert.Equal(_farm.Time.GetUtcNow().AddMinutes(1), back.ExpiresAt.ToDateTimeOffset());
        Assert.Equal(["two"], queue.Peek(true, 0, 10).Select(Body));
    }

    [Fact]
    public async Task ByCount_TheLowestGoBack_AndACrashRightAfterLeavesEachInOnePlace()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await DeadLetterAsync(queue, [.. Enumerable.Range(1, 5).Select(i => BrokerHarness.Text($"m{i}"))]);

        Assert.Equal((3, true), await queue.ResubmitDeadLettersAsync([], 3, default));
        await _farm.RestartAsync(crash: true);
        queue = await _farm.QueueAsync("q");

        Assert.Equal(["m1", "m2", "m3"], queue.Peek(false, 0, 10).Select(Body));
        Assert.Equal(["m4", "m5"], queue.Peek(true, 0, 10).Select(Body));
        Assert.Equal((2, false), await queue.ResubmitDeadLettersAsync([], 100, default));
        Assert.Equal((5L, 0L), (queue.GetCounts().Active, queue.GetCounts().DeadLetter));
    }

    [Fact]
    public async Task ADeadLetterHeldByAReceiver_OrNotThere_IsRefused_AndNothingMoves()
    {
        var queue = await _farm.CreateQueueAsync("q");
        var dead = await DeadLetterAsync(queue, BrokerHarness.Text("a"), BrokerHarness.Text("b"));
        var held = Assert.Single(await queue.ReceiveAsync(true, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));

        var locked = await Assert.ThrowsAsync<BrokerException>(() => queue.ResubmitDeadLettersAsync([dead[1].SequenceNumber, held.SequenceNumber], 0, default));
        var missing = await Assert.ThrowsAsync<BrokerException>(() => queue.ResubmitDeadLettersAsync([999], 0, default));

        Assert.Equal("MESSAGE_NOT_FOUND", FarmErrorNames.Of(locked.Code));
        Assert.Contains("held by a receiver", locked.Message, StringComparison.Ordinal);
        Assert.Contains("is not in the dead-letter queue", missing.Message, StringComparison.Ordinal);
        Assert.Equal((0L, 2L), (queue.GetCounts().Active, queue.GetCounts().DeadLetter));
    }

    [Fact]
    public async Task ASubscriptionsDeadLetters_GoBackInPlace_ToThatSubscriptionOnly_AndSurviveACrash()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var subscription = await _farm.CreateSubscriptionAsync("t", "s");
        var other = await _farm.CreateSubscriptionAsync("t", "other");
        await topic.SendAsync([BrokerHarness.Text("one", "id-1"), BrokerHarness.Text("two", "id-2"), BrokerHarness.Text("three", "id-3")]);
        var received = await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 3, TimeSpan.Zero, default);
        await subscription.SettleAsync(false, [.. received.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.DeadLetter, DeadLetterReason = "test" })]);
        var dead = subscription.Peek(true, 0, 10).ToList();

        Assert.Equal((1, true), await subscription.ResubmitDeadLettersAsync([dead[1].SequenceNumber], 0, default));
        Assert.Equal((2, false), await subscription.ResubmitDeadLettersAsync([], 10, default));
        await _farm.RestartAsync(crash: true);
        subscription = await _farm.SubscriptionAsync("t", "s");
        other = await _farm.SubscriptionAsync("t", "other");

        Assert.Equal((3L, 0L), (subscription.GetCounts().Active, subscription.GetCounts().DeadLetter));
        var back = await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default);
        Assert.Equal(["one", "two", "three"], back.Select(Body));
        Assert.Equal(dead.Select(m => m.SequenceNumber), back.Select(m => m.SequenceNumber));
        Assert.All(back, m => Assert.Equal((1, ""), (m.DeliveryCount, m.DeadLetterReason)));
        // The topic's other subscription got each message once, and nothing more.
        Assert.Equal(3L, other.GetCounts().Active);

        // Settled everywhere, the topic's shared copies go.
        await subscription.SettleAsync(false, [.. back.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);
        var others = await other.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, default);
        Assert.Equal(3, others.Count);
        topic = await _farm.TopicAsync("t");
        await _farm.SweepUntilAsync(() => topic.GetCounts().Count == 0, "the topic to drop its stored copies");
    }

    [Fact]
    public async Task ASubscriptionWithNoDeadLetters_ResubmitsNothing()
    {
        await _farm.CreateTopicAsync("t");
        var subscription = await _farm.CreateSubscriptionAsync("t", "s");

        Assert.Equal((0, false), await subscription.ResubmitDeadLettersAsync([], 10, default));
        var missing = await Assert.ThrowsAsync<BrokerException>(() => subscription.ResubmitDeadLettersAsync([42], 0, default));
        Assert.Equal("MESSAGE_NOT_FOUND", FarmErrorNames.Of(missing.Code));
    }
}
