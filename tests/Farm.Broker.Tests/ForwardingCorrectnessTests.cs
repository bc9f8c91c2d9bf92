using Farm.Broker.Entities;
using Farm.Contracts.V1;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>Forwarding as Azure does it (issue 8, paths 11, 12, 13, 16): hop limit, loops, dead-letter source, no receive from a forwarding entity.</summary>
public sealed class ForwardingCorrectnessTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private Messaging.MessagingService Service => new(_farm.Node);

    private Task SendThroughTheServiceAsync(string entity, params Message[] messages) =>
        Service.SendAsync(new SendRequest { Entity = entity, Messages = { messages } }, CancellationToken.None);

    [Fact]
    public async Task AChainOfSixQueues_DeadLettersPastFourHops_InTheQueueWhereTheLimitIsReached()
    {
        // Before: the message went through all five hops and landed in the last queue.
        var queues = new List<QueueEntity>();
        for (var i = 6; i >= 1; i--)
        {
            queues.Insert(0, await _farm.CreateQueueAsync($"q{i}", new QueueSettings { ForwardTo = i < 6 ? $"q{i + 1}" : null }));
        }

        await SendThroughTheServiceAsync("q1", Text("far"));
        await _farm.SweepUntilAsync(() => queues[4].Peek(true, 0, 10).Count == 1, "the message dead-lettered in q5");

        var dead = Assert.Single(queues[4].Peek(true, 0, 10));
        Assert.Equal(QueueEntity.MaxTransferHopCountExceeded, dead.DeadLetterReason);
        Assert.Equal(4u, dead.Message.TransferHopCount);
        Assert.Empty(queues[5].Peek(false, 0, 10));
        Assert.All(queues.Take(4), q => Assert.Empty(q.Peek(false, 0, 10)));
    }

    [Fact]
    public async Task AChainOfFiveQueues_DeliversAtTheEnd_AfterFourHops()
    {
        for (var i = 5; i >= 1; i--)
        {
            await _farm.CreateQueueAsync($"q{i}", new QueueSettings { ForwardTo = i < 5 ? $"q{i + 1}" : null });
        }

        await SendThroughTheServiceAsync("q1", Text("four hops"));

        var last = await _farm.QueueAsync("q5");
        Assert.Equal(4u, Assert.Single(last.Peek(false, 0, 10)).Message.TransferHopCount);
    }

    [Fact]
    public async Task ALoopMadeBeforeLoopsWereRefused_EndsInADeadLetterQueue_NotRoundForever()
    {
        // Stored settings may hold a loop (made before the management check, or through a topic).
        var a = await _farm.CreateQueueAsync("a", new QueueSettings { ForwardTo = "b" });
        var b = await _farm.CreateQueueAsync("b", new QueueSettings { ForwardTo = "a" });

        await SendThroughTheServiceAsync("a", Text("round"));
        await _farm.SweepUntilAsync(() => a.Peek(true, 0, 10).Count + b.Peek(true, 0, 10).Count == 1, "the message dead-lettered in the loop");

        var dead = Assert.Single(a.Peek(true, 0, 10).Concat(b.Peek(true, 0, 10)));
        Assert.Equal(QueueEntity.MaxTransferHopCountExceeded, dead.DeadLetterReason);
        Assert.Empty(a.Peek(false, 0, 10).Concat(b.Peek(false, 0, 10)));
    }

    [Fact]
    public async Task AForwardedDeadLetter_ArrivesWithItsDeadLetterSource_AndKeepsItAfterARestart()
    {
        // Before: the source was empty, though the contract promises it.
        await _farm.CreateQueueAsync("errors");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        await work.SendAsync([Text("bad")]);
        var message = Assert.Single(await work.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        await work.SettleAsync(false, [new Settlement { LockToken = message.LockToken, Disposition = Disposition.DeadLetter, DeadLetterReason = "Invalid" }]);
        var errors = await _farm.QueueAsync("errors");

        await _farm.SweepUntilAsync(() => errors.Peek(false, 0, 10).Count == 1, "the dead letter forwarded to the errors queue");
        Assert.Equal("work", Assert.Single(errors.Peek(false, 0, 10)).DeadLetterSource);

        await _farm.RestartAsync();
        var received = Assert.Single(await (await _farm.QueueAsync("errors")).ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal("work", received.DeadLetterSource);
        Assert.Equal("Invalid", received.Message.ApplicationProperties["DeadLetterReason"].StringValue);
    }

    [Fact]
    public async Task ReceivingFromAForwardingEntity_IsRefused_NamingWhereItsMessagesGo_ButPeekingWorks()
    {
        // Before: accepted, and it returned nothing.
        await _farm.CreateQueueAsync("archive");
        await _farm.CreateQueueAsync("orders", new QueueSettings { ForwardTo = "archive", ForwardDeadLetteredMessagesTo = "archive" });

        var receive = await Assert.ThrowsAsync<BrokerException>(() => Service.ReceiveBatchAsync(
            new ReceiveBatchRequest { Entity = "orders", Mode = ReceiveMode.PeekLock, MaxMessages = 1 }, CancellationToken.None));
        var deadLetters = await Assert.ThrowsAsync<BrokerException>(() => Service.ReceiveBatchAsync(
            new ReceiveBatchRequest { Entity = "orders/$DeadLetterQueue", Mode = ReceiveMode.PeekLock, MaxMessages = 1 }, CancellationToken.None));

        Assert.Equal(FarmErrorCode.InvalidArgument, receive.Code);
        Assert.Equal("'orders' forwards its messages to 'archive' (ForwardTo); receive from 'archive' instead.", receive.Message);
        Assert.Contains("ForwardDeadLetteredMessagesTo", deadLetters.Message);
        await Service.PeekAsync(new PeekRequest { Entity = "orders", MaxMessages = 1 }, CancellationToken.None);
    }
    /// <summary>
    /// A send another node's forwarder makes (forwarded) keeps the hops its messages took there, so
    /// the hop limit counts every node's; a client's send starts from 0 whatever its messages say.
    /// </summary>
    [Fact]
    public async Task AForwardedSend_KeepsItsHops_AClientsSendCountsFromZero()
    {
        for (var i = 6; i >= 1; i--)
        {
            await _farm.CreateQueueAsync($"q{i}", new QueueSettings { ForwardTo = i < 6 ? $"q{i + 1}" : null });
        }
        var fromAnotherNode = Text("two hops already");
        fromAnotherNode.TransferHopCount = 2;
        var fromAClient = Text("claims three");
        fromAClient.TransferHopCount = 3;

        await Service.SendAsync(new SendRequest { Entity = "q3", Messages = { fromAnotherNode }, Forwarded = true }, CancellationToken.None);
        await Service.SendAsync(new SendRequest { Entity = "q3", Messages = { fromAClient } }, CancellationToken.None);

        var q5 = await _farm.QueueAsync("q5");
        await _farm.SweepUntilAsync(() => q5.Peek(true, 0, 10).Count == 1, "the forwarded message dead-lettered in q5");
        var dead = Assert.Single(q5.Peek(true, 0, 10));
        Assert.Equal("two hops already", dead.Message.Body.ToStringUtf8());
        Assert.Equal(4u, dead.Message.TransferHopCount);
        var delivered = Assert.Single((await _farm.QueueAsync("q6")).Peek(false, 0, 10));
        Assert.Equal("claims three", delivered.Message.Body.ToStringUtf8());
        Assert.Equal(3u, delivered.Message.TransferHopCount);
    }

    /// <summary>
    /// The forwarder sends in order, in batches no bigger than a send may be, each named by its
    /// entity and sequence numbers: a batch that failed is sent again under the same name as a
    /// repeat (so another node stores it once) after a rest, and what the target stored before the
    /// failure leaves the source at once rather than going again.
    /// </summary>
    [Fact]
    public async Task TheForwarder_SendsSizedNamedBatchesInOrder_AndAFailedBatchGoesAgainUnderItsName()
    {
        await _farm.DisposeAsync();
        // Room for two messages of 1 KB a batch.
        _farm = await StartAsync(h => h.Options.MaxBatchSizeBytes = 4096 + 2500);
        await _farm.CreateQueueAsync("errors");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        var calls = new List<(long[] Ids, SendName Name, bool Repeat, string? Source, DateTimeOffset At)>();
        var failures = 0;
        work.Forward = (target, messages, source, name, repeat, _) =>
        {
            Assert.Equal("errors", target);
            lock (calls)
            {
                calls.Add(([.. messages.Select(m => long.Parse(m.MessageId))], name, repeat, source, _farm.Time.GetUtcNow()));
                // The second send fails once.
                return calls.Count == 2 && failures++ == 0 ? Task.FromException(new IOException("the target's node went away")) : Task.CompletedTask;
            }
        };
        var sequences = await work.SendAsync([.. Enumerable.Range(0, 6).Select(i => Text(new string('x', 1000), messageId: $"{i}"))]);
        var locked = await work.ReceiveAsync(false, ReceiveMode.PeekLock, 6, TimeSpan.Zero, default);
        Assert.Equal(6, locked.Count);

        await work.SettleAsync(false, [.. locked.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.DeadLetter, DeadLetterReason = "Invalid" })]);
        await _farm.SweepUntilAsync(() => work.Peek(true, 0, 10).Count == 0 && calls.Count == 4, "every dead letter forwarded");

        Assert.All(calls, c => Assert.Equal("work", c.Source));
        Assert.Equal([[0, 1], [2, 3], [2, 3], [4, 5]], calls.Select(c => c.Ids));
        var sent = calls.Select(c => (c.Name, c.Repeat)).ToList();
        // Loaded a moment ago, so the first run's batches may have been sent by a previous owner: repeats.
        Assert.Equal(NameOf(sequences[0], sequences[1]), sent[0].Name);
        Assert.Equal(NameOf(sequences[2], sequences[3]), sent[1].Name);
        Assert.Equal(sent[1], sent[2]);
        Assert.True(sent[2].Repeat);
        // After a failure forwarding rests a while rather than calling the target every tick.
        Assert.True(calls[2].At - calls[1].At >= TimeSpan.FromMilliseconds(QueueEntity.ForwardRetryDelayMs), $"tried again after {calls[2].At - calls[1].At}");
        Assert.Equal(NameOf(sequences[4], sequences[5]), sent[3].Name);

        // A run after one that went well: not a repeat.
        var more = await work.SendAsync([Text("late", messageId: "6")]);
        var late = Assert.Single(await work.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        await work.SettleAsync(false, [new Settlement { LockToken = late.LockToken, Disposition = Disposition.DeadLetter }]);
        await _farm.SweepUntilAsync(() => calls.Count == 5, "the late dead letter forwarded");
        Assert.Equal((NameOf(more[0], more[0]), false), (calls[4].Name, calls[4].Repeat));

        SendName NameOf(long first, long last) => new($"farm.forward/{work.Id}/dead-letter/{last}", first);
    }
}
