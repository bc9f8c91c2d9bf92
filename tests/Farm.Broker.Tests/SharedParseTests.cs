using Farm.Broker.Entities;
using Farm.Contracts.V1;
using Google.Protobuf;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>
/// A topic message that several subscriptions get unchanged is parsed once for all their
/// deliveries (issue 14: the 1,000-subscription fan-out parsed each message once per subscription);
/// a subscription whose rule action changed it, or a settlement that changed its properties, gets
/// its own. Real node, real SQLite files.
/// </summary>
public sealed class SharedParseTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static async Task<ReceivedMessage> ReceiveOneAsync(QueueEntity subscription)
    {
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        return Assert.Single(await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.FromSeconds(10), deadline.Token));
    }

    [Fact]
    public async Task SubscriptionsThatGetAMessageUnchanged_ShareOneParse_OneWhoseRuleChangedIt_HasItsOwn()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        var stamped = await _farm.CreateSubscriptionAsync("t", "stamped", null, SqlRule("stamp", "1=1", "SET stamp = 'yes'"));
        var message = new Message { MessageId = "m-1", Body = ByteString.CopyFromUtf8("hello") };
        message.ApplicationProperties["kind"] = new PropertyValue { StringValue = "order" };

        await topic.SendAsync([message]);
        var toA = await ReceiveOneAsync(a);
        var toB = await ReceiveOneAsync(b);
        var toStamped = await ReceiveOneAsync(stamped);

        Assert.Same(toA.Message, toB.Message);
        Assert.Equal("hello", toA.Message.Body.ToStringUtf8());
        Assert.Equal("order", toA.Message.ApplicationProperties["kind"].StringValue);
        Assert.False(toA.Message.ApplicationProperties.ContainsKey("stamp"));
        Assert.NotSame(toA.Message, toStamped.Message);
        Assert.Equal("yes", toStamped.Message.ApplicationProperties["stamp"].StringValue);
        Assert.Equal("hello", toStamped.Message.Body.ToStringUtf8());
    }

    /// <summary>
    /// As a queue does: a topic message a subscription's waiting receiver takes at once is handed out
    /// as the send brought it (no parse of its stored bytes), to every subscription that got it
    /// unchanged; one sent with nobody waiting is parsed from its bytes at its first delivery.
    /// </summary>
    [Fact]
    public async Task ATopicMessageAWaitingReceiverTakes_IsHandedOutAsSent_ToEverySubscriptionThatGotItUnchanged()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var waiting = await _farm.CreateSubscriptionAsync("t", "waiting");
        var later = await _farm.CreateSubscriptionAsync("t", "later");
        var stamped = await _farm.CreateSubscriptionAsync("t", "stamped", null, SqlRule("stamp", "1=1", "SET stamp = 'yes'"));
        var receive = await WaitingReceiveAsync(waiting, 1, TimeSpan.FromSeconds(30));

        var sent = BrokerHarness.Text("one", "m-1");
        await topic.SendAsync([sent]);
        Assert.Same(sent, Assert.Single(await receive).Message);
        Assert.Same(sent, (await ReceiveOneAsync(later)).Message);
        // The rule action changed a copy: what the others were handed is the message as sent.
        Assert.Equal("yes", (await ReceiveOneAsync(stamped)).Message.ApplicationProperties["stamp"].StringValue);
        Assert.False(sent.ApplicationProperties.ContainsKey("stamp"));

        var unawaited = BrokerHarness.Text("two", "m-2");
        await topic.SendAsync([unawaited]);
        var toWaiting = await ReceiveOneAsync(waiting);
        Assert.NotSame(unawaited, toWaiting.Message);
        Assert.Equal(unawaited, toWaiting.Message);
        Assert.Same(toWaiting.Message, (await ReceiveOneAsync(later)).Message);
    }

    /// <summary>An abandon that changes properties gives that subscription its own message; the other keeps the shared one, unchanged.</summary>
    [Fact]
    public async Task ASettlementThatChangesProperties_GivesThatSubscriptionItsOwnMessage_TheOthersKeepTheOriginal()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        await topic.SendAsync([new Message { MessageId = "m-1", Body = ByteString.CopyFromUtf8("hello") }]);
        var first = await ReceiveOneAsync(a);
        var toB = await ReceiveOneAsync(b);
        Assert.Same(first.Message, toB.Message);

        var abandon = new Settlement { LockToken = first.LockToken, Disposition = Disposition.Abandon };
        abandon.PropertiesToModify["tried"] = new PropertyValue { StringValue = "once" };
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await a.SettleAsync(false, [abandon])).ErrorCode);
        var again = await ReceiveOneAsync(a);

        Assert.Equal("once", again.Message.ApplicationProperties["tried"].StringValue);
        Assert.NotSame(toB.Message, again.Message);
        Assert.False(toB.Message.ApplicationProperties.ContainsKey("tried"));
        Assert.Equal(2, again.DeliveryCount);
    }
}
