using System.Globalization;
using System.Text;
using System.Text.Json;
using System.Text.Json.Nodes;
using System.Text.RegularExpressions;
using Farm.Client;
using Farm.Testing;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The unchanged Azure Service Bus JavaScript SDK (@azure/service-bus 7.9.5, tests/amqp-client)
/// against the farm's AMQP front door: its node:test suite, messages both ways between it and
/// Farm's own SDK, and a sender and receiver that carry on while the owner of their queue is
/// killed. Entities and policies are made with the `farm` command, as a user would.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed partial class AmqpSdkTests(ITestOutputHelper output)
{
    private static readonly TimeSpan ScriptTimeout = TimeSpan.FromMinutes(3);

    private static string ClientDirectory => Path.Combine(TestPaths.RepositoryRoot, "tests", "amqp-client");

    [NodeFact]
    public async Task JsSdkSuite_PassesAgainstTheFrontDoor()
    {
        await using var farm = await LocalFarm.StartAsync();
        var entities = new Dictionary<string, string>
        {
            ["send"] = "sdk-send", ["types"] = "sdk-types", ["subscribe"] = "sdk-subscribe", ["abandon"] = "sdk-abandon",
            ["deadLetter"] = "sdk-dead-letter", ["defer"] = "sdk-defer", ["peek"] = "sdk-peek", ["schedule"] = "sdk-schedule",
            ["secure"] = "sdk-secure", ["size"] = "sdk-size",
        };
        foreach (var queue in entities.Values)
        {
            await RunFarmAsync(farm, "queue", "create", queue);
        }
        entities["lock"] = "sdk-lock";
        await RunFarmAsync(farm, "queue", "create", "sdk-lock", "--lock-duration", "5s");
        entities["topic"] = "sdk-topic";
        entities["subscription"] = "sdk-sub";
        await RunFarmAsync(farm, "topic", "create", "sdk-topic");
        await RunFarmAsync(farm, "subscription", "create", "sdk-topic", "sdk-sub");
        await RunFarmAsync(farm, "auth", "policy", "create", "sdk-send-only", "--rights", "Send");
        await RunFarmAsync(farm, "auth", "policy", "create", "sdk-listen-only", "--rights", "Listen");

        var settings = await SettingsAsync(farm);
        settings["sendOnly"] = await AmqpConnectionStringAsync(farm, "--policy", "sdk-send-only");
        settings["listenOnly"] = await AmqpConnectionStringAsync(farm, "--policy", "sdk-listen-only");
        settings["entities"] = JsonSerializer.SerializeToNode(entities);

        var result = await RunNodeAsync(settings, "--test-reporter=spec", "suite.mjs");

        var summary = SuiteSummary(result.Stdout);
        output.WriteLine($"JS SDK suite: {FormatSummary(summary)} in {result.Elapsed.TotalSeconds:0.0} s{Environment.NewLine}{result.Stdout}");
        Assert.True(result.ExitCode == 0 && summary["fail"] == 0 && summary["todo"] == 0 && summary["pass"] > 0,
            $"The JS SDK suite failed ({FormatSummary(summary)}); node logs: {farm.DataDirectory}/logs{Environment.NewLine}{result}");
    }

    [NodeFact]
    public async Task JsSdkAndFarmSdk_ExchangeMessages_WithTheirProperties()
    {
        await using var farm = await LocalFarm.StartAsync();
        await RunFarmAsync(farm, "queue", "create", "interop");
        var settings = await SettingsAsync(farm);

        // JS → .NET. The JS SDK writes a string or a JSON value as its JSON text in UTF-8, a
        // Buffer as is; Farm keeps those bytes as the body.
        var sent = await RunNodeAsync(settings, "interop.mjs", "send-for-dotnet", "interop");
        Assert.True(sent.ExitCode == 0, $"interop.mjs send-for-dotnet failed: {sent}");
        await using var client = new FarmClient(farm.ConnectionString);
        await using (var receiver = client.CreateReceiver("interop"))
        {
            var fromJs = await ReceiveAsync(receiver, 4);
            var byId = fromJs.ToDictionary(m => m.MessageId!);
            Assert.Equal("\"hello from js\"", byId["js-string"].Body.ToString());
            Assert.Equal("{\"order\":12,\"lines\":[\"a\",\"b\"],\"paid\":true}", byId["js-object"].Body.ToString());
            Assert.Equal("42.5", byId["js-number"].Body.ToString());
            Assert.Equal(new byte[] { 0, 1, 2, 255 }, byId["js-buffer"].Body.ToArray());
            foreach (var message in fromJs)
            {
                Assert.Equal(("corr-js", "subject-js", "application/x-js", "to-js", "reply-js"),
                    (message.CorrelationId, message.Subject, message.ContentType, message.To, message.ReplyTo));
                Assert.Equal(TimeSpan.FromHours(1), message.TimeToLive);
                Assert.Equal(1, message.DeliveryCount);
                // rhea writes a positive whole number as uint (kept as a long), zero and negatives
                // as int, a fraction as double, a Date as a timestamp.
                var properties = message.ApplicationProperties;
                Assert.Equal("text", properties["s"]);
                Assert.Equal(7L, properties["i"]);
                Assert.Equal(0, properties["zero"]);
                Assert.Equal(-3, properties["neg"]);
                Assert.Equal(2.5, properties["d"]);
                Assert.Equal(true, properties["b"]);
                Assert.Equal(new DateTimeOffset(2026, 5, 4, 3, 2, 1, 250, TimeSpan.Zero), properties["when"]);
                Assert.Equal(1L << 40, properties["big"]);
                Assert.Equal(8, properties.Count);
                await receiver.CompleteMessageAsync(message);
            }
        }

        // .NET → JS.
        var when = new DateTimeOffset(2026, 5, 4, 3, 2, 1, 250, TimeSpan.Zero);
        var guid = Guid.Parse("0f8fad5b-d9cb-469f-a165-70867728950e");
        await using (var sender = client.CreateSender("interop"))
        {
            var text = new FarmMessage("hello from dotnet")
            {
                MessageId = "dotnet-text", CorrelationId = "corr-net", Subject = "subject-net", ContentType = "text/plain",
                To = "to-net", ReplyTo = "reply-net", TimeToLive = TimeSpan.FromHours(1),
            };
            text.ApplicationProperties["s"] = "text";
            text.ApplicationProperties["i"] = 42;
            text.ApplicationProperties["l"] = 1L << 40;
            text.ApplicationProperties["d"] = 2.5;
            text.ApplicationProperties["b"] = true;
            text.ApplicationProperties["t"] = when;
            text.ApplicationProperties["g"] = guid;
            text.ApplicationProperties["bytes"] = new byte[] { 1, 2, 3 };
            await sender.SendMessagesAsync([
                text,
                new FarmMessage("{\"from\":\"dotnet\",\"n\":1}") { MessageId = "dotnet-json", ContentType = "application/json" },
                new FarmMessage(new byte[] { 0, 1, 2, 255 }) { MessageId = "dotnet-bytes" },
            ]);
        }
        var received = await RunNodeAsync(settings, "interop.mjs", "receive-from-dotnet", "interop", "3");
        Assert.True(received.ExitCode == 0, $"interop.mjs receive-from-dotnet failed: {received}");
        var fromDotnet = JsonNode.Parse(received.Stdout)!["received"]!.AsArray().ToDictionary(m => (string)m!["messageId"]!, m => m!);
        Assert.Equal(["dotnet-bytes", "dotnet-json", "dotnet-text"], fromDotnet.Keys.Order(StringComparer.Ordinal));

        // The JS SDK JSON-parses every Data body it can: text that is not JSON stays a Buffer.
        var textMessage = fromDotnet["dotnet-text"];
        AssertTyped(textMessage["body"], "buffer", Convert.ToHexStringLower(Encoding.UTF8.GetBytes("hello from dotnet")));
        Assert.Equal("""{"type":"object","value":{"from":"dotnet","n":1}}""", fromDotnet["dotnet-json"]["body"]!.ToJsonString());
        AssertTyped(fromDotnet["dotnet-bytes"]["body"], "buffer", "000102ff");
        Assert.Equal(("corr-net", "subject-net", "text/plain", "to-net", "reply-net", 3_600_000),
            ((string?)textMessage["correlationId"], (string?)textMessage["subject"], (string?)textMessage["contentType"],
             (string?)textMessage["to"], (string?)textMessage["replyTo"], (int?)textMessage["timeToLive"]));
        Assert.Equal(0, (int)textMessage["deliveryCount"]!);
        var jsProperties = textMessage["applicationProperties"]!;
        AssertTyped(jsProperties["s"], "string", "text");
        Assert.Equal("""{"type":"number","value":42}""", jsProperties["i"]!.ToJsonString());
        Assert.Equal("""{"type":"number","value":1099511627776}""", jsProperties["l"]!.ToJsonString());
        Assert.Equal("""{"type":"number","value":2.5}""", jsProperties["d"]!.ToJsonString());
        Assert.Equal("""{"type":"boolean","value":true}""", jsProperties["b"]!.ToJsonString());
        Assert.Equal("""{"type":"date","iso":"2026-05-04T03:02:01.250Z"}""", jsProperties["t"]!.ToJsonString());
        // A uuid reaches JS as rhea gives it: its 16 bytes.
        Assert.Equal(JsonSerializer.Serialize(new { type = "buffer", hex = Convert.ToHexStringLower(guid.ToByteArray(bigEndian: true)) }), jsProperties["g"]!.ToJsonString());
        AssertTyped(jsProperties["bytes"], "buffer", "010203");

        Assert.Equal(0, (await farm.GetQueueCountsAsync("interop")).TotalMessageCount);
    }

    private static void AssertTyped(JsonNode? node, string type, string value)
    {
        Assert.NotNull(node);
        Assert.Equal(type, (string?)node["type"]);
        Assert.Equal(value, (string?)(node["value"] ?? node["hex"] ?? node["iso"]));
    }

    private static async Task<List<FarmReceivedMessage>> ReceiveAsync(FarmReceiver receiver, int count)
    {
        var messages = new List<FarmReceivedMessage>();
        await Eventually.UntilAsync(async () =>
        {
            messages.AddRange(await receiver.ReceiveMessagesAsync(count - messages.Count, TimeSpan.FromSeconds(1)));
            return messages.Count >= count;
        }, TimeSpan.FromSeconds(30), $"Farm's SDK received {count} messages");
        return messages;
    }

    /// <summary>
    /// Makes the farm's containers <paramref name="containersPerNode"/> per node and waits until
    /// every node owns that many; then creates <paramref name="queue"/> with `farm` and returns the
    /// node that owns its container.
    /// </summary>
    private static async Task<int> CreateQueueOnASpreadFarmAsync(LocalFarm farm, int nodes, int containersPerNode, string queue)
    {
        var containers = nodes * containersPerNode;
        await RunFarmAsync(farm, "container", "create", "--count", (containers - 1).ToString(CultureInfo.InvariantCulture));
        await Eventually.UntilAsync(async () =>
        {
            using var status = await farm.StatusJsonAsync();
            var owners = status.RootElement.GetProperty("containers").EnumerateArray()
                .Select(c => c.GetProperty("owner_node")).ToList();
            if (owners.Count != containers || owners.Any(o => o.ValueKind != JsonValueKind.Number))
            {
                return false;
            }
            var perNode = owners.GroupBy(o => o.GetInt32()).ToList();
            return perNode.Count == nodes && perNode.All(g => g.Count() == containersPerNode);
        }, TimeSpan.FromSeconds(60), $"each of the {nodes} nodes owns {containersPerNode} of the {containers} containers");

        await RunFarmAsync(farm, "queue", "create", queue);
        using var shown = JsonDocument.Parse(await RunFarmAsync(farm, "queue", "show", queue, "--json"));
        var container = shown.RootElement.GetProperty("container_id").GetInt64();
        using var status = await farm.StatusJsonAsync();
        return status.RootElement.GetProperty("containers").EnumerateArray()
            .Single(c => c.GetProperty("id").GetInt64() == container).GetProperty("owner_node").GetInt32();
    }

    /// <summary>`farm ARGS --data DIR`, asserting it succeeded; its stdout.</summary>
    private static async Task<string> RunFarmAsync(LocalFarm farm, params string[] arguments)
    {
        var result = await farm.RunAsync(arguments);
        Assert.True(result.ExitCode == 0, $"farm {string.Join(' ', arguments)} failed: {result}");
        return result.Stdout;
    }

    private static async Task<string> AmqpConnectionStringAsync(LocalFarm farm, params string[] arguments)
    {
        var connectionString = (await RunFarmAsync(farm, ["connection-string", "--amqp", .. arguments])).Trim();
        Assert.StartsWith("Endpoint=sb://", connectionString, StringComparison.Ordinal);
        return connectionString;
    }

    /// <summary>What every script reads from FARM_AMQP_TEST: the root policy's AMQP connection string and the `farm` command.</summary>
    private static async Task<JsonObject> SettingsAsync(LocalFarm farm) => new()
    {
        ["root"] = await AmqpConnectionStringAsync(farm),
        ["cli"] = new JsonArray("dotnet", TestPaths.FarmCliDll),
        ["data"] = farm.DataDirectory,
    };

    private static Task<ProcessResult> RunNodeAsync(JsonObject settings, params string[] arguments)
    {
        Assert.True(Directory.Exists(Path.Combine(ClientDirectory, "node_modules", "@azure", "service-bus")),
            $"The Node.js packages are not installed: run 'npm ci' in {ClientDirectory} (./test.sh does).");
        return ProcessRunner.RunAsync(NodeFactAttribute.NodePath!, arguments, ScriptTimeout, ClientDirectory,
            new Dictionary<string, string?> { ["FARM_AMQP_TEST"] = settings.ToJsonString(), ["NODE_OPTIONS"] = null });
    }

    /// <summary>The counts node:test's spec reporter ends with ("ℹ pass 14", "ℹ fail 2", ...).</summary>
    private static Dictionary<string, int> SuiteSummary(string stdout)
    {
        var summary = new Dictionary<string, int>(StringComparer.Ordinal) { ["pass"] = 0, ["fail"] = -1 };
        foreach (Match match in SummaryLine().Matches(stdout))
        {
            summary[match.Groups[1].Value] = int.Parse(match.Groups[2].Value, CultureInfo.InvariantCulture);
        }
        return summary;
    }

    private static string FormatSummary(Dictionary<string, int> summary) =>
        string.Join(", ", summary.Select(pair => $"{pair.Key} {pair.Value}"));

    [GeneratedRegex(@"^ℹ (tests|pass|fail|cancelled|skipped|todo) (\d+)$", RegexOptions.Multiline)]
    private static partial Regex SummaryLine();
}
