using Farm.Broker.Messaging;
using Farm.Broker.Overload;
using Farm.Contracts;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// Load shedding: a node further behind its work than ShedSendsAfter refuses new sends with the
/// overload's SERVICE_BUSY, storing nothing, and serves receives meanwhile; once it catches up it
/// takes sends again. A real node on real SQLite files; the lag is set by the test (the sampler of
/// the real thread pool is proven on its own in <see cref="ThreadPoolLagTests"/>).
/// </summary>
public sealed class LoadSheddingTests
{
    private TimeSpan _lag;

    private Task<BrokerHarness> StartAsync(TimeSpan shedAfter) => BrokerHarness.StartAsync(farm =>
    {
        farm.Options.ShedSendsAfter = shedAfter;
        farm.Lag = () => _lag;
    });

    private static SendRequest Send(string entity, string body, string producer = "", long sendId = 0)
    {
        var request = new SendRequest { Entity = entity, ProducerId = producer, SendId = sendId };
        request.Messages.Add(BrokerHarness.Text(body));
        return request;
    }

    [Fact]
    public async Task ANodeBehindItsWork_RefusesSends_StoringNothing_ServesReceives_AndTakesSendsAgainOnceCaughtUp()
    {
        await using var farm = await StartAsync(TimeSpan.FromSeconds(1));
        var queue = await farm.CreateQueueAsync("orders");
        var service = new MessagingService(farm.Node);
        await service.SendAsync(Send("orders", "before"), default);

        _lag = TimeSpan.FromSeconds(2);
        var refused = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(Send("orders", "while behind"), default));
        // A send with a producer and send id too: refused before it is recorded, so its retry stores it.
        var refusedOnce = await Assert.ThrowsAsync<BrokerException>(() => service.SendAsync(Send("orders", "once", "producer-a", 1), default));

        Assert.Equal("SERVICE_BUSY", FarmErrorNames.Of(refused.Code));
        Assert.True(refused.Overloaded);
        Assert.True(refusedOnce.Overloaded);
        Assert.Contains("2000 ms behind its work", refused.Message, StringComparison.Ordinal);
        Assert.Contains("not stored", refused.Message, StringComparison.Ordinal);
        Assert.Equal(2, farm.Node.SendShedding.Shed);
        Assert.Equal(1, queue.GetCounts().Active);
        // Receives take work off the node: served while it is behind.
        var received = await service.ReceiveBatchAsync(new ReceiveBatchRequest { Entity = "orders", MaxMessages = 10, Mode = ReceiveMode.ReceiveAndDelete }, default);
        Assert.Equal("before", Assert.Single(received.Messages).Message.Body.ToStringUtf8());

        _lag = TimeSpan.FromMilliseconds(999);
        await service.SendAsync(Send("orders", "caught up"), default);
        var retried = await service.SendAsync(Send("orders", "once", "producer-a", 1), default);

        Assert.Single(retried.SequenceNumbers);
        Assert.Equal(2, queue.GetCounts().Active);
        Assert.Equal(2, farm.Node.SendShedding.Shed);
    }

    [Fact]
    public async Task WithSheddingOff_ANodeFarBehindItsWork_StillStoresSends()
    {
        await using var farm = await StartAsync(TimeSpan.Zero);
        var queue = await farm.CreateQueueAsync("orders");
        var service = new MessagingService(farm.Node);

        _lag = TimeSpan.FromMinutes(1);
        await service.SendAsync(Send("orders", "stored"), default);

        Assert.Equal(1, queue.GetCounts().Active);
        Assert.Equal(0, farm.Node.SendShedding.Shed);
    }

    /// <summary>A new receive link (the router asks before it serves or proxies one) is refused while behind, and taken once caught up.</summary>
    [Fact]
    public async Task ANewReceiveLink_IsRefusedWhileBehind_AndTakenOnceCaughtUp()
    {
        await using var farm = await StartAsync(TimeSpan.FromSeconds(1));
        var service = new MessagingService(farm.Node);

        _lag = TimeSpan.FromSeconds(3);
        var refused = Assert.Throws<BrokerException>(() => service.ShedReceiveLinkIfBehind("orders"));
        _lag = TimeSpan.Zero;
        service.ShedReceiveLinkIfBehind("orders");

        Assert.True(refused.Overloaded);
        Assert.Equal("SERVICE_BUSY", FarmErrorNames.Of(refused.Code));
        Assert.Contains("the receive link on 'orders' was not opened", refused.Message, StringComparison.Ordinal);
        Assert.Equal(1, farm.Node.SendShedding.ReceiveLinksShed);
        Assert.Equal(0, farm.Node.SendShedding.Shed);
    }

    /// <summary>A send the node would forward to its owner is refused the same way (the router calls this before forwarding).</summary>
    [Fact]
    public async Task ASendThisNodeWouldForward_IsRefusedTheSameWay_WhileBehind()
    {
        await using var farm = await StartAsync(TimeSpan.FromSeconds(1));
        var service = new MessagingService(farm.Node);

        service.ShedIfBehind("elsewhere");
        _lag = TimeSpan.FromSeconds(1);
        var refused = Assert.Throws<BrokerException>(() => service.ShedIfBehind("elsewhere"));

        Assert.True(refused.Overloaded);
        Assert.Contains("'elsewhere'", refused.Message, StringComparison.Ordinal);
        Assert.Equal(1, farm.Node.SendShedding.Shed);
    }
}

/// <summary>
/// The thread-pool lag sampler on the process's real pool: while every pool thread is blocked the
/// lag grows past a second; once the pool runs again it falls back. Blocks the pool: runs alone.
/// </summary>
[Collection(StarvedThreadPoolCollection.Name)]
public sealed class ThreadPoolLagTests
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(20);

    [Fact]
    public void WhileThePoolIsBlocked_TheLagGrowsPastASecond_AndFallsBackOnceItRunsAgain()
    {
        var lag = ThreadPoolLag.Shared;
        WaitUntil(() => lag.Current < TimeSpan.FromMilliseconds(250), "the pool is not behind before the test");

        // Every pool thread, and every one the pool adds meanwhile, blocks until released. Never
        // disposed: items still queued when the test ends wait on it (and return at once) after that.
        var release = new ManualResetEventSlim();
        for (var i = 0; i < 500; i++)
        {
            ThreadPool.UnsafeQueueUserWorkItem(static state => ((ManualResetEventSlim)state!).Wait(), release);
        }
        try
        {
            // Read from this thread: the sampler has its own, so it needs no pool thread to see the pool is stuck.
            WaitUntil(() => lag.Current > TimeSpan.FromSeconds(1), "the lag passes a second while the pool is blocked");
        }
        finally
        {
            release.Set();
        }

        WaitUntil(() => lag.Current < TimeSpan.FromMilliseconds(250), "the lag falls back once the pool runs again");
    }

    /// <summary>Polls on this thread (not the blocked pool) until the condition holds, failing past the deadline.</summary>
    private static void WaitUntil(Func<bool> condition, string what)
    {
        using var tick = new ManualResetEventSlim();
        var until = DateTime.UtcNow + Deadline;
        while (!condition())
        {
            Assert.True(DateTime.UtcNow < until, $"timed out waiting until {what}");
            tick.Wait(TimeSpan.FromMilliseconds(20));
        }
    }
}
