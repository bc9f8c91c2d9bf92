using Farm.Gateway.Routing;

namespace Farm.Gateway.Tests;

/// <summary>What one send stream may have running at once: a count and a size, with one large send let through alone.</summary>
public sealed class SendStreamBudgetTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    [Fact]
    public async Task PastTheCount_TheNextSendWaits_UntilOneIsGivenBack()
    {
        var budget = new SendStreamBudget(maxSends: 2, maxBytes: 1_000);
        await budget.TakeAsync(10, CancellationToken.None);
        await budget.TakeAsync(10, CancellationToken.None);

        var third = budget.TakeAsync(10, CancellationToken.None);
        Assert.False(third.IsCompleted);
        budget.Give(10);
        await third.WaitAsync(Patience);
        Assert.Equal(2, budget.Sends);
    }

    [Fact]
    public async Task PastTheBytes_TheNextSendWaits_AndOneLargerThanAllGoesAlone()
    {
        var budget = new SendStreamBudget(maxSends: 100, maxBytes: 100);
        await budget.TakeAsync(60, CancellationToken.None);

        var second = budget.TakeAsync(50, CancellationToken.None);
        Assert.False(second.IsCompleted);
        budget.Give(60);
        await second.WaitAsync(Patience);

        // Larger than the whole budget: it waits for the stream to be empty, then runs alone.
        var large = budget.TakeAsync(500, CancellationToken.None);
        Assert.False(large.IsCompleted);
        budget.Give(50);
        await large.WaitAsync(Patience);
        Assert.Equal(1, budget.Sends);
    }

    [Fact]
    public async Task EmptyAsync_WaitsForEverySendToBeGivenBack()
    {
        var budget = new SendStreamBudget(maxSends: 10, maxBytes: 1_000);
        await budget.TakeAsync(1, CancellationToken.None);
        await budget.TakeAsync(1, CancellationToken.None);

        var empty = budget.EmptyAsync(CancellationToken.None);
        budget.Give(1);
        Assert.False(empty.IsCompleted);
        budget.Give(1);
        await empty.WaitAsync(Patience);
    }

    [Fact]
    public async Task AWaitingTake_EndsWhenTheStreamIsCancelled()
    {
        var budget = new SendStreamBudget(maxSends: 1, maxBytes: 1_000);
        await budget.TakeAsync(1, CancellationToken.None);
        using var cancel = new CancellationTokenSource();

        var waiting = budget.TakeAsync(1, cancel.Token);
        await cancel.CancelAsync();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting.WaitAsync(Patience));
    }
}
