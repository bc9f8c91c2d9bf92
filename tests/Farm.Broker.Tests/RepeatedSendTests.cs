using Farm.Broker.Messaging;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// A send tried again with the same producer and send id (its first answer was lost with the
/// connection or stream that carried it) is stored once: the repeat gets the first try's sequence
/// numbers. Another send id, no producer, a first try that failed, or a repeat past the time
/// sends are kept still store.
/// </summary>
public sealed class RepeatedSendTests
{
    private static SendRequest Repeat(SendRequest request)
    {
        request.Repeat = true;
        return request;
    }

    private static SendRequest Send(string entity, string producer, long sendId, params string[] bodies)
    {
        var request = new SendRequest { Entity = entity, ProducerId = producer, SendId = sendId };
        request.Messages.AddRange(bodies.Select((body, i) => BrokerHarness.Text(body, $"{producer}-{sendId}-{i}")));
        return request;
    }

    [Fact]
    public async Task TheSameSendTriedAgain_IsStoredOnce_AndAnsweredWithTheFirstTrysSequenceNumbers()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("once");
        var service = new MessagingService(farm.Node);

        var first = await service.SendAsync(Send("once", "producer-a", 1, "one", "two"), default);
        // A new request object, as a retry over a new connection parses it anew.
        var again = await service.SendAsync(Send("once", "producer-a", 1, "one", "two"), default);

        Assert.Equal(2, first.SequenceNumbers.Count);
        Assert.Equal(first.SequenceNumbers, again.SequenceNumbers);
        Assert.Equal(2, queue.GetCounts().Active);
    }

    [Fact]
    public async Task ARepeat_ThatComesWhileTheFirstCommits_WaitsForIt_AndStoresNothing()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("in-flight");
        var service = new MessagingService(farm.Node);

        // Both in one go: the second finds the first's commit still running.
        var first = service.SendAsync(Send("in-flight", "producer-a", 7, "one"), default);
        var again = service.SendAsync(Send("in-flight", "producer-a", 7, "one"), default);

        Assert.Equal((await first).SequenceNumbers, (await again).SequenceNumbers);
        Assert.Equal(1, queue.GetCounts().Active);
    }

    [Fact]
    public async Task AnotherSendId_AnotherProducer_OrNoProducer_EachStore()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("each");
        var service = new MessagingService(farm.Node);

        var sequences = new List<long>();
        foreach (var request in new[]
        {
            Send("each", "producer-a", 1, "one"),
            Send("each", "producer-a", 2, "one"),
            Send("each", "producer-b", 1, "one"),
            Send("each", "", 0, "one"),
            Send("each", "", 0, "one"),
        })
        {
            sequences.AddRange((await service.SendAsync(request, default)).SequenceNumbers);
        }

        Assert.Equal(5, sequences.Distinct().Count());
        Assert.Equal(5, queue.GetCounts().Active);
    }

    [Fact]
    public async Task AFirstTryThatFailed_IsNotRemembered_ItsRepeatStores()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var service = new MessagingService(farm.Node);

        var missing = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(Send("later", "producer-a", 1, "one"), default));
        Assert.Equal(FarmErrorCode.MessagingEntityNotFound, missing.Code);
        var queue = await farm.CreateQueueAsync("later");
        var stored = await service.SendAsync(Send("later", "producer-a", 1, "one"), default);

        Assert.Single(stored.SequenceNumbers);
        Assert.Equal(1, queue.GetCounts().Active);
        Assert.Equal(1, farm.Node.RecentSends.Count);
    }

    [Fact]
    public async Task ARepeatPastTheRetention_StoresAgain()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("late");
        var service = new MessagingService(farm.Node);

        var first = await service.SendAsync(Send("late", "producer-a", 1, "one"), default);
        farm.Time.Advance(RecentSends.Retention);
        var late = await service.SendAsync(Send("late", "producer-a", 1, "one"), default);

        Assert.NotEqual(first.SequenceNumbers, late.SequenceNumbers);
        Assert.Equal(2, queue.GetCounts().Active);
    }

    /// <summary>The first node's answer was lost with it: a new node (as after a failover) serves the container.</summary>
    [Fact]
    public async Task ARepeatThatReachesANewOwner_IsAnsweredFromTheContainersRecord_AndStoredOnce()
    {
        await using var farm = await BrokerHarness.StartAsync();
        await farm.CreateQueueAsync("moved");
        var first = await new MessagingService(farm.Node).SendAsync(Send("moved", "producer-a", 1, "one", "two"), default);

        await farm.RestartAsync(crash: true);
        var service = new MessagingService(farm.Node);
        var again = await service.SendAsync(Repeat(Send("moved", "producer-a", 1, "one", "two")), default);
        var next = await service.SendAsync(Repeat(Send("moved", "producer-a", 2, "three")), default);

        Assert.Equal(first.SequenceNumbers, again.SequenceNumbers);
        // A repeat of a send that was never stored (no record) stores.
        Assert.True(Assert.Single(next.SequenceNumbers) > first.SequenceNumbers.Max());
        Assert.Equal(3, (await farm.QueueAsync("moved")).GetCounts().Active);
    }

    [Fact]
    public async Task ARepeatOfATopicSend_ThatReachesANewOwner_IsNotFannedOutAgain()
    {
        await using var farm = await BrokerHarness.StartAsync();
        await farm.CreateTopicAsync("moved-topic");
        await farm.CreateSubscriptionAsync("moved-topic", "all");
        var first = await new MessagingService(farm.Node).SendAsync(Send("moved-topic", "producer-a", 1, "one"), default);

        await farm.RestartAsync(crash: true);
        var again = await new MessagingService(farm.Node).SendAsync(Repeat(Send("moved-topic", "producer-a", 1, "one")), default);

        Assert.Equal(first.SequenceNumbers, again.SequenceNumbers);
        Assert.Equal(1, (await farm.SubscriptionAsync("moved-topic", "all")).GetCounts().Active);
    }

    [Fact]
    public async Task ARepeatThatReachesANewOwner_PastTheRetention_StoresAgain()
    {
        await using var farm = await BrokerHarness.StartAsync();
        await farm.CreateQueueAsync("moved-late");
        var first = await new MessagingService(farm.Node).SendAsync(Send("moved-late", "producer-a", 1, "one"), default);

        await farm.RestartAsync(crash: true);
        farm.Time.Advance(RecentSends.Retention + TimeSpan.FromSeconds(1));
        var late = await new MessagingService(farm.Node).SendAsync(Repeat(Send("moved-late", "producer-a", 1, "one")), default);

        Assert.NotEqual(first.SequenceNumbers, late.SequenceNumbers);
        Assert.Equal(2, (await farm.QueueAsync("moved-late")).GetCounts().Active);
    }

    [Fact]
    public async Task TheMemory_KeepsAtMostItsCapacity_ForgettingTheOldestFirst()
    {
        var time = TestClock.Create();
        var sends = new RecentSends(time);
        var stored = 0;
        Task<SendResponse> Store(long sendId) => sends.SendOnceAsync(
            new SendRequest { Entity = "q", ProducerId = "p", SendId = sendId },
            () =>
            {
                stored++;
                return Task.FromResult(new SendResponse { SequenceNumbers = { sendId } });
            });

        for (var id = 1; id <= RecentSends.Capacity + 10; id++)
        {
            await Store(id);
        }
        Assert.Equal(RecentSends.Capacity, sends.Count);

        await Store(RecentSends.Capacity + 10); // kept: answered, not stored
        Assert.Equal(RecentSends.Capacity + 10, stored);
        await Store(1); // forgotten: stored again
        Assert.Equal(RecentSends.Capacity + 11, stored);
    }

    [Theory]
    [InlineData(new long[] { 7, 8, 9 }, false)]
    [InlineData(new long[] { 5, 0, 9 }, true)] // the middle one a duplicate: not a run
    [InlineData(new long[] { 0 }, false)]
    [InlineData(new long[] { 12, 11 }, true)]
    public async Task ARepeatAfterTheFirstTryAnswered_GetsItsAnswer_NumberForNumber(long[] numbers, bool completed)
    {
        var sends = new RecentSends(TestClock.Create());
        var stored = 0;
        Task<SendResponse> Store() => sends.SendOnceAsync(
            new SendRequest { Entity = "q", ProducerId = "p", SendId = 1 },
            () =>
            {
                stored++;
                return Task.FromResult(new SendResponse { SequenceNumbers = { numbers }, Completed = completed });
            });

        await Store();
        var repeat = await Store();

        Assert.Equal(1, stored);
        Assert.Equal(numbers, repeat.SequenceNumbers);
        Assert.Equal(completed, repeat.Completed);
    }
}
