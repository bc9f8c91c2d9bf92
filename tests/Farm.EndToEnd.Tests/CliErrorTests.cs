using System.Net;
using System.Net.Sockets;

namespace Farm.EndToEnd.Tests;

/// <summary>Bad input gets one readable line on stderr and a documented exit code, never a stack trace.</summary>
[Collection(FarmCollection.Name)]
public sealed class CliErrorTests
{
    private const int BadInput = 2;
    private const int NotFound = 3;
    private const int Unreachable = 4;

    [Theory]
    [InlineData("status")]
    [InlineData("queue", "list")]
    public async Task BadConnectionString_ExitsWith2_AndOneLine(params string[] command)
    {
        var result = await LocalFarm.RunCliAsync([.. command, "--connection", "not-a-connection-string"]);

        AssertOneLineError(result, BadInput);
        Assert.Contains("connection string", result.Stderr, StringComparison.OrdinalIgnoreCase);
    }

    [Fact]
    public async Task UnreachableFarm_ExitsWith4_Quickly()
    {
        var connection = $"Endpoint=http://127.0.0.1:{ClosedPort()}";

        var status = await LocalFarm.RunCliAsync(["status", "--connection", connection]);
        var list = await LocalFarm.RunCliAsync(["queue", "list", "--connection", connection]);

        AssertOneLineError(status, Unreachable);
        AssertOneLineError(list, Unreachable);

        // Retries with backoff are fine; hanging is not.
        Assert.True(status.Elapsed < TimeSpan.FromSeconds(30), status.ToString());
        Assert.True(list.Elapsed < TimeSpan.FromSeconds(30), list.ToString());
    }

    [Fact]
    public async Task NoFarm_ExitsWith4_AndSaysHowToStartOne()
    {
        await using var farm = LocalFarm.Create();

        var result = await farm.RunAsync("status");

        AssertOneLineError(result, Unreachable);
        Assert.Contains("No farm found", result.Stderr, StringComparison.Ordinal);
        Assert.Contains("./farm up --detach", result.Stderr, StringComparison.Ordinal);
    }

    [Fact]
    public async Task UnknownQueue_And_InvalidName_AgainstARunningFarm()
    {
        await using var farm = await LocalFarm.StartAsync();

        var unknown = await farm.RunAsync("queue", "show", "no-such-queue");
        AssertOneLineError(unknown, NotFound);
        Assert.Contains("no-such-queue", unknown.Stderr, StringComparison.Ordinal);

        var invalid = await farm.RunAsync("queue", "create", "bad name!");
        AssertOneLineError(invalid, BadInput);

        // The bad create changed nothing.
        var list = await farm.RunAsync("queue", "list");
        Assert.True(list.ExitCode == 0, list.ToString());
        Assert.DoesNotContain("bad name", list.Stdout, StringComparison.Ordinal);
    }

    [Fact]
    public async Task UnknownOption_ExitsWith2()
    {
        var result = await LocalFarm.RunCliAsync(["status", "--no-such-option"]);

        AssertOneLineError(result, BadInput);
    }

    [Fact]
    public async Task Up_OnAFarmDatabaseThatCannotBeOpened_FailsClearly_AndLeavesTheFileAlone()
    {
        await using var farm = LocalFarm.Create();
        var database = Path.Combine(farm.DataDirectory, "farm.db");
        await File.WriteAllTextAsync(database, "this is not a database");

        var result = await farm.RunAsync("up", "--detach", "--port", "0");

        Assert.NotEqual(0, result.ExitCode);
        Assert.Contains("not a SQLite database", result.Stderr, StringComparison.Ordinal);
        Assert.Contains(database, result.Stderr, StringComparison.Ordinal);
        Assert.DoesNotContain("   at ", result.Stderr, StringComparison.Ordinal);
        Assert.Equal("this is not a database", await File.ReadAllTextAsync(database));
        Assert.DoesNotContain(farm.NodePids(), LocalFarm.IsRunning);
    }

    internal static void AssertOneLineError(ProcessResult result, int exitCode)
    {
        Assert.True(result.ExitCode == exitCode, $"expected exit code {exitCode}: {result}");
        Assert.True(result.StderrLines.Count == 1, $"expected exactly one line on stderr: {result}");
        Assert.DoesNotContain("   at ", result.Stderr, StringComparison.Ordinal);
        Assert.DoesNotContain("Exception", result.Stderr, StringComparison.Ordinal);
    }

    private static int ClosedPort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        return port;
    }
}
