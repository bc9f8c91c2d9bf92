using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>What the broker does with the contract's zero values and per-token answers (issue 8, path 17).</summary>
public sealed class ContractCorrectnessTests
{
    [Fact]
    public async Task ASettlementWithNoDisposition_IsRefused_AndTheMessageIsNotCompleted()
    {
        // Zero used to be COMPLETE: a client that forgot the field deleted messages it meant to keep.
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("keep me", "m-1")]);
        var received = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));

        var result = Assert.Single(await queue.SettleAsync(false, [new Settlement { LockToken = received.LockToken }]));

        Assert.Equal(FarmErrorCode.InvalidArgument, result.ErrorCode);
        Assert.Contains("no disposition", result.ErrorMessage);
        Assert.Equal(1, queue.GetCounts().Total);
        Assert.Equal(1, queue.GetCounts().Locked);
        Assert.Equal(FarmErrorCode.Unspecified,
            Assert.Single(await queue.SettleAsync(false, [new Settlement { LockToken = received.LockToken, Disposition = Disposition.Complete }])).ErrorCode);
    }

    [Fact]
    public async Task RenewLock_AnswersPerToken_SoOneBadTokenDoesNotHideTheRenewedOnes()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("a"), BrokerHarness.Text("b")]);
        var held = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 2, TimeSpan.Zero, default);
        farm.Time.Advance(TimeSpan.FromSeconds(10));

        var results = queue.RenewLocks(false, [held[0].LockToken, Guid.NewGuid().ToString(), held[1].LockToken]);

        Assert.Equal(3, results.Count);
        Assert.Equal(FarmErrorCode.Unspecified, results[0].ErrorCode);
        Assert.Equal(farm.Time.GetUtcNow() + TimeSpan.FromMinutes(1), results[0].LockedUntil.ToDateTimeOffset());
        Assert.Equal(FarmErrorCode.MessageLockLost, results[1].ErrorCode);
        Assert.Null(results[1].LockedUntil);
        Assert.Equal(FarmErrorCode.Unspecified, results[2].ErrorCode);
        Assert.Equal(farm.Time.GetUtcNow() + TimeSpan.FromMinutes(1), results[2].LockedUntil.ToDateTimeOffset());
    }
}
