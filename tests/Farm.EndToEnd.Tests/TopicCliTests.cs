using System.Text.Json.Nodes;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Topics, subscriptions and rules through the real `farm` command against a real one-node farm:
/// what each subscription receives is exactly what its rules select, and bad input gets one
/// readable line and its exit code.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class TopicCliTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private const int GeneralError = 1;
    private const int BadInput = 2;
    private const int NotFound = 3;

    private LocalFarm Farm => fixture.Farm;

    private static string NewName(string prefix) => prefix + "-" + Guid.NewGuid().ToString("N")[..10];

    [Fact]
    public async Task Topic_Create_Show_Update_List_Delete()
    {
        var topic = NewName("t");

        var created = await JsonAsync("topic", "create", topic, "--support-ordering", "true", "--max-size-mb", "512", "--json");
        Assert.Equal(topic, (string?)created["name"]);
        Assert.True((bool)created["support_ordering"]!);
        Assert.Equal(512, (long)created["max_size_in_megabytes"]!);
        Assert.Equal(0, (int)created["subscription_count"]!);

        // The issue's own example: ordering off on a live topic, the other properties unchanged.
        var updated = await OkAsync("topic", "update", topic, "--support-ordering", "false");
        Assert.Contains($"Updated topic '{topic}'", updated.Stdout, StringComparison.Ordinal);
        var shown = await JsonAsync("topic", "show", topic, "--json");
        Assert.False((bool)shown["support_ordering"]!);
        Assert.Equal(512, (long)shown["max_size_in_megabytes"]!);
        Assert.Null(shown["default_message_time_to_live_seconds"]);

        var table = await OkAsync("topic", "show", topic);
        Assert.Contains("support_ordering", table.Stdout, StringComparison.Ordinal);

        var list = await OkAsync("topic", "list");
        Assert.Contains(topic, list.Stdout, StringComparison.Ordinal);
        var listed = Assert.Single(await JsonArrayAsync("topic", "list", "--json"), t => (string?)t!["name"] == topic);
        Assert.False((bool)listed!["support_ordering"]!);

        await OkAsync("topic", "delete", topic);
        var gone = await Farm.RunAsync("topic", "show", topic);
        CliErrorTests.AssertOneLineError(gone, NotFound);
        Assert.Contains(topic, gone.Stderr, StringComparison.Ordinal);
        Assert.DoesNotContain(topic, (await OkAsync("topic", "list")).Stdout, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Subscriptions_WithSqlAndCorrelationFilters_ReceiveExactlyTheirMessages()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "all");
        await OkAsync("subscription", "create", topic, "red", "--sql-filter", "color = 'red'");
        await OkAsync("subscription", "create", topic, "order7", "--correlation-filter", "sys.CorrelationId=order-7");
        await OkAsync("subscription", "create", topic, "green", "--correlation-filter", "user.color=green", "--action", "SET picked = 'yes'");

        // A filter given on create is the subscription's first rule, named $Default.
        var all = await JsonAsync("subscription", "show", topic, "all", "--json");
        var allRule = Assert.Single(all["rules"]!.AsArray());
        Assert.Equal(("$Default", "true"), ((string?)allRule!["name"], (string?)allRule["filter"]!["type"]));
        var red = await JsonAsync("subscription", "show", topic, "red", "--json");
        Assert.Equal($"{topic}/Subscriptions/red", (string?)red["path"]);
        var redRule = Assert.Single(red["rules"]!.AsArray());
        Assert.Equal(("$Default", "sql", "color = 'red'"), ((string?)redRule!["name"], (string?)redRule["filter"]!["type"], (string?)redRule["filter"]!["expression"]));
        var order7Rule = Assert.Single((await JsonAsync("subscription", "show", topic, "order7", "--json"))["rules"]!.AsArray());
        Assert.Equal(("correlation", "order-7"), ((string?)order7Rule!["filter"]!["type"], (string?)order7Rule["filter"]!["correlation_id"]));

        await OkAsync("send", topic, "--body", "red-1", "--property", "color=red");
        await OkAsync("send", topic, "--body", "blue-7", "--property", "color=blue", "--correlation-id", "order-7");
        await OkAsync("send", topic, "--body", "green-1", "--property", "color=green");
        await OkAsync("send", topic, "--body", "red-7", "--property", "color=red", "--correlation-id", "order-7");

        var subscriptions = await OkAsync("subscription", "list", topic);
        foreach (var name in new[] { "all", "red", "order7", "green" })
        {
            Assert.Contains(name, subscriptions.Stdout, StringComparison.Ordinal);
        }

        Assert.Equal(["blue-7", "green-1", "red-1", "red-7"], Bodies(await ReceiveExactlyAsync($"{topic}/Subscriptions/all", 4)));
        Assert.Equal(["red-1", "red-7"], Bodies(await ReceiveExactlyAsync($"{topic}/Subscriptions/red", 2)));
        Assert.Equal(["blue-7", "red-7"], Bodies(await ReceiveExactlyAsync($"{topic}/Subscriptions/order7", 2)));
        var green = Assert.Single(await ReceiveExactlyAsync($"{topic}/Subscriptions/green", 1));
        Assert.Equal("green-1", (string?)green["body"]);
        Assert.Equal("yes", (string?)green["properties"]!["picked"]);

        // The topic stores each message once; every subscription's copy was completed above.
        var counts = (await JsonArrayAsync("subscription", "list", topic, "--json")).Select(s => (long)s!["counts"]!["active"]!);
        Assert.All(counts, c => Assert.Equal(0, c));
        Assert.Equal(4, (int)(await JsonAsync("topic", "show", topic, "--json"))["subscription_count"]!);
    }

    [Fact]
    public async Task Rules_Add_List_Remove()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s");
        await OkAsync("rule", "remove", topic, "s", "$Default");
        var added = await OkAsync("rule", "add", topic, "s", "high", "--sql-filter", "priority > 5");
        Assert.Contains("Added rule 'high'", added.Stdout, StringComparison.Ordinal);
        await OkAsync("rule", "add", topic, "s", "vip", "--correlation-filter", "customer=vip", "--action", "SET tagged = 'yes'");

        var rules = await JsonArrayAsync("rule", "list", topic, "s", "--json");
        Assert.Equal(["high", "vip"], rules.Select(r => (string)r!["name"]!).Order(StringComparer.Ordinal));
        var vip = rules.Single(r => (string?)r!["name"] == "vip")!;
        Assert.Equal("correlation", (string?)vip["filter"]!["type"]);
        Assert.Equal("vip", (string?)vip["filter"]!["properties"]!["customer"]);
        Assert.Equal("SET tagged = 'yes'", (string?)vip["action"]);
        var table = await OkAsync("rule", "list", topic, "s");
        Assert.Contains("sql: priority > 5", table.Stdout, StringComparison.Ordinal);

        await OkAsync("send", topic, "--body", "p9", "--property", "priority=9");
        await OkAsync("send", topic, "--body", "p1", "--property", "priority=1");
        await OkAsync("send", topic, "--body", "vip", "--property", "customer=vip");

        var received = await ReceiveExactlyAsync($"{topic}/Subscriptions/s", 2);
        Assert.Equal(["p9", "vip"], Bodies(received));
        Assert.Equal("yes", (string?)received.Single(m => (string?)m["body"] == "vip")["properties"]!["tagged"]);

        // Rules apply to messages sent after the change.
        var removed = await OkAsync("rule", "remove", topic, "s", "vip");
        Assert.Contains("Removed rule 'vip'", removed.Stdout, StringComparison.Ordinal);
        Assert.Equal(["high"], (await JsonArrayAsync("rule", "list", topic, "s", "--json")).Select(r => (string)r!["name"]!));
        await OkAsync("send", topic, "--body", "vip-2", "--property", "customer=vip");
        await OkAsync("send", topic, "--body", "p8", "--property", "priority=8");
        Assert.Equal(["p8"], Bodies(await ReceiveExactlyAsync($"{topic}/Subscriptions/s", 1)));
    }

    [Fact]
    public async Task DeadLetterQueue_OfASubscription_IsReachableByPath()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s");
        await OkAsync("send", topic, "--body", "bad");

        await OkAsync("receive", $"{topic}/Subscriptions/s", "--settle", "dead-letter", "--wait", "30s");

        var dead = Assert.Single(await ReceiveExactlyAsync($"{topic}/Subscriptions/s/$DeadLetterQueue", 1));
        Assert.Equal("bad", (string?)dead["body"]);
        Assert.Equal(0, (long)(await JsonAsync("subscription", "show", topic, "s", "--json"))["counts"]!["dead_letter"]!);
    }

    [Fact]
    public async Task MalformedSqlFilter_ExitsWith2_NamingThePosition_AndCreatesNothing()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);

        var create = await Farm.RunAsync("subscription", "create", topic, "bad", "--sql-filter", "color = = 'red'");
        CliErrorTests.AssertOneLineError(create, BadInput);
        Assert.Contains("position", create.Stderr, StringComparison.OrdinalIgnoreCase);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("subscription", "show", topic, "bad"), NotFound);

        await OkAsync("subscription", "create", topic, "s");
        var rule = await Farm.RunAsync("rule", "add", topic, "s", "r", "--sql-filter", "color IN ('red'");
        CliErrorTests.AssertOneLineError(rule, BadInput);
        Assert.Contains("position", rule.Stderr, StringComparison.OrdinalIgnoreCase);

        var action = await Farm.RunAsync("rule", "add", topic, "s", "r", "--action", "SET = 1");
        CliErrorTests.AssertOneLineError(action, BadInput);
        Assert.Contains("position", action.Stderr, StringComparison.OrdinalIgnoreCase);
        Assert.Equal(["$Default"], (await JsonArrayAsync("rule", "list", topic, "s", "--json")).Select(r => (string)r!["name"]!));
    }

    [Fact]
    public async Task CorrelationFilter_OnAnUnknownSystemProperty_ExitsWith2()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s");

        var rule = await Farm.RunAsync("rule", "add", topic, "s", "r", "--correlation-filter", "sys.Bogus=1");
        CliErrorTests.AssertOneLineError(rule, BadInput);
        Assert.Contains("sys.Bogus", rule.Stderr, StringComparison.Ordinal);

        var create = await Farm.RunAsync("subscription", "create", topic, "s2", "--correlation-filter", "sys.NoSuchThing=x");
        CliErrorTests.AssertOneLineError(create, BadInput);
        Assert.Contains("sys.NoSuchThing", create.Stderr, StringComparison.Ordinal);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("subscription", "show", topic, "s2"), NotFound);
    }

    [Fact]
    public async Task Rule_Show_And_Update_ReplaceTheFilterInOneStep()
    {
        // Before, changing a filter meant remove + add: messages sent in between matched neither.
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s", "--sql-filter", "priority > 5");

        var shown = await JsonObjectAsync("rule", "show", topic, "s", "$Default", "--json");
        Assert.Equal("priority > 5", (string?)shown["filter"]!["expression"]);

        var updated = await OkAsync("rule", "update", topic, "s", "$Default", "--sql-filter", "priority < 3", "--action", "SET low = 'yes'");
        Assert.Contains("Updated rule '$Default'", updated.Stdout, StringComparison.Ordinal);
        Assert.Equal(["$Default"], (await JsonArrayAsync("rule", "list", topic, "s", "--json")).Select(r => (string)r!["name"]!));
        var malformed = await Farm.RunAsync("rule", "update", topic, "s", "$Default", "--sql-filter", "priority <");
        CliErrorTests.AssertOneLineError(malformed, BadInput);

        await OkAsync("send", topic, "--body", "p9", "--property", "priority=9");
        await OkAsync("send", topic, "--body", "p1", "--property", "priority=1");
        var received = await ReceiveExactlyAsync($"{topic}/Subscriptions/s", 1);
        Assert.Equal(["p1"], Bodies(received));
        Assert.Equal("yes", (string?)received.Single()["properties"]!["low"]);
    }

    [Fact]
    public async Task ForwardingLoops_AreRefused_ExitingWith2_NamingTheLoop()
    {
        // Before: A -> B -> A was accepted and a message sent to A sat in B.
        var a = NewName("a");
        var b = NewName("b");
        var topic = NewName("t");
        await OkAsync("queue", "create", a);
        await OkAsync("queue", "create", b, "--forward-to", a);

        var direct = await Farm.RunAsync("queue", "update", a, "--forward-to", b);
        CliErrorTests.AssertOneLineError(direct, BadInput);
        Assert.Contains($"would make a loop: {a} -> {b} -> {a}", direct.Stderr, StringComparison.Ordinal);

        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s", "--forward-to", a);
        var throughTopic = await Farm.RunAsync("queue", "update", a, "--forward-to", topic);
        CliErrorTests.AssertOneLineError(throughTopic, BadInput);
        Assert.Contains($"{a} -> {topic} -> {a}", throughTopic.Stderr, StringComparison.Ordinal);

        // A subscription whose forwarding comes back to its topic through a queue.
        var c = NewName("c");
        await OkAsync("queue", "create", c, "--forward-to", topic);
        var backThroughAQueue = await Farm.RunAsync("subscription", "create", topic, "back", "--forward-to", c);
        CliErrorTests.AssertOneLineError(backThroughAQueue, BadInput);
        Assert.Contains($"{topic}/Subscriptions/back -> {c} -> {topic}", backThroughAQueue.Stderr, StringComparison.Ordinal);
    }

    [Fact]
    public async Task UnknownTopicSubscriptionOrRule_ExitsWith3()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s");

        var rule = await Farm.RunAsync("rule", "add", topic, "no-such-sub", "r", "--sql-filter", "a = 1");
        CliErrorTests.AssertOneLineError(rule, NotFound);
        Assert.Contains("no-such-sub", rule.Stderr, StringComparison.Ordinal);

        var subscription = await Farm.RunAsync("subscription", "create", "no-such-topic", "s");
        CliErrorTests.AssertOneLineError(subscription, NotFound);
        Assert.Contains("no-such-topic", subscription.Stderr, StringComparison.Ordinal);

        CliErrorTests.AssertOneLineError(await Farm.RunAsync("rule", "remove", topic, "s", "no-such-rule"), NotFound);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("rule", "show", topic, "s", "no-such-rule"), NotFound);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("rule", "update", topic, "s", "no-such-rule", "--sql-filter", "a = 1"), NotFound);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("rule", "list", topic, "no-such-sub"), NotFound);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("subscription", "list", "no-such-topic"), NotFound);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("subscription", "delete", topic, "no-such-sub"), NotFound);
    }

    [Fact]
    public async Task SubscriptionForwardingToItself_ExitsWith2()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);

        var ownTopic = await Farm.RunAsync("subscription", "create", topic, "loop", "--forward-to", topic);
        CliErrorTests.AssertOneLineError(ownTopic, BadInput);
        var ownPath = await Farm.RunAsync("subscription", "create", topic, "loop", "--forward-to", $"{topic}/Subscriptions/loop");
        CliErrorTests.AssertOneLineError(ownPath, BadInput);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("subscription", "show", topic, "loop"), NotFound);

        await OkAsync("subscription", "create", topic, "s");
        var update = await Farm.RunAsync("subscription", "update", topic, "s", "--forward-to", topic);
        CliErrorTests.AssertOneLineError(update, BadInput);
        Assert.Null((await JsonAsync("subscription", "show", topic, "s", "--json"))["forward_to"]);
    }

    [Fact]
    public async Task TakenNames_ExitWith1_LikeQueues()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s");
        await OkAsync("rule", "add", topic, "s", "dup", "--sql-filter", "a = 1");

        var rule = await Farm.RunAsync("rule", "add", topic, "s", "dup", "--sql-filter", "a = 2");
        CliErrorTests.AssertOneLineError(rule, GeneralError);
        Assert.Contains("dup", rule.Stderr, StringComparison.Ordinal);

        // Every subscription starts with $Default.
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("rule", "add", topic, "s", "$Default"), GeneralError);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("subscription", "create", topic, "s"), GeneralError);
        CliErrorTests.AssertOneLineError(await Farm.RunAsync("topic", "create", topic), GeneralError);

        var rules = await JsonArrayAsync("rule", "list", topic, "s", "--json");
        Assert.Equal("a = 1", (string?)rules.Single(r => (string?)r!["name"] == "dup")!["filter"]!["expression"]);
    }

    [Fact]
    public async Task WrongKindOfPath_ForSendOrReceive_GetsOneReadableLine()
    {
        var topic = NewName("t");
        await OkAsync("topic", "create", topic);
        await OkAsync("subscription", "create", topic, "s");

        // A topic is sent to, not received from; a subscription is received from, not sent to.
        var receive = await Farm.RunAsync("receive", topic, "--wait", "5s");
        AssertOneLineFailure(receive, topic);
        var peek = await Farm.RunAsync("peek", topic);
        AssertOneLineFailure(peek, topic);
        var send = await Farm.RunAsync("send", $"{topic}/Subscriptions/s", "--body", "x");
        AssertOneLineFailure(send, topic);

        var unknown = await Farm.RunAsync("receive", $"{topic}/Subscriptions/no-such-sub", "--wait", "5s");
        CliErrorTests.AssertOneLineError(unknown, NotFound);
    }

    [Fact]
    public async Task CliOnlyBadInput_ExitsWith2_BeforeCallingTheFarm()
    {
        var both = await Farm.RunAsync("subscription", "create", "t", "s", "--sql-filter", "a = 1", "--correlation-filter", "b=2");
        CliErrorTests.AssertOneLineError(both, BadInput);
        var pair = await Farm.RunAsync("rule", "add", "t", "s", "r", "--correlation-filter", "no-equals-sign");
        CliErrorTests.AssertOneLineError(pair, BadInput);
        var nothing = await Farm.RunAsync("topic", "update", "t");
        CliErrorTests.AssertOneLineError(nothing, BadInput);
        var ordering = await Farm.RunAsync("topic", "update", "t", "--support-ordering", "maybe");
        CliErrorTests.AssertOneLineError(ordering, BadInput);
    }

    private static void AssertOneLineFailure(ProcessResult result, string topic)
    {
        Assert.True(result.ExitCode is BadInput or NotFound or GeneralError, $"expected a failure: {result}");
        Assert.True(result.StderrLines.Count == 1, $"expected exactly one line on stderr: {result}");
        Assert.DoesNotContain("   at ", result.Stderr, StringComparison.Ordinal);
        Assert.Contains(topic, result.Stderr, StringComparison.Ordinal);
    }

    private async Task<ProcessResult> OkAsync(params string[] arguments)
    {
        var result = await Farm.RunAsync(arguments);
        Assert.True(result.ExitCode == 0, $"farm {string.Join(' ', arguments)} failed: {result}");
        return result;
    }

    private async Task<JsonNode> JsonAsync(params string[] arguments)
        => JsonNode.Parse((await OkAsync(arguments)).Stdout) ?? throw new InvalidOperationException("null JSON");

    private async Task<JsonArray> JsonArrayAsync(params string[] arguments) => (await JsonAsync(arguments)).AsArray();

    private async Task<JsonObject> JsonObjectAsync(params string[] arguments) => (await JsonAsync(arguments)).AsObject();

    /// <summary>
    /// Receives (peek-lock, complete) the <paramref name="count"/> messages the path should hold,
    /// waiting for each as long as fan-out may take, then checks that nothing else arrives.
    /// </summary>
    private async Task<IReadOnlyList<JsonNode>> ReceiveExactlyAsync(string path, int count)
    {
        var messages = new List<JsonNode>();
        while (messages.Count < count)
        {
            var result = await OkAsync("receive", path, "--count", (count - messages.Count).ToString(System.Globalization.CultureInfo.InvariantCulture), "--wait", "30s", "--json");
            var batch = Lines(result.Stdout).Select(l => JsonNode.Parse(l)!).ToList();
            Assert.True(batch.Count > 0, $"{path}: received {messages.Count} of {count} messages: {string.Join(", ", Bodies(messages))}");
            messages.AddRange(batch);
        }

        var extra = await OkAsync("receive", path, "--count", "10", "--wait", "2s", "--json");
        Assert.True(Lines(extra.Stdout).Count == 0, $"{path}: more than the {count} expected messages: {extra.Stdout}");
        return messages;
    }

    private static List<string> Lines(string text) => [.. text.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)];

    private static List<string> Bodies(IEnumerable<JsonNode> messages) => [.. messages.Select(m => (string)m["body"]!).Order(StringComparer.Ordinal)];
}
