using Farm.Broker.Node;
using Farm.Contracts.V1;
using Microsoft.Data.Sqlite;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>
/// Settlements racing receives, driven deterministically: the test holds the container file's write
/// lock (a second connection in BEGIN IMMEDIATE), so a settlement waits in the commit queue while the
/// test receives, then lets the commit go.
/// </summary>
public sealed class SettleCorrectnessTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    [Fact]
    public async Task AbandonWithModifiedProperties_KeepsTheMessageFromReceiversUntilItsUpdateCommits_SoNoDeliveryCountIsOverwritten()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await queue.SendAsync([Text("m")]);
        var first = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal(1, first.DeliveryCount);

        var writeLock = await ContainerWriteLock.HoldAsync(_farm.Node, 1);
        var abandon = new Settlement { LockToken = first.LockToken, Disposition = Disposition.Abandon };
        abandon.PropertiesToModify["reason"] = new PropertyValue { StringValue = "retry" };
        var settle = queue.SettleAsync(false, [abandon]);
        Assert.False(settle.IsCompleted);
        // While the abandon's update (delivery count 1) waits in the commit queue, a receive must not
        // take the message: its own update (count 2) could be written first and then overwritten.
        var during = queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default);
        Assert.True(during.IsCompleted, "the receive found nothing to take and did not queue a delivery");
        Assert.Empty(await during);
        await ContainerWriteLock.ReleaseAsync(writeLock);
        var result = Assert.Single(await settle);
        Assert.Equal(FarmErrorCode.Unspecified, result.ErrorCode);

        // Once the update is durable the message is back, modified, and the next delivery counts on from it.
        var second = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal(2, second.DeliveryCount);
        Assert.Equal("retry", second.Message.ApplicationProperties["reason"].StringValue);
        var stored = Assert.Single((await _farm.ReadContainerDirectlyAsync(1, queue.Id)).Messages);
        Assert.Equal(2, stored.DeliveryCount);

        await _farm.RestartAsync();
        var reloaded = await _farm.QueueAsync("q");
        var third = Assert.Single(await reloaded.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal(3, third.DeliveryCount);
        Assert.Equal("retry", third.Message.ApplicationProperties["reason"].StringValue);
    }
}
