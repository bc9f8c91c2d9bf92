using Farm.Broker.Entities;

namespace Farm.Broker.Tests;

public sealed class LockTokensTests
{
    private const long Now = 1_800_000_000_000;

    /// <summary>Never the same twice, even for one message locked again and again in the same second.</summary>
    [Fact]
    public void LockTokens_AreDistinct_EvenForOneMessageLockedInTheSameSecond()
    {
        var tokens = Enumerable.Range(0, 20_000).Select(i => LockTokens.New(sequenceNumber: 1 + i % 3, lockedUntilMs: Now + 60_000)).ToList();

        Assert.Equal(tokens.Count, tokens.Distinct().Count());
        // Parsed back from its text (as a client sends it), a token is itself.
        Assert.All(tokens.Take(100), t => Assert.Equal(t, Guid.Parse(t.ToString())));
    }

    [Fact]
    public void ALockToken_CarriesItsMessageAndWhenItsLockEnds_ToTheSecond()
    {
        var token = LockTokens.New(sequenceNumber: 123_456_789_012, lockedUntilMs: Now + 30_250);

        Assert.True(LockTokens.TryRead(Guid.Parse(token.ToString()), Now, out var sequence, out var lockedUntil));
        Assert.Equal(123_456_789_012, sequence);
        Assert.Equal(Now + 31_000, lockedUntil);
    }

    [Fact]
    public void ARandomToken_AnOlderNodesKind_IsAlmostNeverReadAsOne()
    {
        var read = Enumerable.Range(0, 100_000).Count(_ => LockTokens.TryRead(Guid.NewGuid(), Now, out long _, out var lockedUntil) && lockedUntil >= Now);

        Assert.True(read <= 1, $"{read} random tokens read as live locks");
    }
}
