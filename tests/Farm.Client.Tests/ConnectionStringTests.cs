namespace Farm.Client.Tests;

public class ConnectionStringTests
{
    [Fact]
    public void Parse_SingleEndpoint_KeepsAddressAndDefaults()
    {
        var parsed = FarmConnectionString.Parse("Endpoint=http://127.0.0.1:5480");

        Assert.Equal([new Uri("http://127.0.0.1:5480")], parsed.Endpoints);
        Assert.False(parsed.EnableRedirect);
        Assert.Null(parsed.OperationTimeout);
    }

    [Fact]
    public void Parse_AllKeys_CaseInsensitiveWithSpacesAndTrailingSemicolon()
    {
        var parsed = FarmConnectionString.Parse(" endpoint = http://a:1 , sb://b:2 ; ENABLEREDIRECT=True; operationtimeout=00:00:30;");

        Assert.Equal([new Uri("http://a:1"), new Uri("http://b:2")], parsed.Endpoints);
        Assert.True(parsed.EnableRedirect);
        Assert.Equal(TimeSpan.FromSeconds(30), parsed.OperationTimeout);
    }

    [Fact]
    public void Parse_SbScheme_IsAnAliasForHttp()
    {
        var parsed = FarmConnectionString.Parse("Endpoint=sb://farm.local:7000/");

        Assert.Equal("http", parsed.Endpoints[0].Scheme);
        Assert.Equal(7000, parsed.Endpoints[0].Port);
    }

    [Fact]
    public void Parse_EndpointWithoutPort_UsesDefaultPort()
    {
        var parsed = FarmConnectionString.Parse("Endpoint=sb://farm.local");

        Assert.Equal(FarmConnectionString.DefaultPort, parsed.Endpoints[0].Port);
    }

    [Fact]
    public void ToString_RoundTrips()
    {
        var parsed = FarmConnectionString.Parse("Endpoint=http://a:1,http://b:2;EnableRedirect=true;OperationTimeout=00:01:00");

        Assert.Equal(parsed.Endpoints, FarmConnectionString.Parse(parsed.ToString()).Endpoints);
        Assert.Equal("Endpoint=http://a:1,http://b:2;EnableRedirect=true;OperationTimeout=00:01:00", parsed.ToString());
    }

    [Theory]
    [InlineData("", "Endpoint is missing")]
    [InlineData("EnableRedirect=true", "Endpoint is missing")]
    [InlineData("Endpoint=", "Endpoint is missing")]
    [InlineData("Endpoint=http://a:1;EnableRedirect=maybe", "EnableRedirect must be true or false")]
    [InlineData("Endpoint=http://a:1;OperationTimeout=soon", "OperationTimeout")]
    [InlineData("Endpoint=http://a:1;OperationTimeout=-00:00:01", "OperationTimeout")]
    [InlineData("Endpoint=ftp://a:1", "must use http://")]
    [InlineData("Endpoint=http://a:1;Bogus=1", "Unknown connection string key 'Bogus'")]
    [InlineData("Endpoint=http://a:1;NoEquals", "Key=Value")]
    [InlineData("Endpoint=http://:1", "not a valid address")]
    public void Parse_Invalid_ThrowsFormatExceptionNamingTheProblem(string connectionString, string expected)
    {
        var error = Assert.Throws<FormatException>(() => FarmConnectionString.Parse(connectionString));

        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void TryParse_Invalid_ReturnsFalse()
    {
        Assert.False(FarmConnectionString.TryParse("nope", out var result));
        Assert.Null(result);
    }

    [Fact]
    public void FarmClient_BadConnectionString_ThrowsFormatException()
        => Assert.Throws<FormatException>(() => new FarmClient("Endpoint=http://a:1;EnableRedirect=yes"));
}
