using Farm.Broker.Entities;

namespace Farm.Broker.Tests;

public sealed class LockTokensTests
{
    /// <summary>Lock tokens are random version-4 GUIDs (as Guid.NewGuid's), never the same twice.</summary>
    [Fact]
    public void LockTokens_AreDistinctVersion4Guids()
    {
        var tokens = Enumerable.Range(0, 100_000).Select(_ => LockTokens.New()).ToList();

        Assert.Equal(tokens.Count, tokens.Distinct().Count());
        Assert.All(tokens, t => Assert.Equal(4, t.Version));
        Assert.All(tokens, t => Assert.Equal(0b10, t.Variant >> 2));
        // Parsed back from its text (as a client sends it), a token is itself.
        Assert.All(tokens.Take(100), t => Assert.Equal(t, Guid.Parse(t.ToString())));
    }
}
