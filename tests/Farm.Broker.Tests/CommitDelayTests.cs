using Farm.Testing;

namespace Farm.Broker.Tests;

/// <summary>
/// BrokerOptions.CommitDelay: a small commit waits that long for more writes, and whatever came
/// meanwhile shares its transaction; none is acknowledged before it is durable. Off by default.
/// </summary>
public sealed class CommitDelayTests
{
    [Fact]
    public async Task WithACommitDelay_SendsThatComeWhileASmallCommitWaits_ShareItsCommit()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("delayed");
        Assert.True(farm.Node.TryGetContainer(1, out var host));
        farm.Options.CommitDelay = TimeSpan.FromMilliseconds(5);
        var before = host.Commits.CommitCount;

        // The first send's commit waits on the (fake) clock; the others come meanwhile.
        var sends = new List<Task<long[]>> { queue.SendAsync([BrokerHarness.Text("one", "m-1")]) };
        sends.Add(queue.SendAsync([BrokerHarness.Text("two", "m-2")]));
        sends.Add(queue.SendAsync([BrokerHarness.Text("three", "m-3")]));
        Assert.DoesNotContain(sends, s => s.IsCompleted);
        await Eventually.UntilAsync(() =>
        {
            farm.Time.Advance(TimeSpan.FromMilliseconds(5));
            return sends.All(s => s.IsCompleted);
        }, TimeSpan.FromSeconds(10), "the delayed commit");

        Assert.All(await Task.WhenAll(sends), sequence => Assert.True(Assert.Single(sequence) > 0));
        Assert.Equal(1, host.Commits.CommitCount - before);
        Assert.Equal(3, queue.GetCounts().Active);
    }

    [Fact]
    public async Task WithoutACommitDelay_ACommitDoesNotWaitForTheClock()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("at-once");

        // The fake clock never moves: only a commit that waits for nothing completes.
        var sequence = await queue.SendAsync([BrokerHarness.Text("one", "m-1")]).WaitAsync(TimeSpan.FromSeconds(10));

        Assert.True(Assert.Single(sequence) > 0);
    }
}
