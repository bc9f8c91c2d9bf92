using System.Diagnostics.Metrics;
using Farm.Broker.Entities;
using Farm.Contracts.V1;
using Farm.Testing;

namespace Farm.Broker.Tests;

/// <summary>
/// A send to a queue whose peek-lock receivers already wait stores those messages with their
/// delivery already counted, so handing them on takes no write of its own (issue 14: one commit
/// fewer per message and hop at low rates). The count stays what the client sees and survives a
/// crash; a message the receivers did not take shows its true count until one does.
/// </summary>
public sealed class DeliveryCountedAtSendTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    /// <summary>Deliveries of <paramref name="entity"/> whose count the send stored, as the node's metric counts them (an observable counter: read on demand).</summary>
    private sealed class CountedAtSend : IDisposable
    {
        private readonly MeterListener _listener = new();
        private readonly Lock _reading = new();
        private long _count;

        public CountedAtSend(string entity)
        {
            _listener.InstrumentPublished = (instrument, listener) =>
            {
                if (instrument.Name == "farm.messages.delivered_counted_at_send")
                {
                    listener.EnableMeasurementEvents(instrument);
                }
            };
            _listener.SetMeasurementEventCallback<long>((_, value, tags, _) =>
            {
                foreach (var tag in tags)
                {
                    if (tag.Key == "messaging.destination.name" && Equals(tag.Value, entity))
                    {
                        _count += value;
                    }
                }
            });
            _listener.Start();
        }

        public long Count
        {
            get
            {
                lock (_reading)
                {
                    _count = 0;
                    _listener.RecordObservableInstruments();
                    return _count;
                }
            }
        }

        public void Dispose() => _listener.Dispose();
    }

    private static Task<Task<IReadOnlyList<ReceivedMessage>>> WaitingReceiveAsync(QueueEntity queue, int maxMessages) =>
        BrokerHarness.WaitingReceiveAsync(queue, maxMessages, Patience);

    [Fact]
    public async Task MessagesSentToAWaitingReceiver_AreCountedByTheSend_AsManyAsItTakes_AndTheCountSurvivesACrash()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("counted-at-send");
        using var counted = new CountedAtSend("counted-at-send");

        var receive = await WaitingReceiveAsync(queue, maxMessages: 2);
        await queue.SendAsync([BrokerHarness.Text("one", "m-1"), BrokerHarness.Text("two", "m-2"), BrokerHarness.Text("three", "m-3")]);
        var first = await receive;

        Assert.Equal(["m-1", "m-2"], first.Select(m => m.Message.MessageId));
        Assert.All(first, m => Assert.Equal(1, m.DeliveryCount));
        Assert.Equal(2, counted.Count);
        // The third was beyond what the receiver asked for: stored uncounted, and it shows so.
        Assert.Equal(0, Assert.Single(queue.Peek(false, 0, 10), m => m.Message.MessageId == "m-3").DeliveryCount);
        var third = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal(1, third.DeliveryCount);
        Assert.Equal(2, counted.Count);

        // A crash with all three locked: each delivery was stored, so each comes again as the second.
        await farm.RestartAsync();
        var again = await (await farm.QueueAsync("counted-at-send")).ReceiveAsync(false, ReceiveMode.PeekLock, 3, TimeSpan.Zero, default);
        Assert.Equal(["m-1", "m-2", "m-3"], again.Select(m => m.Message.MessageId));
        Assert.All(again, m => Assert.Equal(2, m.DeliveryCount));
    }

    [Fact]
    public async Task MessagesCountedAtSend_AbandonedAndTakenAgain_AreCountedByWrites_AndACrashKeepsTheCount()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("left-behind");
        using var counted = new CountedAtSend("left-behind");

        // Two receivers wait for one message each; two messages come, one for each.
        var receives = new[] { await WaitingReceiveAsync(queue, 1), await WaitingReceiveAsync(queue, 1) };
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 2, Patience, "both receivers to wait");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1"), BrokerHarness.Text("two", "m-2")]);
        var got = (await Task.WhenAll(receives)).SelectMany(r => r).ToList();
        Assert.Equal(2, got.Count);
        Assert.All(got, m => Assert.Equal(1, m.DeliveryCount));
        Assert.Equal(2, counted.Count);

        // Abandoned, each comes again with its count raised by a write (no longer ahead), and a crash keeps it.
        foreach (var message in got)
        {
            await queue.SettleAsync(false, [new Settlement { LockToken = message.LockToken, Disposition = Disposition.Abandon }]);
        }
        var second = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 2, TimeSpan.Zero, default);
        Assert.All(second, m => Assert.Equal(2, m.DeliveryCount));
        Assert.Equal(2, counted.Count);
        await farm.RestartAsync();
        var third = await (await farm.QueueAsync("left-behind")).ReceiveAsync(false, ReceiveMode.PeekLock, 2, TimeSpan.Zero, default);
        Assert.All(third, m => Assert.Equal(3, m.DeliveryCount));
    }

    /// <summary>
    /// A message a receiver waits for is handed out as the send brought it (no parse of its stored
    /// bytes); one that comes again, or was sent with nobody waiting, is parsed from its bytes.
    /// </summary>
    [Fact]
    public async Task AMessageSentToAWaitingReceiver_IsHandedOutAsSent_AndParsedFromItsBytesWhenItComesAgain()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("as-sent");

        var receive = await WaitingReceiveAsync(queue, maxMessages: 1);
        var sent = BrokerHarness.Text("one", "m-1");
        await queue.SendAsync([sent]);
        var first = Assert.Single(await receive);
        Assert.Same(sent, first.Message);

        await queue.SettleAsync(false, [new Settlement { LockToken = first.LockToken, Disposition = Disposition.Abandon }]);
        var again = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.NotSame(sent, again.Message);
        Assert.Equal(sent, again.Message);

        var unawaited = BrokerHarness.Text("two", "m-2");
        await queue.SendAsync([unawaited]);
        var second = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.NotSame(unawaited, second.Message);
        Assert.Equal(unawaited, second.Message);
    }

    [Fact]
    public async Task AQueueWhoseMessagesGetOneDelivery_NeverCountsAtSend()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("counted-once-delivery", new QueueSettings { MaxDeliveryCount = 1 });
        using var counted = new CountedAtSend("counted-once-delivery");

        var receive = await WaitingReceiveAsync(queue, 1);
        await queue.SendAsync([BrokerHarness.Text("one", "m-1")]);
        var message = Assert.Single(await receive);

        // Counted by a write of its own: a crash between the send and the delivery must not leave a
        // message counted that nobody saw, as it would then be dead-lettered unseen.
        Assert.Equal(1, message.DeliveryCount);
        Assert.Equal(0, counted.Count);
    }
    /// <summary>
    /// The fan-out counts deliveries at send like a queue: in a row's count, or (a follower's implicit
    /// messages, which have none; messages with a time to live get rows) with the subscription's mark.
    /// </summary>
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task ATopicsFanOut_CountsTheDeliveriesOfSubscriptionsWithWaitingReceivers_AndOnlyThose(bool rows)
    {
        await using var farm = await BrokerHarness.StartAsync();
        var topic = await farm.CreateTopicAsync("counted-fan-out");
        var waiting = await farm.CreateSubscriptionAsync("counted-fan-out", "waiting");
        var idle = await farm.CreateSubscriptionAsync("counted-fan-out", "idle");
        using var counted = new CountedAtSend("counted-fan-out/Subscriptions/waiting");
        using var countedIdle = new CountedAtSend("counted-fan-out/Subscriptions/idle");

        var receive = await WaitingReceiveAsync(waiting, maxMessages: 1);
        TimeSpan? ttl = rows ? TimeSpan.FromHours(1) : null;
        await topic.SendAsync([BrokerHarness.Text("one", "m-1", ttl), BrokerHarness.Text("two", "m-2", ttl)]);
        var first = Assert.Single(await receive);
        Assert.Equal("m-1", first.Message.MessageId);
        Assert.Equal(1, first.DeliveryCount);
        // Without rows (followers' implicit messages) the send writes the subscription's delivery mark instead.
        Assert.Equal(1, counted.Count);
        Assert.All(idle.Peek(false, 0, 10), m => Assert.Equal(0, m.DeliveryCount));
        Assert.Equal(0, Assert.Single(waiting.Peek(false, 0, 10), m => m.Message.MessageId == "m-2").DeliveryCount);
        var taken = await idle.ReceiveAsync(false, ReceiveMode.PeekLock, 2, TimeSpan.Zero, default);
        Assert.All(taken, m => Assert.Equal(1, m.DeliveryCount));
        Assert.Equal(0, countedIdle.Count);

        // A crash with m-1 locked on both: each delivery was stored.
        await farm.RestartAsync();
        var again = await (await farm.SubscriptionAsync("counted-fan-out", "waiting")).ReceiveAsync(false, ReceiveMode.PeekLock, 2, TimeSpan.Zero, default);
        Assert.Equal([2, 1], again.Select(m => m.DeliveryCount));
        var idleAgain = await (await farm.SubscriptionAsync("counted-fan-out", "idle")).ReceiveAsync(false, ReceiveMode.PeekLock, 2, TimeSpan.Zero, default);
        Assert.Equal([2, 2], idleAgain.Select(m => m.DeliveryCount));
    }
}
