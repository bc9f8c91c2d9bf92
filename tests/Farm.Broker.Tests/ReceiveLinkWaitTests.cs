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
}
