using Farm.Broker.Entities;

namespace Farm.Broker.Tests;

/// <summary>The duplicate-detection history's memory bound, without a database.</summary>
public sealed class DuplicateHistoryTests
{
    private static readonly TimeSpan Window = TimeSpan.FromMinutes(10);

    [Fact]
    public void TheFilter_NeverForgetsAnId_AndRarelyClaimsOneItNeverSaw()
    {
        var filter = new IdFilter(10_000);
        for (var i = 0; i < 10_000; i++)
        {
            filter.Add($"added-{i}", 1);
        }

        Assert.All(Enumerable.Range(0, 10_000), i => Assert.True(filter.MightContain($"added-{i}")));
        var wrong = Enumerable.Range(0, 100_000).Count(i => filter.MightContain($"other-{i}"));
        Assert.InRange(wrong, 0, 500);
        Assert.True(filter.SizeInBytes < 10_000 * 2, $"{filter.SizeInBytes} bytes for 10,000 ids");
    }

    [Fact]
    public void Prune_MovesTheOldestIdsPastTheBudgetIntoTheFilters_ButNotOnesStillInFlight()
    {
        var history = new DuplicateHistory(4, NothingStored);
        var lookup = new DuplicateLookup();
        for (var i = 0; i < 10; i++)
        {
            Assert.True(history.TryRemember(1, $"id-{i}", now: i, Window, lookup, out _));
        }

        // id-0 is still being committed: nothing after it leaves memory either (oldest first).
        history.Prune(now: 100, inFlight: id => id == "id-0");
        Assert.Equal(10, history.InMemoryCount);

        history.Prune(now: 100, inFlight: _ => false);
        Assert.Equal(4, history.InMemoryCount);
        Assert.Equal(6, history.FilteredCount);
    }

    [Fact]
    public void Prune_KeepsIdsRememberedAfterALookupBegan_UntilItEnds()
    {
        var history = new DuplicateHistory(2, NothingStored);
        var sender = new DuplicateLookup();
        for (var i = 0; i < 4; i++)
        {
            history.TryRemember(1, $"old-{i}", now: 0, Window, sender, out _);
        }
        history.Prune(now: 1, inFlight: _ => false);
        // A second send asks the database about an old id; meanwhile others remember new ones.
        var asking = new DuplicateLookup();
        Assert.NotNull(history.StartLookup([BrokerHarness.Text("x", "old-0")], now: 1, asking));
        for (var i = 0; i < 4; i++)
        {
            history.TryRemember(1, $"new-{i}", now: 2, Window, sender, out _);
        }

        history.Prune(now: 3, inFlight: _ => false);
        Assert.Equal(4, history.InMemoryCount);

        history.EndLookup(asking);
        history.Prune(now: 3, inFlight: _ => false);
        Assert.Equal(2, history.InMemoryCount);
    }

    /// <summary>A database that holds none of the ids it is asked about.</summary>
    private static Task<IReadOnlyCollection<string>> NothingStored(IReadOnlyCollection<string> ids, long now) => Task.FromResult<IReadOnlyCollection<string>>([]);
}
