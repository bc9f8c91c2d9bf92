using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// `farm up --config` and `farm config apply` with docs/emulator-config.sample.json (an Azure
/// Service Bus emulator Config.json) against a real farm: what the file names exists with its
/// properties and exactly its rules, a correlation rule from the file routes, and applying the
/// file again (on a running farm, and at the next `farm up`) changes nothing.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class EmulatorConfigTests
{
    private const int BadInput = 2;

    private static string Sample => Path.Combine(TestPaths.RepositoryRoot, "docs", "emulator-config.sample.json");

    [Fact]
    public async Task UpWithTheSampleConfig_CreatesItsEntitiesAndRules_WhichRoute_AndApplyingItAgainChangesNothing()
    {
        await using var farm = LocalFarm.Create();

        var up = await farm.RunAsync("up", "--detach", "--port", "0", "--config", Sample);

        Assert.True(up.ExitCode == 0, $"farm up --config failed: {up}");
        var connection = Assert.Single(up.Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries));
        Assert.StartsWith("Endpoint=http://", connection, StringComparison.Ordinal);
        Assert.Contains("config: applied, 9 created, 0 already there", up.Stderr, StringComparison.Ordinal);

        using var admin = new FarmAdministrationClient(connection);
        var before = await SnapshotAsync(admin);
        AssertAsTheSampleSays(before);
        await AssertTheCorrelationRuleRoutesAsync(connection);

        var apply = await LocalFarm.RunCliAsync(["config", "apply", Sample, "--connection", connection]);
        Assert.True(apply.ExitCode == 0, $"farm config apply failed: {apply}");
        Assert.Equal($"Applied {Sample}: 0 created, 11 already there.", apply.Stdout.Trim());
        Assert.Contains("config: queue 'orders' exists; left as it is", apply.StderrLines);
        Assert.Contains("config: rule 'vip' of subscription 'events/Subscriptions/large-orders' exists; left as it is", apply.StderrLines);
        Assert.Equal(before, await SnapshotAsync(admin));

        // As the emulator reads its file at each start: the same file at the next 'farm up'.
        await farm.DownAsync(kill: false);
        var again = await farm.RunAsync("up", "--detach", "--port", "0", "--config", Sample);
        Assert.True(again.ExitCode == 0, $"second farm up --config failed: {again}");
        Assert.Contains("config: applied, 0 created, 11 already there", again.Stderr, StringComparison.Ordinal);
        using var restarted = new FarmAdministrationClient(again.Stdout.Trim());
        Assert.Equal(before, await SnapshotAsync(restarted));
    }

    [Fact]
    public async Task UpWithAnInvalidConfig_ExitsWith2NamingTheJsonPath_AndStartsNothing()
    {
        await using var farm = LocalFarm.Create();
        var file = Path.Combine(farm.DataDirectory, "Config.json");
        await File.WriteAllTextAsync(file, """
            {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
              "Queues": [{"Name": "a"}, {"Name": "b"}, {"Name": "c", "Properties": {"LockDuration": "PT1X"}}], "Topics": []}]}}
            """);

        var up = await farm.RunAsync("up", "--detach", "--port", "0", "--config", file);

        CliErrorTests.AssertOneLineError(up, BadInput);
        Assert.Contains("UserConfig.Namespaces[0].Queues[2].Properties.LockDuration: 'PT1X' is not an ISO 8601 duration", up.Stderr, StringComparison.Ordinal);
        Assert.Empty(up.Stdout);
        Assert.Empty(farm.NodePids());
    }

    private static void AssertAsTheSampleSays(FarmSnapshot farm)
    {
        var orders = farm.Queues["orders"];
        Assert.Equal(
            (TimeSpan.FromSeconds(30), 5, TimeSpan.FromDays(1), true, true, TimeSpan.FromMinutes(10), null, "orders.poison"),
            (orders.LockDuration, orders.MaxDeliveryCount, orders.DefaultMessageTimeToLive, orders.DeadLetteringOnMessageExpiration,
             orders.RequiresDuplicateDetection, orders.DuplicateDetectionHistoryTimeWindow, orders.ForwardTo, orders.ForwardDeadLetteredMessagesTo));
        var poison = farm.Queues["orders.poison"];
        Assert.Equal((TimeSpan.FromDays(7), 1, ReceiverEntitySettings.DefaultLockDuration), (poison.DefaultMessageTimeToLive, poison.MaxDeliveryCount, poison.LockDuration));
        Assert.Equal(["events.archive", "orders", "orders.poison"], farm.Queues.Keys.Order(StringComparer.Ordinal));

        var events = Assert.Single(farm.Topics).Value;
        Assert.Equal((TimeSpan.FromHours(2), false, TimeSpan.FromMinutes(1)), (events.DefaultMessageTimeToLive, events.RequiresDuplicateDetection, events.DuplicateDetectionHistoryTimeWindow));
        Assert.Equal(["archive", "eu-orders", "everything", "large-orders"], farm.Subscriptions.Keys.Order(StringComparer.Ordinal));

        var eu = farm.Subscriptions["eu-orders"];
        Assert.Equal(
            (TimeSpan.FromSeconds(45), 4, TimeSpan.FromHours(1), false),
            (eu.Properties.LockDuration, eu.Properties.MaxDeliveryCount, eu.Properties.DefaultMessageTimeToLive, eu.Properties.DeadLetteringOnMessageExpiration));
        Assert.Equal(3, farm.Subscriptions["everything"].Properties.MaxDeliveryCount);
        Assert.Equal("events.archive", farm.Subscriptions["archive"].Properties.ForwardTo);

        // Exactly the rules the file names: $Default only where it lists none.
        Assert.Equal(["$Default: sql: 1=1 / -"], farm.Subscriptions["everything"].Rules);
        Assert.Equal(["$Default: sql: 1=1 / -"], farm.Subscriptions["archive"].Rules);
        Assert.Equal(["eu-order: correlation: sys.Subject = 'order' AND region = 'eu' / -"], eu.Rules);
        Assert.Equal(
            [
                "large: sql: quantity > 100 AND sys.Label = 'order' / SET priority = 'high'",
                "vip: correlation: sys.CorrelationId = 'vip' AND sys.ContentType = 'application/json' / -",
            ],
            farm.Subscriptions["large-orders"].Rules);
    }

    /// <summary>The file's eu-order rule (Label "order", region "eu") takes an EU order and leaves a US one, which the topic did accept.</summary>
    private static async Task AssertTheCorrelationRuleRoutesAsync(string connection)
    {
        await using var client = new FarmClient(connection);
        await using var sender = client.CreateSender("events");
        await sender.SendMessageAsync(new FarmMessage("us-order") { Subject = "order", ApplicationProperties = { ["region"] = "us" } });
        await sender.SendMessageAsync(new FarmMessage("eu-order") { Subject = "order", ApplicationProperties = { ["region"] = "eu" } });

        await using var everything = client.CreateReceiver("events", "everything");
        var all = new List<string>();
        while (all.Count < 2 && await everything.ReceiveMessageAsync(TimeSpan.FromSeconds(10)) is { } message)
        {
            all.Add(message.Body.ToString());
            await everything.CompleteMessageAsync(message);
        }

        Assert.Equal(["eu-order", "us-order"], all.Order(StringComparer.Ordinal));

        // A topic fans a message out before it acknowledges the send, so eu-orders already has all it will get.
        await using var eu = client.CreateReceiver("events", "eu-orders");
        var received = await eu.ReceiveMessageAsync(TimeSpan.FromSeconds(10));
        Assert.Equal("eu-order", received?.Body.ToString());
        await eu.CompleteMessageAsync(received!);
        Assert.Null(await eu.ReceiveMessageAsync(TimeSpan.FromSeconds(1)));
        using var admin = new FarmAdministrationClient(connection);
        Assert.Equal(0, (await admin.GetSubscriptionRuntimePropertiesAsync("events", "eu-orders")).TotalMessageCount);
    }

    private static async Task<FarmSnapshot> SnapshotAsync(FarmAdministrationClient admin)
    {
        var queues = (await admin.ListQueuesAsync()).ToDictionary(q => q.Name, StringComparer.Ordinal);
        var topics = (await admin.ListTopicsAsync()).ToDictionary(t => t.Name, StringComparer.Ordinal);
        var subscriptions = new Dictionary<string, SubscriptionSnapshot>(StringComparer.Ordinal);
        foreach (var subscription in await admin.ListSubscriptionsAsync("events"))
        {
            var rules = await admin.ListRulesAsync("events", subscription.SubscriptionName);
            subscriptions[subscription.SubscriptionName] = new SubscriptionSnapshot(
                subscription,
                [.. rules.OrderBy(r => r.Name, StringComparer.Ordinal).Select(r => $"{r.Name}: {Filter(r.Filter)} / {(r.Action as SqlRuleAction)?.SqlExpression ?? "-"}")]);
        }

        return new FarmSnapshot(queues, topics, subscriptions);
    }

    private static string Filter(RuleFilter filter) => filter switch
    {
        CorrelationRuleFilter correlation => "correlation: " + correlation,
        SqlRuleFilter sql => "sql: " + sql.SqlExpression,
        _ => filter.ToString() ?? string.Empty,
    };

    /// <summary>What the farm holds, compared by value: names, properties with their update times, rules.</summary>
    private sealed record FarmSnapshot(
        IReadOnlyDictionary<string, QueueProperties> Queues,
        IReadOnlyDictionary<string, TopicProperties> Topics,
        IReadOnlyDictionary<string, SubscriptionSnapshot> Subscriptions)
    {
        public bool Equals(FarmSnapshot? other) =>
            other is not null
            && Describe(this).SequenceEqual(Describe(other), StringComparer.Ordinal);

        public override int GetHashCode() => Queues.Count;

        private static IEnumerable<string> Describe(FarmSnapshot farm) =>
            farm.Queues.Values.OrderBy(q => q.Name, StringComparer.Ordinal).Select(q =>
                    $"queue {q.Name} {q.LockDuration} {q.MaxDeliveryCount} {q.DefaultMessageTimeToLive} {q.ForwardTo} {q.ForwardDeadLetteredMessagesTo} {q.CreatedAt:O} {q.UpdatedAt:O}")
                .Concat(farm.Topics.Values.OrderBy(t => t.Name, StringComparer.Ordinal).Select(t => $"topic {t.Name} {t.DefaultMessageTimeToLive} {t.CreatedAt:O} {t.UpdatedAt:O}"))
                .Concat(farm.Subscriptions.OrderBy(s => s.Key, StringComparer.Ordinal).Select(s =>
                    $"subscription {s.Key} {s.Value.Properties.LockDuration} {s.Value.Properties.MaxDeliveryCount} {s.Value.Properties.ForwardTo} {s.Value.Properties.CreatedAt:O} {s.Value.Properties.UpdatedAt:O} [{string.Join("; ", s.Value.Rules)}]"));

        public override string ToString() => string.Join(Environment.NewLine, Describe(this));
    }

    private sealed record SubscriptionSnapshot(SubscriptionProperties Properties, IReadOnlyList<string> Rules);
}
