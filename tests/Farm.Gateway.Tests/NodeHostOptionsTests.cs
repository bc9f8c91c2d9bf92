using Farm.Gateway.Hosting;
using Microsoft.Extensions.Configuration;

namespace Farm.Gateway.Tests;

/// <summary>The node's load-shedding and crash-watch options on its command line: milliseconds, 0 to turn them off, a clear error otherwise.</summary>
public sealed class NodeHostOptionsTests
{
    private static NodeHostOptions Parse(params string[] args) => NodeHostOptions.Parse(new ConfigurationBuilder().AddCommandLine(args).Build());

    [Fact]
    public void ShedSendsAfter_IsASecondByDefault_TakesMilliseconds_AndZeroTurnsItOff()
    {
        Assert.Equal(TimeSpan.FromSeconds(1), Parse().Broker.ShedSendsAfter);
        Assert.Equal(TimeSpan.FromMilliseconds(250), Parse("--shed-sends-after-ms", "250").Broker.ShedSendsAfter);
        Assert.Equal(TimeSpan.Zero, Parse("--shed-sends-after-ms", "0").Broker.ShedSendsAfter);
    }

    [Fact]
    public void CrashProbe_Is100MsByDefault_TakesMilliseconds_AndZeroMeansNoWatch()
    {
        Assert.Equal(TimeSpan.FromMilliseconds(100), Parse().Node.CrashProbeInterval);
        Assert.Equal(TimeSpan.FromMilliseconds(500), Parse("--crash-probe-ms", "500").Node.CrashProbeInterval);
        Assert.Equal(TimeSpan.Zero, Parse("--crash-probe-ms", "0").Node.CrashProbeInterval);
    }

    [Theory]
    [InlineData("--shed-sends-after-ms", "-1")]
    [InlineData("--shed-sends-after-ms", "soon")]
    [InlineData("--shed-sends-after-ms", "600001")]
    [InlineData("--crash-probe-ms", "-5")]
    [InlineData("--crash-probe-ms", "often")]
    [InlineData("--crash-probe-ms", "60001")]
    public void AMillisecondsOption_OutOfRangeOrNotANumber_IsRefusedNamingTheOption(string option, string value)
    {
        var error = Assert.Throws<ArgumentException>(() => Parse(option, value));

        Assert.Contains(option, error.Message, StringComparison.Ordinal);
        Assert.Contains(value, error.Message, StringComparison.Ordinal);
    }
}
