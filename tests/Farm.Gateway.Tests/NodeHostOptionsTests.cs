using System.Diagnostics;
using Farm.Gateway.Hosting;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.Primitives;

namespace Farm.Gateway.Tests;

/// <summary>
/// The node's command line: load-shedding and crash-watch options in milliseconds, 0 to turn them
/// off, a clear error otherwise; --help names every option the node reads, and starts nothing.
/// </summary>
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

    [Fact]
    public void TheHelp_NamesEveryOptionTheNodeReads()
    {
        var read = new RecordingConfiguration();
        NodeHostOptions.Parse(read);

        Assert.Contains("node-id", read.Keys);
        Assert.All(read.Keys, key => Assert.Contains($"--{key} ", NodeHostOptions.Usage, StringComparison.Ordinal));
    }

    [Fact]
    public async Task Help_PrintsTheOptionsAndExits_WithoutStartingANodeOrMakingItsDataDirectory()
    {
        var workingDirectory = Directory.CreateTempSubdirectory("farm-node-help-").FullName;
        try
        {
            var start = new ProcessStartInfo("dotnet")
            {
                WorkingDirectory = workingDirectory,
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            };
            start.ArgumentList.Add(typeof(NodeHostOptions).Assembly.Location);
            start.ArgumentList.Add("--help");
            using var node = Process.Start(start)!;
            var output = node.StandardOutput.ReadToEndAsync();
            var errors = node.StandardError.ReadToEndAsync();
            using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(60));
            await node.WaitForExitAsync(deadline.Token);

            Assert.Equal(0, node.ExitCode);
            Assert.Equal(NodeHostOptions.Usage.Trim(), (await output).Trim());
            Assert.Equal("", await errors);
            Assert.Empty(Directory.EnumerateFileSystemEntries(workingDirectory));
        }
        finally
        {
            Directory.Delete(workingDirectory, recursive: true);
        }
    }

    /// <summary>A configuration with nothing set that notes every key asked for.</summary>
    private sealed class RecordingConfiguration : IConfiguration
    {
        public HashSet<string> Keys { get; } = [];

        public string? this[string key]
        {
            get
            {
                Keys.Add(key);
                return null;
            }
            set => throw new NotSupportedException();
        }

        public IEnumerable<IConfigurationSection> GetChildren() => [];

        public IChangeToken GetReloadToken() => new CancellationChangeToken(CancellationToken.None);

        public IConfigurationSection GetSection(string key) => throw new NotSupportedException();
    }
}
