namespace Farm.Broker.Tests;

/// <summary>
/// A node's DisposeAsync may be called more than once: a host's shutdown and a test's cleanup both
/// do it, and a crashed node's stand-in is disposed after its successor. Every call after the first
/// returns at once, whether it comes later or at the same moment.
/// </summary>
public sealed class NodeDisposeTests
{
    [Fact]
    public async Task DisposingANodeAgain_OrTwiceAtOnce_IsHarmless()
    {
        await using var farm = await BrokerHarness.StartAsync();
        await farm.CreateQueueAsync("q");
        var first = farm.Node;

        await first.DisposeAsync();
        await first.DisposeAsync();

        // A crashed node (its loops stopped, its containers still open) disposed twice at once.
        await farm.RestartAsync(crash: false);
        await farm.RestartAsync(crash: true);
        var crashed = farm.Abandoned.Single();
        await Task.WhenAll(crashed.DisposeAsync().AsTask(), crashed.DisposeAsync().AsTask());
        await crashed.DisposeAsync();
    }
}
