using Farm.Broker.Entities;
using Farm.Broker.Messaging;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// A send that completes locked messages in the same transaction ("send via"): the messages are
/// stored and the received ones completed in one commit of their container, or neither happens.
/// A real node on real SQLite files; restarts read what the database holds.
/// </summary>
public sealed class SendAndCompleteTests
{
    private static SendRequest Forward(string to, string from, IEnumerable<string> lockTokens, string body = "forwarded", string? messageId = null, string producer = "", long sendId = 0)
    {
        var request = new SendRequest
        {
            Entity = to,
            ProducerId = producer,
            SendId = sendId,
            Completes = new SendCompletes { Entity = from, LockTokens = { lockTokens } },
        };
        request.Messages.Add(BrokerHarness.Text(body, messageId));
        return request;
    }

    private static async Task<ReceivedMessage> ReceiveLockedAsync(QueueEntity queue, bool deadLetter = false) =>
        Assert.Single(await queue.ReceiveAsync(deadLetter, ReceiveMode.PeekLock, 1, TimeSpan.Zero, CancellationToken.None));

    /// <summary>A message sent to <paramref name="from"/>, received peek-locked: what a handler forwards.</summary>
    private static async Task<ReceivedMessage> ReceiveWorkAsync(QueueEntity from)
    {
        await from.SendAsync([BrokerHarness.Text("work")]);
        return await ReceiveLockedAsync(from);
    }

    /// <summary>A forward the broker refuses after taking the locks and before committing (a TimeToLive below zero).</summary>
    private static SendRequest RefusedForward(string lockToken)
    {
        var refused = Forward("to", "from", [lockToken]);
        refused.Messages[0].TimeToLive = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(TimeSpan.FromSeconds(-1));
        return refused;
    }

    private static async Task<SettleResult> CompleteAsync(QueueEntity queue, string lockToken) =>
        Assert.Single(await queue.SettleAsync(false, [new Settlement { LockToken = lockToken, Disposition = Disposition.Complete }]));

    [Fact]
    public async Task TheSendStoresTheMessage_AndCompletesTheReceivedOne_InOneCommit_ThatARestartReadsBack()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var from = await farm.CreateQueueAsync("from");
        var to = await farm.CreateQueueAsync("to");
        var service = new MessagingService(farm.Node);
        var received = await ReceiveWorkAsync(from);
        var commitsBefore = from.Commits.CommitCount;

        var answer = await service.SendAsync(Forward("to", "from", [received.LockToken]), default);

        Assert.True(answer.Completed);
        Assert.True(Assert.Single(answer.SequenceNumbers) > 0);
        Assert.Equal(1, from.Commits.CommitCount - commitsBefore);
        Assert.Equal((0, 0), (from.GetCounts().Total, from.GetCounts().Locked));
        Assert.Equal(1, to.GetCounts().Active);
        // The lock went with the completion.
        Assert.Equal(FarmErrorCode.MessageLockLost, (await CompleteAsync(from, received.LockToken)).ErrorCode);

        await farm.RestartAsync(crash: true);
        Assert.Equal(0, (await farm.QueueAsync("from")).GetCounts().Total);
        Assert.Equal(1, (await farm.QueueAsync("to")).GetCounts().Active);
    }

    /// <summary>All or none: one lock not held fails the whole send, and the lock that was held stays held.</summary>
    [Fact]
    public async Task WhenOneLockIsNotHeld_NothingIsStored_AndTheOtherLockIsStillHeld()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var from = await farm.CreateQueueAsync("from");
        var to = await farm.CreateQueueAsync("to");
        var service = new MessagingService(farm.Node);
        await from.SendAsync([BrokerHarness.Text("one"), BrokerHarness.Text("two")]);
        var held = await ReceiveLockedAsync(from);
        var settled = await ReceiveLockedAsync(from);
        Assert.Equal(FarmErrorCode.Unspecified, (await CompleteAsync(from, settled.LockToken)).ErrorCode);

        var failure = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(Forward("to", "from", [held.LockToken, settled.LockToken]), default));

        Assert.Equal(FarmErrorCode.MessageLockLost, failure.Code);
        Assert.Contains(settled.LockToken, failure.Message);
        Assert.Equal(0, to.GetCounts().Total);
        Assert.Equal(1, from.GetCounts().Locked);
        Assert.Equal(FarmErrorCode.Unspecified, (await CompleteAsync(from, held.LockToken)).ErrorCode);
    }

    /// <summary>
    /// The send fails after the locks were taken and before its commit (a message the broker
    /// refuses): nothing is stored and the lock is the receiver's again, to abandon or dead-letter.
    /// </summary>
    [Fact]
    public async Task WhenTheSendIsRefused_TheLockIsHeldAgain()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var from = await farm.CreateQueueAsync("from");
        var to = await farm.CreateQueueAsync("to");
        var service = new MessagingService(farm.Node);
        var received = await ReceiveWorkAsync(from);
        var failure = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(RefusedForward(received.LockToken), default));

        Assert.Equal(FarmErrorCode.InvalidArgument, failure.Code);
        Assert.Equal(0, to.GetCounts().Total);
        Assert.Equal(1, from.GetCounts().Locked);
        var abandoned = Assert.Single(await from.SettleAsync(false, [new Settlement { LockToken = received.LockToken, Disposition = Disposition.Abandon }]));
        Assert.Equal(FarmErrorCode.Unspecified, abandoned.ErrorCode);
        Assert.Equal(2, (await ReceiveLockedAsync(from)).DeliveryCount);
    }

    /// <summary>
    /// A send that completes, to a queue that forwards to a full one: stored in the queue named,
    /// with the completion, as a plain send is (its forwarder dead-letters what the full one
    /// refuses, as Azure does). Before, the full end refused it and the handler had to abandon.
    /// </summary>
    [Fact]
    public async Task ASendThatCompletes_IntoAChainWithAFullEnd_IsStoredWhereItWasSent_AndCompletes()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var from = await farm.CreateQueueAsync("from");
        var end = await farm.CreateQueueAsync("end", new QueueSettings { MaxSizeInMegabytes = 1 });
        for (var i = 0; i < 5; i++)
        {
            await end.SendAsync([new Message { MessageId = $"filler-{i}", Body = Google.Protobuf.ByteString.CopyFrom(new byte[200 * 1024]) }]);
        }
        var to = await farm.CreateQueueAsync("to", new QueueSettings { ForwardTo = "end" });
        var service = new MessagingService(farm.Node);
        var received = await ReceiveWorkAsync(from);
        var forward = Forward("to", "from", [received.LockToken], messageId: "onward");
        forward.Messages[0].Body = Google.Protobuf.ByteString.CopyFrom(new byte[100 * 1024]);

        var answer = await service.SendAsync(forward, default);

        Assert.True(answer.Completed);
        Assert.Equal(0, from.GetCounts().Total);
        await farm.SweepUntilAsync(() => to.Peek(true, 0, 10).Count == 1, "the message dead-lettered in the queue it was sent to");
        var dead = Assert.Single(to.Peek(true, 0, 10));
        Assert.Equal(("onward", QueueEntity.ForwardingRefused, 0u), (dead.Message.MessageId, dead.DeadLetterReason, dead.Message.TransferHopCount));
        Assert.Equal(5, end.GetCounts().Active);
    }

    /// <summary>A lock given back still runs out when it would have: the message is delivered again then.</summary>
    [Fact]
    public async Task ALockGivenBack_StillExpiresAtItsTime()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var from = await farm.CreateQueueAsync("from", new QueueSettings { LockDuration = TimeSpan.FromSeconds(30) });
        await farm.CreateQueueAsync("to");
        var service = new MessagingService(farm.Node);
        var received = await ReceiveWorkAsync(from);
        await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(RefusedForward(received.LockToken), default));

        farm.Time.Advance(TimeSpan.FromSeconds(31));
        await farm.SweepUntilAsync(() => from.GetCounts().Locked == 0, "the lock given back to run out");

        Assert.Equal(2, (await ReceiveLockedAsync(from)).DeliveryCount);
    }

    /// <summary>Every message of the send was a duplicate (it was forwarded before): the received one is still completed.</summary>
    [Fact]
    public async Task ASendOfDuplicatesOnly_StillCompletesTheReceivedMessage()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var from = await farm.CreateQueueAsync("from");
        var to = await farm.CreateQueueAsync("to", new QueueSettings { RequiresDuplicateDetection = true });
        var service = new MessagingService(farm.Node);
        await to.SendAsync([BrokerHarness.Text("already there", "order-1")]);
        var received = await ReceiveWorkAsync(from);

        var answer = await service.SendAsync(Forward("to", "from", [received.LockToken], messageId: "order-1"), default);

        Assert.True(answer.Completed);
        Assert.Equal(0, Assert.Single(answer.SequenceNumbers));
        Assert.Equal(0, from.GetCounts().Total);
        Assert.Equal(1, to.GetCounts().Active);
    }

    /// <summary>
    /// The answer was lost and the node with it: the repeat reaches the restarted node, which answers
    /// from the send's record. Nothing is stored twice and the completion is not tried again (its
    /// lock is gone with the message, which would fail a second try).
    /// </summary>
    [Fact]
    public async Task ARepeatAfterACrash_IsAnsweredFromTheRecord_WithTheCompletionDone()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var from = await farm.CreateQueueAsync("from");
        await farm.CreateQueueAsync("to");
        var received = await ReceiveWorkAsync(from);
        var first = await new MessagingService(farm.Node).SendAsync(Forward("to", "from", [received.LockToken], producer: "handler", sendId: 1), default);

        await farm.RestartAsync(crash: true);
        var repeat = Forward("to", "from", [received.LockToken], producer: "handler", sendId: 1);
        repeat.Repeat = true;
        var again = await new MessagingService(farm.Node).SendAsync(repeat, default);

        Assert.Equal(first.SequenceNumbers, again.SequenceNumbers);
        Assert.True(again.Completed);
        Assert.Equal(1, (await farm.QueueAsync("to")).GetCounts().Active);
        Assert.Equal(0, (await farm.QueueAsync("from")).GetCounts().Total);
    }

    /// <summary>From a subscription to a queue, and from a queue to a topic: both kinds of source and of target.</summary>
    [Fact]
    public async Task ASubscriptionsMessage_ForwardedToAQueue_AndAQueuesToATopic()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var topic = await farm.CreateTopicAsync("events");
        var subscription = await farm.CreateSubscriptionAsync("events", "audit");
        var queue = await farm.CreateQueueAsync("audit-log");
        var service = new MessagingService(farm.Node);
        await topic.SendAsync([BrokerHarness.Text("event")]);

        var fromSubscription = await ReceiveLockedAsync(subscription);
        Assert.True((await service.SendAsync(Forward("audit-log", "events/Subscriptions/audit", [fromSubscription.LockToken]), default)).Completed);
        var fromQueue = await ReceiveLockedAsync(queue);
        Assert.True((await service.SendAsync(Forward("events", "audit-log", [fromQueue.LockToken]), default)).Completed);

        Assert.Equal(0, queue.GetCounts().Total);
        // The topic's send fanned out to the subscription again; the first copy was completed.
        Assert.Equal(1, subscription.GetCounts().Total);
        Assert.Equal(1, subscription.GetCounts().Active);
    }

    [Fact]
    public async Task ACompletesWithoutLockTokens_OrWithABadEntity_IsRefused_AndStoresNothing()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var to = await farm.CreateQueueAsync("to");
        await farm.CreateQueueAsync("from");
        var service = new MessagingService(farm.Node);

        var noTokens = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(Forward("to", "from", []), default));
        var badPath = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(Forward("to", "from//x", [Guid.NewGuid().ToString()]), default));
        var missing = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(Forward("to", "nowhere", [Guid.NewGuid().ToString()]), default));

        Assert.Equal(FarmErrorCode.InvalidArgument, noTokens.Code);
        Assert.Equal(FarmErrorCode.InvalidArgument, badPath.Code);
        Assert.Equal(FarmErrorCode.MessagingEntityNotFound, missing.Code);
        Assert.Equal(0, to.GetCounts().Total);
    }
}
