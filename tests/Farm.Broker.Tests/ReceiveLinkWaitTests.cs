using Farm.Testing;
using Farm.Broker.Entities;
using Farm.Broker.Messaging;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// A receive link waiting for messages on an empty entity: a drain is answered at once and the
/// link waits again with the credit that follows; the call's end ends a waiting link at once and
/// takes nothing; a message that arrives while it waits is delivered, and so is one whose lock ran
/// out: the link waits without a timer of its own, so the sweep that frees the message must wake it.
/// </summary>
public sealed class ReceiveLinkWaitTests : IAsyncLifetime
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static ReceiveOpen Open(string queue, int credit) => new() { Entity = queue, Mode = ReceiveMode.PeekLock, Credit = credit };

    [Fact]
    public async Task AWaitingLink_AnswersADrainAtOnce_ThenWaitsWithTheNewCredit_AndDeliversWhatArrives()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), Open("q", credit: 5));
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 5, Patience, "the link to wait with its 5 credits");

        stream.Send(new ReceiveRequest { Drain = new ReceiveDrain() });
        var drained = await stream.NextAsync();
        Assert.True(drained.Drained);
        Assert.Empty(drained.Messages);
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 0, Patience, "the drained link to stop waiting");

        stream.Send(new ReceiveRequest { Credit = 2 });
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 2, Patience, "the link to wait again with its new credit");
        await queue.SendAsync([BrokerHarness.Text("after the drain")]);

        var delivered = await stream.NextAsync();
        Assert.Equal("after the drain", Assert.Single(delivered.Messages).Message.Body.ToStringUtf8());
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 1, Patience, "the link to wait with the credit left");
        Assert.False(stream.Running.IsCompleted);
    }

    [Fact]
    public async Task AWaitingLink_IsWokenByTheSweep_WhenALockRunsOut_AndDeliversTheMessageAgain()
    {
        var queue = await _farm.CreateQueueAsync("q", new QueueSettings { LockDuration = TimeSpan.FromSeconds(10) });
        await queue.SendAsync([BrokerHarness.Text("locked elsewhere")]);
        using var deadline = new CancellationTokenSource(Patience);
        var first = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, deadline.Token));
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), Open("q", credit: 1));
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 1, Patience, "the link to wait");

        var next = stream.NextAsync();
        // At most 15 s of sweeps: the lock's 10 s and a few passes, well short of any fallback wake-up a link might have.
        await _farm.SweepUntilAsync(() => next.IsCompleted, "the message whose lock ran out to reach the waiting link", maxSweeps: 60);

        var again = Assert.Single((await next).Messages);
        Assert.Equal(first.Message.Body, again.Message.Body);
        Assert.Equal(2, again.DeliveryCount);
    }

    [Fact]
    public async Task AWaitingLink_EndsAtOnce_WhenItsCallEnds()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), Open("q", credit: 3));
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 3, Patience, "the link to wait");

        await stream.CancelAsync();

        // Ended by the cancellation, not still waiting (a TimeoutException would fail this).
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => stream.Running.WaitAsync(Patience));
        Assert.Equal(0, queue.WaitingPeekLockCredit);

        // Nothing was taken by the ended link: a message sent now stays available.
        await queue.SendAsync([BrokerHarness.Text("nobody waits")]);
        Assert.Equal(1, queue.GetCounts().Active);
    }

    [Fact]
    public async Task AWaitingLink_KeepsOneWaiter_HoweverManyMessagesWokeIt()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), Open("q", credit: 1));
        for (var i = 0; i < 20; i++)
        {
            await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit == 1, Patience, $"the link to wait before message {i}");
            Assert.Equal(1, queue.ReceiveWaiters);
            await queue.SendAsync([BrokerHarness.Text($"message {i}")]);
            var delivered = Assert.Single((await stream.NextAsync()).Messages);
            Assert.Equal($"message {i}", delivered.Message.Body.ToStringUtf8());
            stream.Send(new ReceiveRequest { Credit = 1 });
        }

        await stream.CancelAsync();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => stream.Running.WaitAsync(Patience));
        Assert.Equal(0, queue.ReceiveWaiters);
        Assert.Equal(0, queue.WaitingPeekLockCredit);
    }

    [Fact]
    public async Task AWaitThatRunsItsTime_IsEndedByTheSweep_NotBefore_AndLeavesNothingRegistered()
    {
        var queue = await _farm.CreateQueueAsync("q");
        var waiter = new ReceiveWaiter();

        Assert.Empty(await queue.TakeOrArm(false, ReceiveMode.PeekLock, 5, waiter, TimeSpan.FromSeconds(30)));
        var wait = waiter.WaitAsync().AsTask();
        Assert.Equal(5, queue.WaitingPeekLockCredit);
        Assert.Equal(1, queue.ReceiveWaiters);

        // 29 s of sweeps: more than enough for every entity to be swept in full, but the wait has time left.
        for (var swept = TimeSpan.Zero; swept < TimeSpan.FromSeconds(29); swept += _farm.Options.SweepInterval)
        {
            _farm.Time.Advance(_farm.Options.SweepInterval);
        }
        Assert.False(wait.IsCompleted);

        await _farm.SweepUntilAsync(() => wait.IsCompleted, "the sweep to end the wait past its 30 s", maxSweeps: 20);
        await wait;
        queue.EndWait(false, waiter);
        Assert.Equal(0, queue.WaitingPeekLockCredit);
        Assert.Equal(0, queue.ReceiveWaiters);
    }

    [Fact]
    public async Task AnArrivalWakesAnArmedWaiter_AndALookThatTakesMessages_LeavesItUnregistered()
    {
        var queue = await _farm.CreateQueueAsync("q");
        var waiter = new ReceiveWaiter();

        Assert.Empty(await queue.TakeOrArm(false, ReceiveMode.PeekLock, 5, waiter, TimeSpan.FromSeconds(30)));
        var wait = waiter.WaitAsync().AsTask();
        await queue.SendAsync([BrokerHarness.Text("wake up")]);
        await wait.WaitAsync(Patience);
        Assert.Equal(0, queue.ReceiveWaiters); // the arrival took it off the list
        queue.EndWait(false, waiter);
        Assert.Equal(0, queue.WaitingPeekLockCredit);

        var taken = await queue.TakeOrArm(false, ReceiveMode.PeekLock, 5, waiter, TimeSpan.FromSeconds(30));
        Assert.Equal("wake up", Assert.Single(taken).Message.Body.ToStringUtf8());
        Assert.Equal(0, queue.ReceiveWaiters);
        Assert.Equal(0, queue.WaitingPeekLockCredit);

        // A wake with no wait armed is dropped: the next wait waits.
        waiter.Wake();
        Assert.Empty(await queue.TakeOrArm(false, ReceiveMode.PeekLock, 5, waiter, TimeSpan.FromSeconds(30)));
        Assert.False(waiter.WaitAsync().IsCompleted);
        queue.EndWait(false, waiter);
        Assert.Equal(0, queue.ReceiveWaiters);
    }
}
