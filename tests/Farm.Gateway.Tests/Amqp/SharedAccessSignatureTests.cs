using Farm.ContainerStore.FarmDatabase;
using Farm.Gateway.Amqp.Security;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Gateway.Tests.Amqp;

public sealed class SharedAccessSignatureTests
{
    private const string Key = "zjyda4dr7lRZZYrSeunLYe1olnTxRap7hC1eRPQPk/o=";

    [Fact]
    public void Token_MadeAsTheSdksMakeIt_ParsesAndIsSignedWithItsKey()
    {
        var expiry = DateTimeOffset.FromUnixTimeSeconds(1_900_000_000);
        var token = SharedAccessSignature.Create("RootManageSharedAccessKey", Key, "sb://127.0.0.1:5672/orders", expiry);

        Assert.True(SharedAccessSignature.TryParse(token, out var signature, out var error), error);
        Assert.Equal("RootManageSharedAccessKey", signature.KeyName);
        Assert.Equal("sb://127.0.0.1:5672/orders", signature.Audience);
        Assert.Equal(expiry, signature.ExpiresAt);
        Assert.True(signature.IsSignedWith(Key));
        Assert.False(signature.IsSignedWith("c29tZSBvdGhlciBrZXk="));
    }

    [Fact]
    public void Signature_IsHmacSha256OfTheEncodedAudienceAndExpiry_AsAzureComputesIt()
    {
        // Computed independently: printf 'sb%3A%2F%2Fhost%2Fq\n1700000000' | openssl dgst -sha256 -hmac 'key' -binary | base64
        Assert.Equal("QruN8p+uyE+EbzeD/1BRDaDTHWkpf2gY/qUQ0x9ndNg=", SharedAccessSignature.Sign("key", "sb%3A%2F%2Fhost%2Fq", 1_700_000_000));
    }

    [Fact]
    public void Token_WithATamperedExpiry_IsNotSignedWithTheKey()
    {
        var token = SharedAccessSignature.Create("p", Key, "sb://h/q", DateTimeOffset.FromUnixTimeSeconds(1_800_000_000));
        var tampered = token.Replace("se=1800000000", "se=1900000000", StringComparison.Ordinal);

        Assert.True(SharedAccessSignature.TryParse(tampered, out var signature, out _));
        Assert.False(signature.IsSignedWith(Key));
    }

    [Theory]
    [InlineData(null)]
    [InlineData("")]
    [InlineData("Bearer abc")]
    [InlineData("SharedAccessSignature sr=a&sig=b&se=1")]
    [InlineData("SharedAccessSignature sr=a&sig=b&se=soon&skn=p")]
    [InlineData("SharedAccessSignature sr=a&sig=b&novalue&skn=p&se=1")]
    public void MalformedToken_IsRefusedWithAReason(string? token)
    {
        Assert.False(SharedAccessSignature.TryParse(token, out var signature, out var error));
        Assert.Null(signature);
        Assert.False(string.IsNullOrWhiteSpace(error));
    }

    [Theory]
    [InlineData("sb://host:5672/", "")]
    [InlineData("sb://host/orders", "orders")]
    [InlineData("sb://host/events/Subscriptions/all/", "events/Subscriptions/all")]
    [InlineData("amqp://host/orders/$management", "orders/$management")]
    [InlineData("orders", "orders")]
    public void PathOf_TakesTheEntityPathOfAnAudience(string audience, string path) =>
        Assert.Equal(path, SharedAccessSignature.PathOf(audience));

    [Theory]
    [InlineData("", "orders", true)]
    [InlineData("orders", "orders", true)]
    [InlineData("orders", "ORDERS", true)]
    [InlineData("orders", "orders/$management", true)]
    [InlineData("orders", "orders/$DeadLetterQueue", true)]
    [InlineData("orders", "orders2", false)]
    [InlineData("orders/$management", "orders", false)]
    [InlineData("events/Subscriptions/a", "events/Subscriptions/b", false)]
    public void Covers_MatchesTheSamePathOrAParent(string audience, string entity, bool covers) =>
        Assert.Equal(covers, SharedAccessSignature.Covers(audience, entity));

    [Fact]
    public void Claims_AllowWhatTheRightsAllow_UntilTheTokenExpires()
    {
        var time = new FakeTimeProvider(DateTimeOffset.Parse("2026-11-25T10:00:00Z", System.Globalization.CultureInfo.InvariantCulture));
        var claims = new ConnectionClaims(time);
        claims.Grant("orders", AccessRights.Send, time.GetUtcNow().AddMinutes(1));

        Assert.NotNull(claims.ValidUntil("orders", AccessRights.Send));
        Assert.Null(claims.ValidUntil("orders", AccessRights.Listen));
        Assert.Null(claims.ValidUntil("invoices", AccessRights.Send));

        time.Advance(TimeSpan.FromMinutes(1));
        Assert.Null(claims.ValidUntil("orders", AccessRights.Send));
    }

    [Fact]
    public void Claims_ManageIncludesSendAndListen_AndALaterTokenReplacesTheEarlier()
    {
        var time = new FakeTimeProvider();
        var claims = new ConnectionClaims(time);
        claims.Grant("", AccessRights.Manage, time.GetUtcNow().AddMinutes(1));

        Assert.NotNull(claims.ValidUntil("orders", AccessRights.Listen));
        Assert.NotNull(claims.ValidUntil("orders/$management", AccessRights.Send));

        claims.Grant("", AccessRights.Listen, time.GetUtcNow().AddMinutes(5));
        Assert.Null(claims.ValidUntil("orders", AccessRights.Send));
        Assert.Equal(time.GetUtcNow().AddMinutes(5), claims.ValidUntil("orders", AccessRights.Listen));
    }
}
