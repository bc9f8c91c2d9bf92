using Farm.Contracts.V1;

namespace Farm.Client.Tests;

/// <summary>
/// A Settle call that failed with its outcome unknown goes again marked a repeat, so the broker
/// answers settlements the lost try did as done (not MessageLockLost); other calls go again as they were.
/// </summary>
public sealed class SettleRepeatTests
{
    [Fact]
    public async Task ASettleThatFailed_IsSentAgainAsARepeat_ASendIsNot()
    {
        // Nothing listens on port 1: every try fails as a broken connection does.
        using var connection = new FarmConnection(FarmConnectionString.Parse("Endpoint=http://127.0.0.1:1"),
            new FarmClientOptions { RetryOptions = new FarmRetryOptions { MaxRetries = 0, TryTimeout = TimeSpan.FromSeconds(5) } });
        var settle = new SettleRequest { Entity = "q", Settlements = { new Settlement { LockToken = Guid.NewGuid().ToString(), Disposition = Disposition.Complete } } };
        var send = new SendRequest { Entity = "q" };

        Assert.False(settle.Repeat);
        await Assert.ThrowsAsync<FarmException>(() => connection.UnaryAsync(FarmCalls.Settle, settle, "q", CancellationToken.None));
        await Assert.ThrowsAsync<FarmException>(() => connection.UnaryAsync(FarmCalls.Send, send, "q", CancellationToken.None));

        Assert.True(settle.Repeat);
        Assert.Equal(new SendRequest { Entity = "q" }, send);
    }
}
