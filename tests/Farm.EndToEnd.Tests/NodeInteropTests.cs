using System.Text.Json;
using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>A client that is not .NET speaks to the farm: grpc-js with the .proto files loaded at run time.</summary>
[Collection(FarmCollection.Name)]
public sealed class NodeInteropTests
{
    [NodeFact]
    public async Task NodeGrpcJsClient_SendsReceivesAndCompletes_AgainstARunningFarm()
    {
        var node = NodeFactAttribute.NodePath!;
        var client = Path.Combine(TestPaths.NodeClientDirectory, "client.js");
        Assert.True(
            Directory.Exists(Path.Combine(TestPaths.NodeClientDirectory, "node_modules", "@grpc", "grpc-js")),
            $"The Node.js packages are not installed: run 'npm ci' in {TestPaths.NodeClientDirectory} (./test.sh does).");

        await using var farm = await LocalFarm.StartAsync();
        var create = await farm.RunAsync("queue", "create", "interop");
        Assert.True(create.ExitCode == 0, $"farm queue create failed: {create}");

        var result = await ProcessRunner.RunAsync(node, [client, farm.Address, "interop", "5"], TimeSpan.FromSeconds(90), TestPaths.NodeClientDirectory);
        Assert.True(result.ExitCode == 0, $"node client.js failed: {result}");

        using var output = JsonDocument.Parse(result.Stdout);
        var root = output.RootElement;
        var sent = root.GetProperty("sent").EnumerateArray().Select(e => e.GetString()!).ToList();
        var received = root.GetProperty("received").EnumerateArray().ToList();
        Assert.Equal(5, sent.Count);
        Assert.Equal(5, root.GetProperty("sequence_numbers").GetArrayLength());
        Assert.Equal(sent.Order(StringComparer.Ordinal), received.Select(m => m.GetProperty("message_id").GetString()!).Order(StringComparer.Ordinal));
        Assert.All(received, m =>
        {
            Assert.True(m.GetProperty("locked").GetBoolean());
            Assert.Equal(1, m.GetProperty("delivery_count").GetInt32());
            Assert.Contains("\"from\":\"node\"", m.GetProperty("body").GetString(), StringComparison.Ordinal);
        });
        Assert.Equal(5, root.GetProperty("completed").GetInt32());
        Assert.Equal(0, root.GetProperty("settle_errors").GetArrayLength());

        // Completed through grpc-js means gone for everyone.
        await using var dotnetClient = new FarmClient(farm.ConnectionString);
        await using var receiver = dotnetClient.CreateReceiver("interop");
        Assert.Empty(await receiver.ReceiveMessagesAsync(10, TimeSpan.FromSeconds(1)));
        var counts = await farm.GetQueueCountsAsync("interop");
        Assert.Equal(0, counts.TotalMessageCount);
    }
}

/// <summary>A fact that is skipped, saying why, when Node.js is not installed (xunit 2 has no dynamic skip).</summary>
public sealed class NodeFactAttribute : FactAttribute
{
    public NodeFactAttribute()
    {
        if (NodePath is null)
        {
            Skip = "Node.js (node) is not on PATH; the grpc-js interop test needs it (./test.sh runs it where node is installed).";
        }
    }

    public static string? NodePath { get; } =
        (Environment.GetEnvironmentVariable("PATH") ?? string.Empty)
            .Split(Path.PathSeparator, StringSplitOptions.RemoveEmptyEntries)
            .Select(directory => Path.Combine(directory, "node"))
            .FirstOrDefault(File.Exists);
}
