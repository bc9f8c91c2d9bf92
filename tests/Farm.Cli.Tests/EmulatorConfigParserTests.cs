using Farm.Cli.EmulatorConfig;
using Farm.Client;

namespace Farm.Cli.Tests;

/// <summary>Reading an Azure Service Bus emulator Config.json: what a good file becomes, and every kind of problem named by its JSON path.</summary>
public class EmulatorConfigParserTests
{
    private const string EmulatorStyleFile = """
        {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
          "Queues": [{"Name": "queue.1", "Properties": {"DeadLetteringOnMessageExpiration": false, "DefaultMessageTimeToLive": "PT1H",
            "DuplicateDetectionHistoryTimeWindow": "PT20S", "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "", "LockDuration": "PT1M",
            "MaxDeliveryCount": 3, "RequiresDuplicateDetection": false, "RequiresSession": false}}],
          "Topics": [{"Name": "topic.1", "Properties": {"DefaultMessageTimeToLive": "PT1H", "DuplicateDetectionHistoryTimeWindow": "PT20S", "RequiresDuplicateDetection": true},
            "Subscriptions": [
              {"Name": "subscription.1", "Properties": {"DeadLetteringOnMessageExpiration": true, "DefaultMessageTimeToLive": "PT1H", "LockDuration": "PT1M",
                "MaxDeliveryCount": 3, "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "", "RequiresSession": false},
               "Rules": [
                 {"Name": "app-prop-filter-1", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"ContentType": "application/text",
                   "CorrelationId": "id1", "Label": "subject1", "MessageId": "msgid1", "ReplyTo": "someQueue", "ReplyToSessionId": "sessionId",
                   "SessionId": "session1", "To": "xyz", "Properties": {"prop1": "value1", "count": 12, "ratio": 0.5, "flag": true}}}},
                 {"Name": "sql-filter-1", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "sys.MessageId = '123456' AND userProp1 = 'value1'"},
                   "Action": {"SqlExpression": "SET sys.To = 'Entity'"}}}]},
              {"Name": "subscription.2"}]}]}],
        "Logging": {"Type": "File"}}}
        """;

    [Fact]
    public void AnEmulatorStyleFile_BecomesItsQueuesTopicsSubscriptionsAndRules()
    {
        var config = EmulatorConfigParser.Parse(EmulatorStyleFile);

        Assert.Empty(config.Warnings);
        var queue = Assert.Single(config.Queues);
        Assert.Equal(("queue.1", "UserConfig.Namespaces[0].Queues[0]"), (queue.Name, queue.Path));
        Assert.Equal(
            new ReceiverConfig(TimeSpan.FromMinutes(1), 3, TimeSpan.FromHours(1), false, ForwardTo: null, ForwardDeadLetteredMessagesTo: null),
            queue.Receiver);
        Assert.Equal(new DuplicateDetectionConfig(false, TimeSpan.FromSeconds(20)), queue.DuplicateDetection);

        var topic = Assert.Single(config.Topics);
        Assert.Equal(("topic.1", TimeSpan.FromHours(1)), (topic.Name, topic.DefaultMessageTimeToLive));
        Assert.Equal(new DuplicateDetectionConfig(true, TimeSpan.FromSeconds(20)), topic.DuplicateDetection);
        Assert.Equal(["subscription.1", "subscription.2"], topic.Subscriptions.Select(s => s.Name));
        Assert.Empty(topic.Subscriptions[1].Rules);
        Assert.Equal(new ReceiverConfig(null, null, null, null, null, null), topic.Subscriptions[1].Receiver);

        var rules = topic.Subscriptions[0].Rules;
        Assert.Equal(["app-prop-filter-1", "sql-filter-1"], rules.Select(r => r.Name));
        var correlation = rules[0].Correlation!;
        Assert.Equal(
            ("application/text", "id1", "subject1", "msgid1", "someQueue", "sessionId", "session1", "xyz"),
            (correlation.ContentType, correlation.CorrelationId, correlation.Subject, correlation.MessageId, correlation.ReplyTo, correlation.ReplyToSessionId, correlation.SessionId, correlation.To));
        Assert.Equal(
            [new("prop1", "value1"), new("count", 12L), new("ratio", 0.5), new("flag", true)],
            correlation.Properties);
        Assert.Equal(("sys.MessageId = '123456' AND userProp1 = 'value1'", "SET sys.To = 'Entity'"), (rules[1].SqlFilter, rules[1].Action));
        Assert.Equal("UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[1]", rules[1].Path);
    }

    [Fact]
    public void ACorrelationRule_BecomesTheSdksFilter_WithLabelAsSubjectAndTypedProperties()
    {
        var rule = EmulatorConfigParser.Parse(EmulatorStyleFile).Topics[0].Subscriptions[0].Rules[0];

        var options = EmulatorConfigApplier.ToOptions(rule);

        var filter = Assert.IsType<CorrelationRuleFilter>(options.Filter);
        Assert.Equal(("app-prop-filter-1", "subject1", "id1"), (options.Name, filter.Subject, filter.CorrelationId));
        Assert.Equal("value1", filter.ApplicationProperties["prop1"]);
        Assert.Equal(12L, filter.ApplicationProperties["count"]);
        Assert.Null(options.Action);
    }

    [Fact]
    public void NamespacesAreMerged_InFileOrder()
    {
        var config = EmulatorConfigParser.Parse(File(
            Namespace("one", queues: """[{"Name": "a"}]"""),
            Namespace("two", queues: """[{"Name": "b"}]""", topics: """[{"Name": "t", "Subscriptions": []}]""")));

        Assert.Equal(["a", "b"], config.Queues.Select(q => q.Name));
        Assert.Equal("UserConfig.Namespaces[1].Queues[0]", config.Queues[1].Path);
        Assert.Equal("t", Assert.Single(config.Topics).Name);
    }

    [Fact]
    public void UnknownProperties_AreIgnoredWithAWarningNamingTheirPaths_AndLoggingSilently()
    {
        var config = EmulatorConfigParser.Parse("""
            {"UserConfig": {"Logging": {"Type": "Console"}, "Extra": 1, "Namespaces": [{"Name": "ns",
              "Queues": [{"Name": "q", "Properties": {"LockDuraton": "PT1M", "EnablePartitioning": true}}],
              "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r", "Properties": {"FilterType": "Sql",
                "SqlFilter": {"SqlExpression": "1=1", "Parameters": {}}}}]}]}]}]}}
            """);

        Assert.Equal(
            [
                "UserConfig.Extra: not a setting Farm knows; ignored",
                "UserConfig.Namespaces[0].Queues[0].Properties.LockDuraton: not a setting Farm knows; ignored",
                "UserConfig.Namespaces[0].Queues[0].Properties.EnablePartitioning: not a setting Farm knows; ignored",
                "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.SqlFilter.Parameters: not a setting Farm knows; ignored",
            ],
            config.Warnings);
        Assert.Null(config.Queues[0].Receiver.LockDuration);
    }

    [Fact]
    public void PropertyNames_MatchInAnyCase()
    {
        var config = EmulatorConfigParser.Parse(File(Namespace("ns", queues: """[{"name": "q", "properties": {"lockduration": "PT10S", "MAXDELIVERYCOUNT": 2}}]""")));

        Assert.Equal((TimeSpan.FromSeconds(10), 2), (config.Queues[0].Receiver.LockDuration, config.Queues[0].Receiver.MaxDeliveryCount));
        Assert.Empty(config.Warnings);
    }

    [Theory]
    [InlineData("PT1H", 3600)]
    [InlineData("PT20S", 20)]
    [InlineData("P1D", 86400)]
    [InlineData("P1DT2H30M", 95400)]
    [InlineData("PT0.5S", 0.5)]
    [InlineData("PT1,5S", 1.5)]
    [InlineData("P2W", 1209600)]
    public void IsoDurations_AreRead(string text, double seconds)
    {
        Assert.Equal(TimeSpan.FromSeconds(seconds), IsoDuration.TryParse(text, out var problem));
        Assert.Null(problem);
    }

    [Fact]
    public void AzuresLongestDuration_IsTimeSpanMaxValue()
    {
        Assert.Equal(TimeSpan.MaxValue, IsoDuration.TryParse("P10675199DT2H48M5.4775807S", out _));
    }

    [Theory]
    [InlineData("PT1X", "is not an ISO 8601 duration")]
    [InlineData("1H", "is not an ISO 8601 duration")]
    [InlineData("P", "is not an ISO 8601 duration")]
    [InlineData("PT", "is not an ISO 8601 duration")]
    [InlineData("-PT1H", "is not an ISO 8601 duration")]
    [InlineData("P1Y", "years and months have no fixed length")]
    [InlineData("P1M", "years and months have no fixed length")]
    [InlineData("P99999999999D", "longer than the longest duration")]
    public void NonDurations_AreRefusedSayingWhy(string text, string why)
    {
        Assert.Null(IsoDuration.TryParse(text, out var problem));
        Assert.Contains(why, problem, StringComparison.Ordinal);
    }

    public static TheoryData<string, string, string> Problems => new()
    {
        // The whole file.
        { "{\"UserConfig\": {", "line 1, position", "not valid JSON" },
        { "[]", "(the file)", "must be an object, not an array" },
        { "{}", "UserConfig", "is required (an object)" },
        { """{"UserConfig": {"Namespaces": {}}}""", "UserConfig.Namespaces", "must be an array, not an object" },
        { """{"UserConfig": {"Namespaces": []}}""", "UserConfig.Namespaces", "lists no namespace" },
        { """{"UserConfig": {"Namespaces": [{"Queues": []}]}}""", "UserConfig.Namespaces[0].Name", "is required (a string)" },
        { File(Namespace("ns", queues: "{}")), "UserConfig.Namespaces[0].Queues", "must be an array, not an object" },

        // Queues: the brief's own example is the third queue's LockDuration.
        { Queues("""{"Name": "a"}, {"Name": "b"}, {"Name": "c", "Properties": {"LockDuration": "PT1X"}}"""), "UserConfig.Namespaces[0].Queues[2].Properties.LockDuration", "'PT1X' is not an ISO 8601 duration" },
        { Queues("""{"Name": "q", "Properties": {"DefaultMessageTimeToLive": "P1Y"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.DefaultMessageTimeToLive", "years and months" },
        { Queues("""{"Name": "q", "Properties": {"DefaultMessageTimeToLive": "PT0S"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.DefaultMessageTimeToLive", "'PT0S' must be more than zero" },
        { Queues("""{"Name": "q", "Properties": {"LockDuration": 60}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.LockDuration", "must be a string, not the number 60" },
        { Queues("""{"Name": "q", "Properties": {"LockDuration": "PT6M"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.LockDuration", "'PT6M' is longer than Farm's longest lock, 5 minutes" },
        { Queues("""{"Name": "q", "Properties": {"DuplicateDetectionHistoryTimeWindow": "PT5S"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.DuplicateDetectionHistoryTimeWindow", "'PT5S' is outside Farm's range" },
        { Queues("""{"Name": "q", "Properties": {"MaxDeliveryCount": 0}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount", "must be at least 1, not 0" },
        { Queues("""{"Name": "q", "Properties": {"MaxDeliveryCount": "3"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount", "must be a whole number, not the string '3'" },
        { Queues("""{"Name": "q", "Properties": {"MaxDeliveryCount": 2.5}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount", "must be a whole number, not the number 2.5" },
        { Queues("""{"Name": "q", "Properties": {"RequiresDuplicateDetection": "true"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.RequiresDuplicateDetection", "must be true or false, not the string 'true'" },
        { Queues("""{"Name": "q", "Properties": {"RequiresSession": true}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.RequiresSession", "Farm has no sessions yet" },
        { Queues("""{"Name": "q", "Properties": []}"""), "UserConfig.Namespaces[0].Queues[0].Properties", "must be an object, not an array" },
        { Queues("""{"Name": "q", "Properties": {"ForwardTo": "q"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.ForwardTo", "cannot forward to itself" },
        { Queues("""{"Name": "q", "Properties": {"ForwardDeadLetteredMessagesTo": "t/Subscriptions/s"}}"""), "UserConfig.Namespaces[0].Queues[0].Properties.ForwardDeadLetteredMessagesTo", "'t/Subscriptions/s' is not a valid queue or topic name" },
        { Queues("""{"Properties": {}}"""), "UserConfig.Namespaces[0].Queues[0].Name", "is required (a string)" },
        { Queues("""{"Name": ""}"""), "UserConfig.Namespaces[0].Queues[0].Name", "must not be empty" },
        { Queues("""{"Name": "orders/eu"}"""), "UserConfig.Namespaces[0].Queues[0].Name", "'orders/eu' is not a valid queue name" },
        { Queues("""{"Name": "-orders"}"""), "UserConfig.Namespaces[0].Queues[0].Name", "'-orders' is not a valid queue name" },
        { Queues("""{"Name": "orders"}, {"Name": "Orders"}"""), "UserConfig.Namespaces[0].Queues[1].Name", "the name 'Orders' is already used at UserConfig.Namespaces[0].Queues[0]" },

        // Names clash across namespaces, and across kinds: Farm has one namespace.
        {
            File(Namespace("one", queues: """[{"Name": "orders"}]"""), Namespace("two", topics: """[{"Name": "orders"}]""")),
            "UserConfig.Namespaces[1].Topics[0].Name",
            "the name 'orders' is already used at UserConfig.Namespaces[0].Queues[0] (Farm has one namespace"
        },

        // Topics, subscriptions and rules.
        { Topics("""{"Name": "t", "Properties": {"RequiresDuplicateDetection": 1}}"""), "UserConfig.Namespaces[0].Topics[0].Properties.RequiresDuplicateDetection", "must be true or false, not the number 1" },
        { Topics("""{"Name": "t", "Subscriptions": [{"Name": "s"}, {"Name": "S"}]}"""), "UserConfig.Namespaces[0].Topics[0].Subscriptions[1].Name", "the subscription 'S' is already defined at UserConfig.Namespaces[0].Topics[0].Subscriptions[0]" },
        { Topics("""{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {"RequiresSession": true}}]}"""), "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Properties.RequiresSession", "Farm has no sessions yet" },
        { Topics("""{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {"ForwardTo": "t"}}]}"""), "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Properties.ForwardTo", "cannot forward to its own topic" },
        { Topics("""{"Name": "t", "Subscriptions": [{"Name": "this-subscription-name-is-much-longer-than-fifty-characters"}]}"""), "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Name", "a subscription name is at most 50 characters" },
        { Rules("""{"Name": "r"}"""), RulePath + ".Properties", "is required (an object)" },
        { Rules("""{"Name": "r", "Properties": {}}"""), RulePath + ".Properties.FilterType", "is required (a string)" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "True"}}"""), RulePath + ".Properties.FilterType", "'True' is not a filter type; use Correlation or Sql" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Sql"}}"""), RulePath + ".Properties.SqlFilter", "is required (an object)" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": " "}}}"""), RulePath + ".Properties.SqlFilter.SqlExpression", "must not be empty" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": "SET a = 1"}}"""), RulePath + ".Properties.Action", "must be an object, not the string 'SET a = 1'" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Correlation"}}"""), RulePath + ".Properties.CorrelationFilter", "is required (an object)" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {}}}"""), RulePath + ".Properties.CorrelationFilter", "has no condition" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"CorrelationId": 7}}}"""), RulePath + ".Properties.CorrelationFilter.CorrelationId", "must be a string, not the number 7" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Label": "a", "Subject": "b"}}}"""), RulePath + ".Properties.CorrelationFilter.Subject", "Label and Subject are the same property" },
        { Rules("""{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"p": {"x": 1}}}}}"""), RulePath + ".Properties.CorrelationFilter.Properties.p", "must be a string, a number or true/false, not an object" },
        { Rules("""{"Name": "$mine", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}"""), RulePath + ".Name", "names starting with '$' are reserved" },
        { Rules("""{"Name": "a/b", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}"""), RulePath + ".Name", "'a/b' is not a valid rule name" },
        {
            Rules("""{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}, {"Name": "R", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}"""),
            "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[1].Name",
            "the rule 'R' is already defined at " + RulePath
        },
    };

    private const string RulePath = "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0]";

    [Theory]
    [MemberData(nameof(Problems))]
    public void EveryProblem_IsRefusedNamingItsJsonPath(string json, string path, string problem)
    {
        var error = Assert.Throws<EmulatorConfigException>(() => EmulatorConfigParser.Parse(json));

        Assert.StartsWith(path, error.JsonPath, StringComparison.Ordinal);
        Assert.Contains(problem, error.Problem, StringComparison.Ordinal);
        Assert.Equal($"{error.JsonPath}: {error.Problem}", error.Message);
        Assert.DoesNotContain('\n', error.Message);
    }

    private static string File(params string[] namespaces) =>
        $$"""{"UserConfig": {"Namespaces": [{{string.Join(", ", namespaces)}}], "Logging": {"Type": "File"} } }""";

    private static string Namespace(string name, string queues = "[]", string topics = "[]") =>
        $$"""{"Name": "{{name}}", "Queues": {{queues}}, "Topics": {{topics}}}""";

    private static string Queues(string items) => File(Namespace("ns", queues: $"[{items}]"));

    private static string Topics(string items) => File(Namespace("ns", topics: $"[{items}]"));

    private static string Rules(string items) => Topics($$"""{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{{items}}]}]}""");
}
