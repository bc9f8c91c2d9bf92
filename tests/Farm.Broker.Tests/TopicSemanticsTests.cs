using Farm.Testing;
using System.Collections.Concurrent;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;
using Google.Protobuf;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>
/// Topics and subscriptions on a real broker node with real SQLite files and a manual clock: fan-out
/// through rules, the message stored once, each subscription's own locks, counts, dead letters and
/// TTLs, ordering, and what survives a restart.
/// </summary>
public sealed class TopicSemanticsTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static Settlement Settle(ReceivedMessage m, Disposition d) => new() { LockToken = m.LockToken, Disposition = d };

    private static string Body(ReceivedMessage m) => m.Message.Body.ToStringUtf8();

    private static Task WaitUntilAsync(Func<Task<bool>> condition, string what) => Eventually.UntilAsync(condition, TimeSpan.FromSeconds(10), what);

    /// <summary>Sweeps the topic (its timer runs on the test's manual clock) until its container holds no copy.</summary>
    private Task WaitUntilCollectedAsync(TopicEntity topic, string what) => WaitUntilAsync(async () =>
    {
        topic.Sweep();
        return (await _farm.ReadContainerDirectlyAsync(1, topic.Id)).Messages.Count == 0;
    }, what);

    private static Message Order(int i, string color, long quantity, string? subject = null)
    {
        var message = Text($"order-{i}");
        message.ApplicationProperties["color"] = new PropertyValue { StringValue = color };
        message.ApplicationProperties["quantity"] = new PropertyValue { LongValue = quantity };
        if (subject is not null)
        {
            message.Subject = subject;
        }
        return message;
    }

    private static async Task<List<ReceivedMessage>> DrainAsync(QueueEntity subscription, bool deadLetter = false, ReceiveMode mode = ReceiveMode.ReceiveAndDelete)
    {
        var all = new List<ReceivedMessage>();
        while (true)
        {
            var batch = await subscription.ReceiveAsync(deadLetter, mode, 100, TimeSpan.Zero, default);
            if (batch.Count == 0)
            {
                return all;
            }
            all.AddRange(batch);
        }
    }

    /// <summary>A topic counts sends in flight against MaxSizeInMegabytes too: of twenty concurrent 200 KB sends to a 1 MB topic, five are stored.</summary>
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task QuotaExceeded_CountsSendsInFlight(bool ordering)
    {
        var topic = await _farm.CreateTopicAsync("t", new TopicSettings { MaxSizeInMegabytes = 1, SupportOrdering = ordering });
        var subscription = await _farm.CreateSubscriptionAsync("t", "all");
        var big = new Message { Body = ByteString.CopyFrom(new byte[200 * 1024]) };

        var sends = Enumerable.Range(0, 20).Select(_ => Task.Run(() => topic.SendAsync([big]))).ToList();
        await Task.WhenAll(sends.Select(s => s.ContinueWith(_ => { })));

        Assert.All(sends.Where(s => s.IsFaulted), s => Assert.Equal("QUOTA_EXCEEDED",
            Farm.Contracts.FarmErrorNames.Of(Assert.IsType<Farm.Broker.BrokerException>(s.Exception!.InnerException).Code)));
        Assert.Equal(5, sends.Count(s => s.IsCompletedSuccessfully));
        Assert.Equal(5, topic.GetCounts().Count);
        Assert.Equal(5, subscription.GetCounts().Active);
    }

    [Fact]
    public async Task FanOut_ToSubscriptionsWithDifferentFilters_DeliversExactlyTheMatchingMessagesToEach()
    {
        var topic = await _farm.CreateTopicAsync("orders");
        var all = await _farm.CreateSubscriptionAsync("orders", "all");
        var red = await _farm.CreateSubscriptionAsync("orders", "red", null, SqlRule("red", "color = 'red'"));
        var big = await _farm.CreateSubscriptionAsync("orders", "big", null, SqlRule("big", "quantity > 10 AND color <> 'blue'"));
        var invoices = await _farm.CreateSubscriptionAsync("orders", "invoices", null,
            new RuleProperties { Name = "inv", CorrelationFilter = new Contracts.V1.CorrelationFilter { Subject = "invoice" } });
        var nothing = await _farm.CreateSubscriptionAsync("orders", "nothing", null, SqlRule("never", "1=0"));
        // Two rules that both match a red, big order: it still arrives once.
        var either = await _farm.CreateSubscriptionAsync("orders", "either", null, SqlRule("isRed", "color = 'red'"), SqlRule("isBig", "quantity > 10"));

        var colors = new[] { "red", "blue", "green" };
        var sent = Enumerable.Range(0, 60).Select(i => Order(i, colors[i % 3], i, i % 4 == 0 ? "invoice" : "note")).ToList();
        foreach (var chunk in sent.Chunk(7))
        {
            await topic.SendAsync(chunk);
        }

        static List<string> Bodies(IEnumerable<Message> messages) => messages.Select(m => m.Body.ToStringUtf8()).ToList();
        static string Color(Message m) => m.ApplicationProperties["color"].StringValue;
        static long Quantity(Message m) => m.ApplicationProperties["quantity"].LongValue;

        Assert.Equal(Bodies(sent), (await DrainAsync(all)).Select(Body));
        Assert.Equal(Bodies(sent.Where(m => Color(m) == "red")), (await DrainAsync(red)).Select(Body));
        Assert.Equal(Bodies(sent.Where(m => Quantity(m) > 10 && Color(m) != "blue")), (await DrainAsync(big)).Select(Body));
        Assert.Equal(Bodies(sent.Where(m => m.Subject == "invoice")), (await DrainAsync(invoices)).Select(Body));
        Assert.Empty(await DrainAsync(nothing));
        Assert.Equal(Bodies(sent.Where(m => Color(m) == "red" || Quantity(m) > 10)), (await DrainAsync(either)).Select(Body));
    }

    [Fact]
    public async Task TheTopicStoresEachMessageOnce_SubscriptionsPointAtIt_AndTheCopyGoesWithTheLastSettlement()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        var sequence = (await topic.SendAsync([Text(new string('x', 1000))]))[0];

        var stored = await _farm.ReadContainerDirectlyAsync(1, topic.Id);
        var copy = Assert.Single(stored.Messages);
        Assert.Equal(sequence, copy.SequenceNumber);
        Assert.NotNull(copy.Payload);
        foreach (var subscription in new[] { a, b })
        {
            // Each has the message by the copy's membership (it follows the topic), without a row.
            Assert.Empty((await _farm.ReadContainerDirectlyAsync(1, subscription.Id)).Messages);
            var head = Assert.Single((await _farm.ReadSubscriptionHeadDirectlyAsync(1, subscription.Id, topic.Id)).Messages);
            Assert.True(head.Implicit);
            Assert.Equal(copy.PayloadSize, head.PayloadSize);
        }

        var fromA = Assert.Single(await a.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        await a.SettleAsync(false, [Settle(fromA, Disposition.Complete)]);
        Assert.Single((await _farm.ReadContainerDirectlyAsync(1, topic.Id)).Messages);
        Assert.Equal((1, copy.PayloadSize), topic.GetCounts());

        Assert.Single(await b.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 1, TimeSpan.Zero, default));
        await WaitUntilCollectedAsync(topic, "the topic's copy is deleted");
        Assert.Equal((0, 0), topic.GetCounts());
    }

    [Fact]
    public async Task AMessageNoSubscriptionWants_IsAcceptedButNotStored()
    {
        var topic = await _farm.CreateTopicAsync("t");
        await _farm.CreateSubscriptionAsync("t", "red", null, SqlRule("red", "color = 'red'"));

        var sequence = await topic.SendAsync([Order(1, "blue", 1)]);

        Assert.Equal(1L, sequence[0]);
        Assert.Empty((await _farm.ReadContainerDirectlyAsync(1, topic.Id)).Messages);
    }

    [Fact]
    public async Task RuleActions_ChangeOnlyTheirSubscriptionsCopy_WhichIsStoredWithItsOwnPayload()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var plain = await _farm.CreateSubscriptionAsync("t", "plain");
        var tagged = await _farm.CreateSubscriptionAsync("t", "tagged", null,
            SqlRule("tag", "color = 'red'", "SET priority = 'high'; SET quantity = quantity * 2; REMOVE color"),
            SqlRule("label", "1=1", "SET sys.Label = 'labelled'"));
        await topic.SendAsync([Order(1, "red", 21), Order(2, "blue", 5)]);

        var changed = await DrainAsync(tagged, mode: ReceiveMode.PeekLock);
        Assert.Equal(2, changed.Count);
        Assert.Equal("high", changed[0].Message.ApplicationProperties["priority"].StringValue);
        Assert.Equal(42, changed[0].Message.ApplicationProperties["quantity"].LongValue);
        Assert.False(changed[0].Message.ApplicationProperties.ContainsKey("color"));
        Assert.Equal("labelled", changed[0].Message.Subject);
        Assert.Equal("tag,label", changed[0].Message.ApplicationProperties["RuleName"].StringValue);
        Assert.False(changed[1].Message.ApplicationProperties.ContainsKey("priority"));
        Assert.Equal("labelled", changed[1].Message.Subject);

        var original = await DrainAsync(plain);
        Assert.Equal("red", original[0].Message.ApplicationProperties["color"].StringValue);
        Assert.Equal(21, original[0].Message.ApplicationProperties["quantity"].LongValue);
        Assert.Equal("", original[0].Message.Subject);

        var rows = (await _farm.ReadContainerDirectlyAsync(1, tagged.Id)).Messages;
        Assert.All(rows, r => Assert.NotNull(r.Payload));

        // A restart reads the changed copies back from their own rows.
        await _farm.RestartAsync();
        var reloaded = await DrainAsync(await _farm.SubscriptionAsync("t", "tagged"));
        Assert.Equal("high", reloaded[0].Message.ApplicationProperties["priority"].StringValue);
    }

    [Fact]
    public async Task EachSubscription_HasItsOwnLocks_DeliveryCounts_AndDeadLetterQueue()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var strict = await _farm.CreateSubscriptionAsync("t", "strict", new SubscriptionSettings { LockDuration = TimeSpan.FromSeconds(30), MaxDeliveryCount = 2 });
        var relaxed = await _farm.CreateSubscriptionAsync("t", "relaxed");
        await topic.SendAsync([Text("m")]);

        var first = Assert.Single(await strict.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        await strict.SettleAsync(false, [Settle(first, Disposition.Abandon)]);
        var second = Assert.Single(await strict.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal(2, second.DeliveryCount);
        // The lock runs out: past MaxDeliveryCount the message goes to strict's dead-letter queue.
        _farm.Time.Advance(TimeSpan.FromSeconds(31));
        strict.Sweep();
        await WaitUntilAsync(() => Task.FromResult(strict.GetCounts().DeadLetter == 1), "the broker dead-letters the message");
        var dead = Assert.Single(await DrainAsync(strict, deadLetter: true));
        Assert.Equal(QueueEntity.MaxDeliveryCountExceeded, dead.DeadLetterReason);
        Assert.Equal("t/Subscriptions/strict/$DeadLetterQueue", (await _farm.Node.ResolveQueueAsync("t/Subscriptions/strict", default)).Name + "/$DeadLetterQueue");

        // The other subscription never saw a delivery and still holds the message, unlocked.
        var fromRelaxed = Assert.Single(await relaxed.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal(1, fromRelaxed.DeliveryCount);
        Assert.Equal(_farm.Time.GetUtcNow() + TimeSpan.FromMinutes(1), fromRelaxed.LockedUntil.ToDateTimeOffset());
        Assert.Equal(1, relaxed.GetCounts().Locked);
        Assert.Equal(0, strict.GetCounts().Locked);
    }

    [Fact]
    public async Task TimeToLive_IsTheSmallestOfMessageTopicAndSubscription_AndExpiresPerSubscription()
    {
        var topic = await _farm.CreateTopicAsync("t", new TopicSettings { DefaultMessageTimeToLive = TimeSpan.FromMinutes(10) });
        var shortLived = await _farm.CreateSubscriptionAsync("t", "short", new SubscriptionSettings
        {
            DefaultMessageTimeToLive = TimeSpan.FromSeconds(10),
            DeadLetteringOnMessageExpiration = true,
        });
        var longLived = await _farm.CreateSubscriptionAsync("t", "long");
        await topic.SendAsync([Text("a"), Text("b", ttl: TimeSpan.FromSeconds(5))]);

        _farm.Time.Advance(TimeSpan.FromSeconds(6));
        longLived.Sweep();
        shortLived.Sweep();
        Assert.Equal(["a"], (await longLived.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default)).Select(Body));
        _farm.Time.Advance(TimeSpan.FromSeconds(5));
        shortLived.Sweep();
        Assert.Empty(await shortLived.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default));
        await WaitUntilAsync(() => Task.FromResult(shortLived.GetCounts().DeadLetter == 2), "both messages are dead-lettered");
        var dead = await DrainAsync(shortLived, deadLetter: true);
        Assert.Equal(["a", "b"], dead.Select(Body).Order());
        Assert.All(dead, d => Assert.Equal(QueueEntity.TtlExpired, d.DeadLetterReason));

        var received = Assert.Single((await _farm.ReadContainerDirectlyAsync(1, longLived.Id)).Messages, m => m.SequenceNumber == 1);
        Assert.Equal(_farm.Time.GetUtcNow().AddSeconds(-11).AddMinutes(10).ToUnixTimeMilliseconds(), received.ExpiresAtMs);
    }

    [Fact]
    public async Task AFilterThatCannotBeEvaluated_DeadLettersTheMessage_OrDropsItWhenTheSubscriptionSaysSo()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var dl = await _farm.CreateSubscriptionAsync("t", "dl", null, SqlRule("broken", "quantity / zero > 1"));
        var drop = await _farm.CreateSubscriptionAsync("t", "drop", new SubscriptionSettings { DeadLetteringOnFilterEvaluationExceptions = false },
            SqlRule("broken", "quantity / zero > 1"));
        var message = Order(1, "red", 10);
        message.ApplicationProperties["zero"] = new PropertyValue { LongValue = 0 };
        await topic.SendAsync([message]);

        Assert.Empty(await dl.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        var dead = Assert.Single(await DrainAsync(dl, deadLetter: true));
        Assert.Equal(TopicEntity.FilterEvaluationFailed, dead.DeadLetterReason);
        Assert.Contains("broken", dead.DeadLetterErrorDescription, StringComparison.Ordinal);
        Assert.Empty(await DrainAsync(drop));
        Assert.Empty(await DrainAsync(drop, deadLetter: true));
    }

    [Fact]
    public async Task ABrokerRestart_KeepsEverySubscriptionsUnsettledMessages()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a", new SubscriptionSettings { LockDuration = TimeSpan.FromSeconds(30) });
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        var c = await _farm.CreateSubscriptionAsync("t", "c", null, SqlRule("odd", "quantity % 2 = 1"));
        await topic.SendAsync(Enumerable.Range(1, 10).Select(i => Order(i, "red", i)).ToList());

        // a: 3 completed, 2 locked (in flight when the broker dies), 5 untouched. b: all completed. c: odd ones untouched.
        var locked = await a.ReceiveAsync(false, ReceiveMode.PeekLock, 5, TimeSpan.Zero, default);
        await a.SettleAsync(false, locked.Take(3).Select(m => Settle(m, Disposition.Complete)).ToList());
        Assert.Equal(10, (await DrainAsync(b)).Count);

        await _farm.RestartAsync(crash: true);

        var afterA = await DrainAsync(await _farm.SubscriptionAsync("t", "a"), mode: ReceiveMode.PeekLock);
        Assert.Equal(Enumerable.Range(4, 7).Select(i => $"order-{i}"), afterA.Select(Body));
        Assert.Equal([2, 2, 1, 1, 1, 1, 1], afterA.Select(m => m.DeliveryCount));
        Assert.Empty(await DrainAsync(await _farm.SubscriptionAsync("t", "b")));
        Assert.Equal(["order-1", "order-3", "order-5", "order-7", "order-9"], (await DrainAsync(await _farm.SubscriptionAsync("t", "c"))).Select(Body));
        // Counted after the takeover; the copies of what was settled are deleted by the next sweeps.
        var reloaded = await _farm.TopicAsync("t");
        await WaitUntilAsync(() =>
        {
            reloaded.Sweep();
            return Task.FromResult(reloaded.GetCounts().Count == 7);
        }, "the copies still pointed at are counted");
        Assert.Equal(7, (await _farm.ReadContainerDirectlyAsync(1, reloaded.Id)).Messages.Count);
    }

    [Fact]
    public async Task OrderingOn_EverySubscriptionGetsTheTopicsOrder_UnderConcurrentSendersAndSettlements()
    {
        var topic = await _farm.CreateTopicAsync("t", new TopicSettings { SupportOrdering = true });
        var subscriptions = new[]
        {
            await _farm.CreateSubscriptionAsync("t", "s1"),
            await _farm.CreateSubscriptionAsync("t", "s2"),
            await _farm.CreateSubscriptionAsync("t", "s3", null, SqlRule("any", "EXISTS(sender)")),
        };
        const int senders = 8, perSender = 60;
        var acknowledged = new ConcurrentBag<(int Sender, int Index, long Sequence)>();
        var sending = Enumerable.Range(0, senders).Select(s => Task.Run(async () =>
        {
            for (var i = 0; i < perSender; i++)
            {
                var message = Text($"{s}:{i}");
                message.ApplicationProperties["sender"] = new PropertyValue { IntValue = s };
                var sequence = await topic.SendAsync([message]);
                acknowledged.Add((s, i, sequence[0]));
            }
        })).ToList();

        var receiving = subscriptions.Select(subscription => Task.Run(async () =>
        {
            var order = new List<ReceivedMessage>();
            var settling = new List<Task>();
            while (order.Count < senders * perSender)
            {
                var batch = await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 7, TimeSpan.FromSeconds(10), default);
                order.AddRange(batch);
                // Settlements run concurrently with the next receives.
                settling.Add(Task.Run(() => subscription.SettleAsync(false, batch.Select(m => Settle(m, Disposition.Complete)).ToList())));
            }
            await Task.WhenAll(settling);
            return order;
        })).ToList();

        await Task.WhenAll(sending);
        foreach (var received in await Task.WhenAll(receiving))
        {
            var sequences = received.Select(m => m.SequenceNumber).ToList();
            Assert.Equal(acknowledged.Select(a => a.Sequence).Order(), sequences);
            // Each sender's messages arrive in the order it sent them.
            foreach (var sender in received.GroupBy(m => m.Message.Body.ToStringUtf8().Split(':')[0]))
            {
                Assert.Equal(Enumerable.Range(0, perSender), sender.Select(m => int.Parse(m.Message.Body.ToStringUtf8().Split(':')[1])));
            }
        }
    }

    [Fact]
    public async Task TogglingOrderingOnALiveTopic_UnderLoad_LosesAndDuplicatesNothing()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var subscriptions = new[] { await _farm.CreateSubscriptionAsync("t", "a"), await _farm.CreateSubscriptionAsync("t", "b") };
        var acknowledged = new ConcurrentBag<string>();
        using var stop = new CancellationTokenSource();
        var sending = Enumerable.Range(0, 6).Select(s => Task.Run(async () =>
        {
            for (var i = 0; i < 150; i++)
            {
                var ids = new[] { $"{s}-{i}-a", $"{s}-{i}-b" };
                await topic.SendAsync(ids.Select(id => Text(id, id)).ToList());
                foreach (var id in ids)
                {
                    acknowledged.Add(id);
                }
            }
        })).ToList();
        var toggles = 0;
        var toggling = Task.Run(async () =>
        {
            while (!stop.IsCancelled())
            {
                topic.Settings = topic.Settings with { SupportOrdering = !topic.Settings.SupportOrdering };
                toggles++;
                await Task.Yield();
            }
        });
        var receiving = subscriptions.Select(subscription => Task.Run(async () =>
        {
            var got = new List<string>();
            while (got.Count < 6 * 150 * 2)
            {
                var batch = await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 50, TimeSpan.FromSeconds(10), default);
                Assert.NotEmpty(batch);
                got.AddRange(batch.Select(m => m.Message.MessageId));
                await subscription.SettleAsync(false, batch.Select(m => Settle(m, Disposition.Complete)).ToList());
            }
            return got;
        })).ToList();

        await Task.WhenAll(sending);
        var results = await Task.WhenAll(receiving);
        await stop.CancelAsync();
        await toggling;

        Assert.True(toggles > 10, $"ordering was toggled only {toggles} times");
        foreach (var got in results)
        {
            Assert.Equal(acknowledged.Order(StringComparer.Ordinal), got.Order(StringComparer.Ordinal));
            Assert.Empty(await subscriptions[0].ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        }
        await WaitUntilCollectedAsync(topic, "every copy is released");
        Assert.Equal(0, topic.GetCounts().Count);
    }

    [Fact]
    public async Task DeletingASubscription_ReleasesTheCopiesItPointedAt()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var keep = await _farm.CreateSubscriptionAsync("t", "keep");
        var gone = await _farm.CreateSubscriptionAsync("t", "gone");
        await topic.SendAsync([Text("a"), Text("b")]);
        var record = (await _farm.Node.Farm.GetEntityAsync("t/Subscriptions/gone"))!;

        await _farm.Node.Farm.DeleteEntityAsync(record.Name);
        await _farm.Node.DropSubscriptionAsync(record);
        await DrainAsync(keep);

        await WaitUntilCollectedAsync(topic, "the copies are deleted");
        Assert.Empty((await _farm.ReadContainerDirectlyAsync(1, gone.Id)).Messages);
        await Assert.ThrowsAnyAsync<Exception>(() => gone.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        // New messages go to the remaining subscription only.
        await topic.SendAsync([Text("c")]);
        Assert.Equal(["c"], (await DrainAsync(keep)).Select(Body));
    }

    [Fact]
    public async Task DuplicateDetection_OnTheTopic_DropsARepeatedMessageIdForEverySubscription()
    {
        var topic = await _farm.CreateTopicAsync("t", new TopicSettings { RequiresDuplicateDetection = true });
        var a = await _farm.CreateSubscriptionAsync("t", "a");

        var first = await topic.SendAsync([Text("one", "id-1")]);
        var again = await topic.SendAsync([Text("one again", "id-1"), Text("two", "id-2")]);

        Assert.Equal(0, again[0]);
        Assert.True(again[1] > first[0]);
        Assert.Equal(["one", "two"], (await DrainAsync(a)).Select(Body));
    }

    [Fact]
    public async Task CancellingAScheduledMessage_OnTheTopic_RemovesItFromEverySubscription()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var a = await _farm.CreateSubscriptionAsync("t", "a");
        var b = await _farm.CreateSubscriptionAsync("t", "b");
        var at = _farm.Time.GetUtcNow().AddMinutes(5);
        var sequences = await topic.SendAsync([Text("later", scheduledAt: at), Text("later too", scheduledAt: at)]);

        await topic.CancelScheduledAsync([sequences[0]]);
        _farm.Time.Advance(TimeSpan.FromMinutes(6));
        a.Sweep();
        b.Sweep();

        Assert.Equal(["later too"], (await DrainAsync(a)).Select(Body));
        Assert.Equal(["later too"], (await DrainAsync(b)).Select(Body));
        await Assert.ThrowsAnyAsync<BrokerException>(() => topic.CancelScheduledAsync([sequences[0]]));
    }

    [Fact]
    public async Task ASubscriptionForwardsToAQueue()
    {
        var topic = await _farm.CreateTopicAsync("t");
        var target = await _farm.CreateQueueAsync("audit");
        await _farm.CreateSubscriptionAsync("t", "fwd", new SubscriptionSettings { ForwardTo = "audit" });
        await topic.SendAsync([Text("x")]);

        var forwarded = new List<ReceivedMessage>();
        await WaitUntilAsync(async () =>
        {
            forwarded.AddRange(await target.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, default));
            return forwarded.Count > 0;
        }, "the message reaches the queue");
        Assert.Equal("x", Body(Assert.Single(forwarded)));
        await WaitUntilCollectedAsync(topic, "the topic's copy is released");
    }

    [Fact]
    public async Task ASubscriptionCreatedLater_GetsOnlyLaterMessages_AndRuleChangesApplyToTheNextMessages()
    {
        var topic = await _farm.CreateTopicAsync("t");
        await _farm.CreateSubscriptionAsync("t", "first");
        await topic.SendAsync([Order(1, "red", 1)]);
        var late = await _farm.CreateSubscriptionAsync("t", "late", null, SqlRule("red", "color = 'red'"));
        await topic.SendAsync([Order(2, "red", 1), Order(3, "blue", 1)]);

        var record = (await _farm.Node.Farm.GetEntityAsync("t/Subscriptions/late"))!;
        await _farm.Node.Farm.CreateRuleAsync(record.Id, "blue", RuleDefinitions.ToJson(SqlRule("blue", "color = 'blue'")));
        await _farm.Node.RefreshRulesAsync(record, default);
        await topic.SendAsync([Order(4, "blue", 1)]);

        Assert.Equal(["order-2", "order-4"], (await DrainAsync(late)).Select(Body));
    }
}

internal static class CancellationExtensions
{
    public static bool IsCancelled(this CancellationTokenSource source) => source.IsCancellationRequested;
}
