using System.Globalization;
using Farm.Testing;
using Microsoft.Extensions.Logging;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.Contracts.V1;
using Google.Protobuf;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>Forwarding as Azure does it (issue 8, paths 11, 12, 13, 16): hop limit, loops, dead-letter source, no receive from a forwarding entity.</summary>
public sealed class ForwardingCorrectnessTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;
    private PostgresFarmDatabase? _postgres;

    public async Task InitializeAsync() => _farm = await StartAsync();

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
        (_farm, _postgres) = await PostgresFarmDatabase.StartHarnessAsync("farm_forward");
    }

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
        work.Forward = (target, messages, source, name, _, repeat, _) =>
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
        Assert.Equal((NameOf(more[0]), false), (calls[4].Name, calls[4].Repeat));

        SendName NameOf(params long[] sequences) => QueueEntity.ForwardSendName(work.Id, fromDeadLetter: true, sequences);
    }

    /// <summary>
    /// A send whose answer was lost goes again exactly as it went, under its name, even when more
    /// messages came meanwhile: taken together they would make one batch of another name, and a
    /// target that had stored the first try would store those messages twice.
    /// </summary>
    [Fact]
    public async Task ASendWhoseAnswerWasLost_GoesAgainAsItWent_NotJoinedWithMessagesThatCameSince()
    {
        await _farm.CreateQueueAsync("errors");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        var calls = new List<(long[] Ids, SendName Name, bool Repeat)>();
        var firstAnswer = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        work.Forward = async (_, messages, _, name, _, repeat, _) =>
        {
            int call;
            lock (calls)
            {
                calls.Add(([.. messages.Select(m => long.Parse(m.MessageId, CultureInfo.InvariantCulture))], name, repeat));
                call = calls.Count;
            }
            if (call == 1)
            {
                // The target stores it, and its answer never comes back.
                await firstAnswer.Task;
                throw new IOException("the connection to the target's node broke before its answer");
            }
        };
        var early = await DeadLetterAsync(work, 0, 1);
        await _farm.SweepUntilAsync(() => { lock (calls) { return calls.Count == 1; } }, "the first send under way");
        var late = await DeadLetterAsync(work, 2, 3);
        firstAnswer.SetResult();

        await _farm.SweepUntilAsync(() => work.Peek(true, 0, 10).Count == 0, "every dead letter forwarded");

        // Before, the second try took all four as one send, named by 3: a target that stored the first try stored 0 and 1 twice.
        Assert.Equal([[0, 1], [0, 1], [2, 3]], calls.Select(c => c.Ids));
        Assert.Equal(QueueEntity.ForwardSendName(work.Id, fromDeadLetter: true, early), calls[0].Name);
        Assert.Equal(calls[0].Name, calls[1].Name);
        Assert.True(calls[1].Repeat);
        Assert.Equal(QueueEntity.ForwardSendName(work.Id, fromDeadLetter: true, late), calls[2].Name);
    }

    /// <summary>
    /// A message that becomes available between the messages of a send whose answer was lost (here
    /// a dead letter settled later, whose sequence number lies between theirs) is not joined to its
    /// repeat: the repeat carries what the first try carried, under its name, and the newcomer goes
    /// in a send of its own. A target that knows sends by name (as every node does) then stores each
    /// message once. Named by first and last alone, the repeat [0, 1, 2] had the first try's name,
    /// the target answered it from the try that carried 0 and 2, and 1 was deleted here unstored.
    /// </summary>
    [Fact]
    public async Task AMessageBetweenARepeatsMessages_GoesInASendOfItsOwn_AndEveryMessageIsStoredOnce()
    {
        await _farm.CreateQueueAsync("errors");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        var stored = new List<long>();
        var names = new HashSet<SendName>();
        var calls = 0;
        var firstAnswer = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        work.Forward = async (_, messages, _, name, _, _, _) =>
        {
            int call;
            lock (stored)
            {
                call = ++calls;
                // A target that remembers sends by name, as RecentSends and the send records do.
                if (names.Add(name))
                {
                    stored.AddRange(messages.Select(m => long.Parse(m.MessageId, CultureInfo.InvariantCulture)));
                }
            }
            if (call == 1)
            {
                await firstAnswer.Task;
                throw new IOException("the connection to the target's node broke before its answer");
            }
        };
        await work.SendAsync([.. Enumerable.Range(0, 3).Select(i => Text($"m{i}", messageId: i.ToString(CultureInfo.InvariantCulture)))]);
        var locked = await work.ReceiveAsync(false, ReceiveMode.PeekLock, 3, TimeSpan.Zero, default);
        Assert.Equal(3, locked.Count);
        await work.SettleAsync(false, [.. locked.Where(m => m.Message.MessageId != "1").Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.DeadLetter })]);
        await _farm.SweepUntilAsync(() => { lock (stored) { return calls == 1; } }, "the first send under way");
        await work.SettleAsync(false, [.. locked.Where(m => m.Message.MessageId == "1").Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.DeadLetter })]);
        firstAnswer.SetResult();

        await _farm.SweepUntilAsync(() => work.Peek(true, 0, 10).Count == 0, "every dead letter forwarded");

        lock (stored)
        {
            Assert.Equal([0, 1, 2], stored.Order());
        }
    }

    /// <summary>
    /// The next owner of a source (a load; here a restart) does not know how its predecessor cut
    /// the batch whose answer it never saw, and sends what is there now: that batch and a message
    /// that came since, as one send of another name. The target recorded each message it stored
    /// under the source and its sequence number there, so it stores only the newcomer. Before, it
    /// stored the first three twice (a forward to an entity on the same node was not named at all).
    /// </summary>
    [Fact]
    public Task AfterALoad_ABatchCutOtherwise_IsStoredOnlyForTheMessagesTheTargetHasNot() => ABatchCutOtherwiseAfterALoadAsync();

    [PostgresFact]
    public async Task OnPostgreSql_AfterALoad_ABatchCutOtherwise_IsStoredOnlyForTheMessagesTheTargetHasNot()
    {
        await UsePostgresAsync();
        await ABatchCutOtherwiseAfterALoadAsync();
    }

    private async Task ABatchCutOtherwiseAfterALoadAsync()
    {
        await _farm.CreateQueueAsync("archive");
        var orders = await _farm.CreateQueueAsync("orders", new QueueSettings { ForwardTo = "archive" });
        var forward = orders.Forward!;
        var calls = 0;
        orders.Forward = async (target, messages, source, name, origin, repeat, cancellationToken) =>
        {
            if (Interlocked.Increment(ref calls) == 1)
            {
                // Stored at the target; the answer is lost, as when the owner dies right after.
                await forward(target, messages, source, name, origin, repeat, cancellationToken);
            }
            throw new IOException("the owner died before the answer");
        };
        await orders.SendAsync([Text("1", messageId: "1"), Text("2", messageId: "2"), Text("3", messageId: "3")]);
        var archive = await _farm.QueueAsync("archive");
        await _farm.SweepUntilAsync(() => archive.Peek(false, 0, 10).Count == 3, "the first batch stored at the target");
        await orders.SendAsync([Text("4", messageId: "4")]);

        await _farm.RestartAsync();
        var source = await _farm.QueueAsync("orders");
        archive = await _farm.QueueAsync("archive");
        // Deleted from the source once the target answered (a peek leaves out what is being forwarded).
        await _farm.SweepUntilAsync(() => source.GetCounts().Total == 0, "everything forwarded by the next owner");

        Assert.Equal(["1", "2", "3", "4"], archive.Peek(false, 0, 10).Select(m => m.Message.MessageId));
    }

    /// <summary>
    /// What a target on another node gets (a forwarded send, as BrokerNode.ForwardAsync makes it):
    /// a repeat leaves out the messages recorded under their origin, whatever batch carried them,
    /// and answers them from their records; a repeat of nothing new stores nothing. So does a send
    /// not marked as a repeat (a frozen owner's, going on after it resumed, already fenced). A
    /// topic as target keeps the same records.
    /// </summary>
    [Fact]
    public Task AForwardedRepeat_StoresOnlyWhatHasNoRecordUnderItsOrigin_AndAnswersTheRestFromTheirRecords() => AForwardedRepeatAsync();

    [PostgresFact]
    public async Task OnPostgreSql_AForwardedRepeat_StoresOnlyWhatHasNoRecordUnderItsOrigin_AndAnswersTheRestFromTheirRecords()
    {
        await UsePostgresAsync();
        await AForwardedRepeatAsync();
    }

    private async Task AForwardedRepeatAsync()
    {
        var archive = await _farm.CreateQueueAsync("archive");
        await _farm.CreateTopicAsync("events");
        var all = await _farm.CreateSubscriptionAsync("events", "all");
        // Each target its own source (a source forwards to one target).
        SendRequest Forwarded(string entity, bool repeat, string batch, params long[] sequences) => ForwardedSend(entity, entity, repeat, batch, sequences);

        // What the subscription got so far (a subscription that follows its topic is read by receiving).
        var fannedOut = new List<string>();
        async Task<IEnumerable<string>> ReceivedByAll()
        {
            fannedOut.AddRange((await all.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, default)).Select(m => m.Message.MessageId));
            return fannedOut;
        }
        foreach (var (entity, stored) in new (string, Func<Task<IEnumerable<string>>>)[]
        {
            ("archive", () => Task.FromResult(archive.Peek(false, 0, 10).Select(m => m.Message.MessageId))),
            ("events", ReceivedByAll),
        })
        {
            var first = await Service.SendAsync(Forwarded(entity, false, "a", 1, 2), CancellationToken.None);
            // The source's next owner: the same two and one more, in a batch of another name.
            var again = await Service.SendAsync(Forwarded(entity, true, "b", 1, 2, 3), CancellationToken.None);
            var whole = await Service.SendAsync(Forwarded(entity, true, "c", 3, 2, 1), CancellationToken.None);

            Assert.Equal(["m1", "m2", "m3"], await stored());
            Assert.Equal(first.SequenceNumbers, again.SequenceNumbers.Take(2));
            Assert.Equal(again.SequenceNumbers.Reverse(), whole.SequenceNumbers);

            var stale = await Service.SendAsync(Forwarded(entity, false, "d", 1), CancellationToken.None);
            Assert.Equal(["m1", "m2", "m3"], await stored());
            Assert.Equal(first.SequenceNumbers.Take(1), stale.SequenceNumbers);
        }

        // A client's send may not take a forwarder's producer id: its record would stand for a forwarded message.
        var posing = Forwarded("archive", false, "f", 7);
        posing.Forwarded = false;
        var refused = await Assert.ThrowsAsync<BrokerException>(() => Service.SendAsync(posing, CancellationToken.None));
        Assert.Equal(FarmErrorCode.InvalidArgument, refused.Code);
        Assert.Contains("are the brokers' own", refused.Message);

        var uneven = Forwarded("archive", true, "e", 5, 6);
        uneven.ForwardSequences.RemoveAt(1);
        var error = await Assert.ThrowsAsync<BrokerException>(() => Service.SendAsync(uneven, CancellationToken.None));
        Assert.Equal(FarmErrorCode.InvalidArgument, error.Code);
        Assert.Contains("forward_sequences has 1 entries for 2 messages", error.Message);
    }

    /// <summary>
    /// A forwarder's own sends are stored without reading their records (a load of a source sends
    /// each message once, or again marked as a repeat). A send from another load of the source (its
    /// next owner, or a frozen one that resumed) reads, and so does every send of either for the
    /// records' window after; so does every send to a new owner of the container while a record
    /// its previous owner made is in the window. Whichever load sends a message, and however the
    /// batches are cut, it is stored once.
    /// </summary>
    [Fact]
    public async Task AForwardersOwnSends_SkipTheRecordsRead_UntilAnotherLoadOfItsSourceSends_AndEachMessageIsStoredOnce()
    {
        var archive = await _farm.CreateQueueAsync("archive");
        var senders = archive.Commits.ForwardSenders;
        SendRequest Forwarded(long load, string batch, params long[] sequences)
        {
            var request = ForwardedSend("archive", "orders", repeat: false, batch, sequences);
            request.ForwardIncarnation = load;
            return request;
        }
        async Task<IEnumerable<string>> StoredAsync() => (await _farm.QueueAsync("archive")).Peek(false, 0, 20).Select(m => m.Message.MessageId);

        await Service.SendAsync(Forwarded(1, "a", 1, 2), CancellationToken.None);
        await Service.SendAsync(Forwarded(1, "b", 3, 4), CancellationToken.None);
        Assert.Equal((0L, 2L), (senders.Lookups, senders.Skipped));

        // The source's next owner (load 2) sends 3-5, cut otherwise and not marked as a repeat;
        // then the frozen load 1 resumes with 5-6, and load 2 goes on with 6-7.
        await Service.SendAsync(Forwarded(2, "c", 3, 4, 5), CancellationToken.None);
        await Service.SendAsync(Forwarded(1, "d", 5, 6), CancellationToken.None);
        await Service.SendAsync(Forwarded(2, "e", 6, 7), CancellationToken.None);
        Assert.Equal(["m1", "m2", "m3", "m4", "m5", "m6", "m7"], await StoredAsync());
        Assert.Equal((3L, 2L), (senders.Lookups, senders.Skipped));

        // A window of load 2 alone: its sends skip the read again.
        _farm.Time.Advance(Messaging.RecentSends.Retention);
        await Service.SendAsync(Forwarded(2, "f", 8), CancellationToken.None);
        Assert.Equal((3L, 3L), (senders.Lookups, senders.Skipped));

        // A new owner of the container (a restart) reads while load 2's last records are in the window, then no more.
        await _farm.RestartAsync();
        senders = (await _farm.QueueAsync("archive")).Commits.ForwardSenders;
        await Service.SendAsync(Forwarded(2, "g", 8, 9), CancellationToken.None);
        Assert.Equal((1L, 0L), (senders.Lookups, senders.Skipped));
        Assert.Equal(["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"], await StoredAsync());
        _farm.Time.Advance(Messaging.RecentSends.Retention);
        await Service.SendAsync(Forwarded(2, "h", 10), CancellationToken.None);
        Assert.Equal((1L, 1L), (senders.Lookups, senders.Skipped));
        Assert.Equal(10, (await StoredAsync()).Count());
    }

    /// <summary>
    /// Two forwarded sends of one message at the same moment (the next owner's repeat, and its
    /// predecessor's send still committing here) do not both store it: the second waits for the
    /// first to end, then finds its record. Before, both found no record and both stored.
    /// </summary>
    [Fact]
    public async Task TwoForwardedSendsOfOneMessageAtOnce_StoreItOnce()
    {
        var topic = await _farm.CreateTopicAsync("events", new TopicSettings { SupportOrdering = false });
        var all = await _farm.CreateSubscriptionAsync("events", "all");
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
        SendRequest Forwarded(string batch, bool repeat, params long[] sequences) => ForwardedSend("events", "5", repeat, batch, sequences);

        var first = Task.Run(() => Service.SendAsync(Forwarded("a", false, 1, 2), CancellationToken.None));
        Assert.True(held.Wait(TimeSpan.FromSeconds(30)), "the first send never reached its commit");
        var waitsBefore = _farm.Node.ForwardsInFlight.Waits;
        var second = Task.Run(() => Service.SendAsync(Forwarded("b", true, 1, 2, 3), CancellationToken.None));
        await Eventually.UntilAsync(() => second.IsCompleted || _farm.Node.ForwardsInFlight.Waits > waitsBefore, TimeSpan.FromSeconds(30), "the second send stored or waiting");
        release.Set();
        await Task.WhenAll(first, second);

        var received = await all.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, default);
        Assert.Equal(["m1", "m2", "m3"], received.Select(m => m.Message.MessageId).Order());
        Assert.Equal((await first).SequenceNumbers, (await second).SequenceNumbers.Take(2));
    }

    /// <summary>
    /// A target that keeps failing shows in the node's log: once the third run in a row failed, then
    /// once a minute while it lasts (not a line for every try, one a second), and once it works again.
    /// Before, nothing was logged at all, and the messages only piled up in the source.
    /// </summary>
    [Fact]
    public async Task ForwardingThatKeepsFailing_IsLoggedOnceAMinute_AndWhenItWorksAgain()
    {
        await _farm.CreateQueueAsync("errors");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        // Records stamped by the node's (driven) clock, so the interval between two reports is the node's.
        var log = new Microsoft.Extensions.Logging.Testing.FakeLogger(
            Microsoft.Extensions.Logging.Testing.FakeLogCollector.Create(new Microsoft.Extensions.Logging.Testing.FakeLogCollectorOptions { TimeProvider = _farm.Time }));
        work.ForwardLog = log;
        var failing = 1;
        var tries = 0;
        work.Forward = (_, _, _, _, _, _, _) =>
        {
            Interlocked.Increment(ref tries);
            return Volatile.Read(ref failing) == 1 ? Task.FromException(new IOException("no route to the target's node")) : Task.CompletedTask;
        };
        bool Warned(int count) => log.Collector.GetSnapshot().Count(r => r.Level == LogLevel.Warning) >= count;
        await DeadLetterAsync(work, 0);

        await _farm.SweepUntilAsync(() => Warned(1), "the first report");
        Assert.True(Volatile.Read(ref tries) >= QueueEntity.ForwardFailuresBeforeReport, $"reported after {tries} tries");
        var first = log.Collector.GetSnapshot().Single(r => r.Level == LogLevel.Warning);
        Assert.Contains("'work/$DeadLetterQueue' to 'errors'", first.Message, StringComparison.Ordinal);
        Assert.Contains("no route to the target's node", first.Message, StringComparison.Ordinal);
        await _farm.SweepUntilAsync(() => Warned(2), "the report a minute later", maxSweeps: 400);
        var warnedAt = log.Collector.GetSnapshot().Where(r => r.Level == LogLevel.Warning).Select(r => r.Timestamp).ToList();
        Assert.True(warnedAt[1] - warnedAt[0] >= QueueEntity.ForwardFailureReportInterval, $"reported again after {warnedAt[1] - warnedAt[0]}");
        // A try a second of the node's clock; how many ran depends on how fast the runs kept up with it.
        Assert.True(Volatile.Read(ref tries) > 2 * QueueEntity.ForwardFailuresBeforeReport, $"{tries} tries, two reports");

        Volatile.Write(ref failing, 0);
        await _farm.SweepUntilAsync(() => work.Peek(true, 0, 10).Count == 0, "forwarded once the target answers");
        await Eventually.UntilAsync(() => log.Collector.GetSnapshot().Any(r => r.Level == LogLevel.Information && r.Message.Contains("works again", StringComparison.Ordinal)),
            TimeSpan.FromSeconds(30), "the report that it works again");
        Assert.Equal(2, log.Collector.GetSnapshot().Count(r => r.Level == LogLevel.Warning));
    }

    /// <summary>
    /// A queue's own forwarding that works does not hide its dead letters' forwarding failing (a
    /// deleted ForwardDeadLetteredMessagesTo): each has its own streak of failed runs. Before, one
    /// counter served both, each run of the queue's own messages reset it, and a queue with steady
    /// traffic never reported its dead letters stuck.
    /// </summary>
    [Fact]
    public async Task DeadLetterForwardingThatKeepsFailing_IsLogged_WhileTheQueuesOwnForwardingWorks()
    {
        await _farm.CreateQueueAsync("errors");
        await _farm.CreateQueueAsync("archive");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        var log = new Microsoft.Extensions.Logging.Testing.FakeLogger();
        work.ForwardLog = log;
        int archived = 0, deadLetterTries = 0;
        work.Forward = (target, _, _, _, _, _, _) =>
        {
            if (target == "errors")
            {
                Interlocked.Increment(ref deadLetterTries);
                return Task.FromException(new IOException("no route to the target's node"));
            }
            Interlocked.Increment(ref archived);
            return Task.CompletedTask;
        };
        await DeadLetterAsync(work, 0);
        work.Settings = work.Settings with { ForwardTo = "archive" };

        // Runs alternate: a message of the queue's own goes through, then the dead letter fails.
        for (var i = 1; i <= QueueEntity.ForwardFailuresBeforeReport + 1; i++)
        {
            await work.SendAsync([Text($"n{i}")]);
            await _farm.SweepUntilAsync(() => Volatile.Read(ref archived) >= i, $"message n{i} forwarded");
            var tried = Volatile.Read(ref deadLetterTries);
            await _farm.SweepUntilAsync(() => Volatile.Read(ref deadLetterTries) > tried, "the dead letter tried again");
        }

        var warning = Assert.Single(log.Collector.GetSnapshot(), r => r.Level == LogLevel.Warning);
        Assert.Contains("'work/$DeadLetterQueue' to 'errors'", warning.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(log.Collector.GetSnapshot(), r => r.Message.Contains("'work' to 'archive'", StringComparison.Ordinal));
    }

    /// <summary>
    /// A send as another node's forwarder makes it (BrokerNode.ForwardAsync): from source
    /// <paramref name="source"/>'s main queue, batch <paramref name="batch"/>, messages "m{sequence}".
    /// </summary>
    private static SendRequest ForwardedSend(string entity, string source, bool repeat, string batch, long[] sequences) => new()
    {
        Entity = entity,
        Forwarded = true,
        Repeat = repeat,
        ProducerId = $"farm.forward/{source}/main/{sequences[^1]}/{batch}",
        SendId = sequences[0],
        ForwardSource = $"farm.forward/{source}/main",
        ForwardSequences = { sequences },
        Messages = { sequences.Select(s => Text($"m{s}", messageId: $"m{s}")) },
    };

    /// <summary>Sends messages with these ids to the queue and dead-letters them; their sequence numbers.</summary>
    private static async Task<long[]> DeadLetterAsync(QueueEntity queue, params int[] ids)
    {
        var sequences = await queue.SendAsync([.. ids.Select(i => Text($"m{i}", messageId: i.ToString(CultureInfo.InvariantCulture)))]);
        var locked = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, ids.Length, TimeSpan.Zero, default);
        Assert.Equal(ids.Length, locked.Count);
        await queue.SettleAsync(false, [.. locked.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.DeadLetter })]);
        return sequences;
    }
    /// <summary>
    /// A dead letter whose forwarded copy is too large for the target (the reason properties it
    /// carries took it past the limit) stays in the dead-letter queue, and the dead letters around
    /// it go on. Before, the batch holding it was refused every second, and nothing behind it moved.
    /// </summary>
    [Fact]
    public async Task ADeadLetterTooLargeToForward_StaysInTheDeadLetterQueue_TheOthersGoOn_AndItIsReceivedOnceForwardingStops()
    {
        await _farm.DisposeAsync();
        _farm = await StartAsync(h => h.Options.MaxMessageSizeBytes = 8 * 1024);
        var errors = await _farm.CreateQueueAsync("errors");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        await work.SendAsync([Text("before", messageId: "before"), Text(new string('x', 8 * 1024 - 100), messageId: "big"), Text("after", messageId: "after")]);
        var locked = await work.ReceiveAsync(false, ReceiveMode.PeekLock, 3, TimeSpan.Zero, default);

        await work.SettleAsync(false, [.. locked.Select(m => new Settlement
        {
            LockToken = m.LockToken, Disposition = Disposition.DeadLetter, DeadLetterReason = "Invalid", DeadLetterErrorDescription = new string('d', 200),
        })]);
        await _farm.SweepUntilAsync(() => errors.Peek(false, 0, 10).Count == 2, "the dead letters that fit forwarded");

        Assert.Equal(["before", "after"], errors.Peek(false, 0, 10).Select(m => m.Message.MessageId));
        // The run that stored those ends by leaving the refused one out of the forwarding (until
        // then it is settling, which a peek does not show); later sweeps do not try it again.
        await _farm.SweepUntilAsync(() => work.Peek(true, 0, 10).Count == 1, "the refused dead letter left in the dead-letter queue");
        for (var i = 0; i < 20; i++)
        {
            _farm.Time.Advance(_farm.Options.SweepInterval);
        }
        Assert.Equal("big", Assert.Single(work.Peek(true, 0, 10)).Message.MessageId);
        Assert.Equal(2, errors.Peek(false, 0, 10).Count);

        // Without the forwarding it is a dead letter like any other: received.
        work.Settings = work.Settings with { ForwardDeadLetteredMessagesTo = null };
        Assert.Equal("big", Assert.Single(await work.ReceiveAsync(true, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default)).Message.MessageId);
    }

    /// <summary>
    /// A message of the queue whose copy the target refuses for its size (here one more hop takes a
    /// message of exactly the maximum size past it) is dead-lettered where it is, naming the target
    /// and its answer, and the messages around it are forwarded in order.
    /// </summary>
    [Fact]
    public async Task AMessageTooLargeToForward_IsDeadLetteredInItsQueue_NamingTheTarget_AndTheOthersGoOnInOrder()
    {
        await _farm.DisposeAsync();
        _farm = await StartAsync(h => h.Options.MaxMessageSizeBytes = 8 * 1024);
        var archive = await _farm.CreateQueueAsync("archive");
        var orders = await _farm.CreateQueueAsync("orders");
        var full = Text("x", messageId: "full");
        full.Body = ByteString.CopyFrom(new byte[8 * 1024 - full.CalculateSize()]);
        Assert.Equal(8 * 1024, full.CalculateSize());
        await orders.SendAsync([Text("1", messageId: "first"), full, Text("3", messageId: "last")]);

        orders.Settings = orders.Settings with { ForwardTo = "archive" };
        await _farm.SweepUntilAsync(() => archive.Peek(false, 0, 10).Count == 2, "the messages that fit forwarded");
        await _farm.SweepUntilAsync(() => orders.Peek(true, 0, 10).Count == 1, "the one too large dead-lettered in its queue");

        Assert.Equal(["first", "last"], archive.Peek(false, 0, 10).Select(m => m.Message.MessageId));
        var dead = Assert.Single(orders.Peek(true, 0, 10));
        Assert.Equal("full", dead.Message.MessageId);
        Assert.Equal(QueueEntity.ForwardingRefused, dead.DeadLetterReason);
        Assert.StartsWith("'archive' refused it: ", dead.DeadLetterErrorDescription);
        Assert.Contains("maximum message size", dead.DeadLetterErrorDescription);
        Assert.Empty(orders.Peek(false, 0, 10));
    }

    /// <summary>
    /// Another node's refusal comes back as a call's failure with the "farm-error" trailer: read the
    /// same way, the batch goes again one message at a time under each one's name, and only the
    /// refused one stays; any other failure fails the run as before.
    /// </summary>
    [Fact]
    public async Task ARemoteRefusalForSize_SendsTheBatchOneByOne_UnderEachOnesName()
    {
        await _farm.CreateQueueAsync("errors");
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        var calls = new List<(string[] Ids, SendName Name)>();
        work.Forward = (_, messages, _, name, _, _, _) =>
        {
            lock (calls)
            {
                var ids = messages.Select(m => m.MessageId).ToArray();
                calls.Add((ids, name));
                return ids.Contains("big")
                    ? Task.FromException(new Grpc.Core.RpcException(
                        new Grpc.Core.Status(Grpc.Core.StatusCode.InvalidArgument, "Message 1 is too large."),
                        new Grpc.Core.Metadata { { Farm.Contracts.FarmMetadata.ErrorTrailer, Farm.Contracts.FarmErrorNames.Of(FarmErrorCode.MessageSizeExceeded) } }))
                    : Task.CompletedTask;
            }
        };
        var sequences = await work.SendAsync([Text("a", messageId: "a"), Text("big", messageId: "big"), Text("c", messageId: "c")]);
        var locked = await work.ReceiveAsync(false, ReceiveMode.PeekLock, 3, TimeSpan.Zero, default);

        await work.SettleAsync(false, [.. locked.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.DeadLetter })]);
        await _farm.SweepUntilAsync(() => work.Peek(true, 0, 10).Count == 1 && calls.Count == 4, "the batch sent again one by one");

        Assert.Equal([["a", "big", "c"], ["a"], ["big"], ["c"]], calls.Select(c => c.Ids));
        Assert.Equal(QueueEntity.ForwardSendName(work.Id, fromDeadLetter: true, [sequences[1]]), calls[2].Name);
        Assert.Equal("big", Assert.Single(work.Peek(true, 0, 10)).Message.MessageId);
    }

    /// <summary>A queue's message refused by another node is dead-lettered with that node's own words, not the call's status dump.</summary>
    [Fact]
    public async Task AQueuesMessageRefusedByAnotherNode_IsDeadLetteredWithItsAnswer()
    {
        await _farm.CreateQueueAsync("archive");
        var orders = await _farm.CreateQueueAsync("orders");
        orders.Forward = (_, _, _, _, _, _, _) => Task.FromException(new Grpc.Core.RpcException(
            new Grpc.Core.Status(Grpc.Core.StatusCode.InvalidArgument, "Message 0 is 300000 bytes; the maximum message size is 262144 bytes (256 KB)."),
            new Grpc.Core.Metadata { { Farm.Contracts.FarmMetadata.ErrorTrailer, Farm.Contracts.FarmErrorNames.Of(FarmErrorCode.MessageSizeExceeded) } }));
        await orders.SendAsync([Text("too big over there", messageId: "big")]);

        orders.Settings = orders.Settings with { ForwardTo = "archive" };
        await _farm.SweepUntilAsync(() => orders.Peek(true, 0, 10).Count == 1, "the refused message dead-lettered");

        var dead = Assert.Single(orders.Peek(true, 0, 10));
        Assert.Equal(QueueEntity.ForwardingRefused, dead.DeadLetterReason);
        Assert.Equal("'archive' refused it: Message 0 is 300000 bytes; the maximum message size is 262144 bytes (256 KB).", dead.DeadLetterErrorDescription);
    }

    /// <summary>Fills <paramref name="queue"/> (MaxSizeInMegabytes 1) until one more message of 100 KB does not fit.</summary>
    private static async Task FillAsync(QueueEntity queue)
    {
        for (var i = 0; i < 5; i++)
        {
            await queue.SendAsync([Bytes(200 * 1024, $"filler-{i}")]);
        }
    }

    private static Message Bytes(int size, string messageId) => new() { MessageId = messageId, Body = ByteString.CopyFrom(new byte[size]) };

    /// <summary>
    /// Azure Service Bus: "If the destination entity ... exceeds the quota, ... the source entity adds
    /// the messages to its dead-letter queue until there's space in the destination." Before, they
    /// waited in the source and were tried every second.
    /// </summary>
    [Fact]
    public async Task MessagesForwardedToAFullQueue_AreDeadLetteredInTheirQueue_AndLaterOnesGoOnceThereIsRoom()
    {
        var archive = await _farm.CreateQueueAsync("archive", new QueueSettings { MaxSizeInMegabytes = 1 });
        await FillAsync(archive);
        var orders = await _farm.CreateQueueAsync("orders");
        await orders.SendAsync([Bytes(100 * 1024, "first"), Bytes(100 * 1024, "second")]);

        orders.Settings = orders.Settings with { ForwardTo = "archive" };
        await _farm.SweepUntilAsync(() => orders.Peek(true, 0, 10).Count == 2, "both dead-lettered in orders");

        Assert.Equal(["first", "second"], orders.Peek(true, 0, 10).Select(m => m.Message.MessageId));
        Assert.All(orders.Peek(true, 0, 10), dead =>
        {
            Assert.Equal(QueueEntity.ForwardingRefused, dead.DeadLetterReason);
            Assert.StartsWith("'archive' refused it: The queue 'archive' is full", dead.DeadLetterErrorDescription);
        });
        Assert.Empty(orders.Peek(false, 0, 10));
        Assert.Equal(5, archive.Peek(false, 0, 10).Count);

        await archive.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 5, TimeSpan.Zero, default);
        await orders.SendAsync([Bytes(100 * 1024, "third")]);
        await _farm.SweepUntilAsync(() => archive.Peek(false, 0, 10).Count == 1, "the later one forwarded");

        Assert.Equal("third", Assert.Single(archive.Peek(false, 0, 10)).Message.MessageId);
        Assert.Equal(2, orders.Peek(true, 0, 10).Count);
    }

    /// <summary>
    /// A new send to a queue whose ForwardTo is full is stored, not refused: it lands in the queue
    /// named, whose forwarder dead-letters it there, as in Azure. Before, the sender got QUOTA_EXCEEDED
    /// naming a queue it never sent to. Only the queue named being full refuses the send.
    /// </summary>
    [Fact]
    public async Task ASendToAQueueForwardingToAFullOne_IsStored_AndDeadLetteredWhereItWasSent()
    {
        var archive = await _farm.CreateQueueAsync("archive", new QueueSettings { MaxSizeInMegabytes = 1 });
        await FillAsync(archive);
        var orders = await _farm.CreateQueueAsync("orders", new QueueSettings { ForwardTo = "archive", MaxSizeInMegabytes = 1 });

        await SendThroughTheServiceAsync("orders", Bytes(100 * 1024, "late"));
        await _farm.SweepUntilAsync(() => orders.Peek(true, 0, 10).Count == 1, "the send dead-lettered in orders");

        var dead = Assert.Single(orders.Peek(true, 0, 10));
        Assert.Equal(("late", QueueEntity.ForwardingRefused, 0u), (dead.Message.MessageId, dead.DeadLetterReason, dead.Message.TransferHopCount));
        Assert.Equal(5, archive.Peek(false, 0, 10).Count);

        // orders itself full: now the sender is told.
        await orders.SendAsync([Bytes(230 * 1024, "a"), Bytes(230 * 1024, "b"), Bytes(230 * 1024, "c"), Bytes(230 * 1024, "d")]);
        var error = await Assert.ThrowsAsync<BrokerException>(() => SendThroughTheServiceAsync("orders", Bytes(100 * 1024, "refused")));
        Assert.Equal(FarmErrorCode.QuotaExceeded, error.Code);
        Assert.Contains("'orders' is full", error.Message);
    }

    /// <summary>A dead letter cannot be dead-lettered again: one whose forwarding target is full stays in the dead-letter queue and goes once there is room.</summary>
    [Fact]
    public async Task ADeadLetterForwardedToAFullQueue_WaitsInTheDeadLetterQueue_AndGoesOnceThereIsRoom()
    {
        var errors = await _farm.CreateQueueAsync("errors", new QueueSettings { MaxSizeInMegabytes = 1 });
        await FillAsync(errors);
        var work = await _farm.CreateQueueAsync("work", new QueueSettings { ForwardDeadLetteredMessagesTo = "errors" });
        await work.SendAsync([Bytes(100 * 1024, "bad")]);
        var locked = Assert.Single(await work.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        await work.SettleAsync(false, [new Settlement { LockToken = locked.LockToken, Disposition = Disposition.DeadLetter, DeadLetterReason = "Invalid" }]);
        // Refused as full twice (tried again after the rest), and back in the dead-letter queue.
        var forward = work.Forward!;
        var refusals = 0;
        work.Forward = async (target, messages, source, name, origin, repeat, cancellationToken) =>
        {
            try
            {
                await forward(target, messages, source, name, origin, repeat, cancellationToken);
            }
            catch (BrokerException e) when (e.Code == FarmErrorCode.QuotaExceeded)
            {
                Interlocked.Increment(ref refusals);
                throw;
            }
        };
        await _farm.SweepUntilAsync(() => Volatile.Read(ref refusals) >= 2 && work.Peek(true, 0, 10).Count == 1, "the dead letter refused twice and still there");
        var dead = Assert.Single(work.Peek(true, 0, 10));
        Assert.Equal(("bad", "Invalid"), (dead.Message.MessageId, dead.DeadLetterReason));
        Assert.Equal(5, errors.Peek(false, 0, 10).Count);

        await errors.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 5, TimeSpan.Zero, default);
        await _farm.SweepUntilAsync(() => errors.Peek(false, 0, 10).Count == 1, "the dead letter forwarded once there is room");

        Assert.Empty(work.Peek(true, 0, 10));
    }

    /// <summary>Another node's target full: each message dead-lettered with its answer, without a call per message once it said so.</summary>
    [Fact]
    public async Task AQueuesMessagesRefusedAsFullByAnotherNode_AreDeadLettered_TwoCallsForTheBatch()
    {
        await _farm.CreateQueueAsync("archive");
        var orders = await _farm.CreateQueueAsync("orders");
        var calls = 0;
        orders.Forward = (_, _, _, _, _, _, _) =>
        {
            Interlocked.Increment(ref calls);
            return Task.FromException(new Grpc.Core.RpcException(
                new Grpc.Core.Status(Grpc.Core.StatusCode.ResourceExhausted, "The queue 'archive' is full."),
                new Grpc.Core.Metadata { { Farm.Contracts.FarmMetadata.ErrorTrailer, Farm.Contracts.FarmErrorNames.Of(FarmErrorCode.QuotaExceeded) } }));
        };
        await orders.SendAsync([Text("a", messageId: "a"), Text("b", messageId: "b"), Text("c", messageId: "c")]);

        orders.Settings = orders.Settings with { ForwardTo = "archive" };
        await _farm.SweepUntilAsync(() => orders.Peek(true, 0, 10).Count == 3, "all three dead-lettered");

        Assert.Equal(2, calls);
        Assert.All(orders.Peek(true, 0, 10), dead => Assert.Equal("'archive' refused it: The queue 'archive' is full.", dead.DeadLetterErrorDescription));
    }
}
