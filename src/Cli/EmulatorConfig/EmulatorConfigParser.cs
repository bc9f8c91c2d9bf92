using System.Globalization;
using System.Text.Json;
using System.Text.RegularExpressions;

namespace Farm.Cli.EmulatorConfig;

/// <summary>
/// Reads an Azure Service Bus emulator Config.json (<c>UserConfig.Namespaces[].Queues|Topics</c>)
/// and checks everything Farm can check without a farm: shapes and types, ISO 8601 durations,
/// Farm's limits, names, and names that clash (Farm has one namespace, so the entities of every
/// namespace of the file land in it). The first problem is thrown as an
/// <see cref="EmulatorConfigException"/> naming its JSON path. Property names match in any case.
/// A property Farm does not know is ignored with a warning, so a file written for the emulator
/// still applies; one Farm knows but cannot honour (RequiresSession: true) is an error.
/// </summary>
internal sealed partial class EmulatorConfigParser
{
    // Farm's limits, as the broker enforces them (src/Broker/Entities/QueueSettings.cs).
    internal static readonly TimeSpan MaxLockDuration = TimeSpan.FromMinutes(5);
    internal static readonly TimeSpan MinDuplicateWindow = TimeSpan.FromSeconds(20);
    internal static readonly TimeSpan MaxDuplicateWindow = TimeSpan.FromDays(7);
    private const int MaxEntityNameLength = 260;
    private const int MaxSubscriptionNameLength = 50;
    private const int MaxRuleNameLength = 50;
    private const string DefaultRuleName = "$Default";

    private static readonly string[] QueueProperties =
    [
        "DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow", "ForwardDeadLetteredMessagesTo",
        "ForwardTo", "LockDuration", "MaxDeliveryCount", "RequiresDuplicateDetection", "RequiresSession",
    ];

    private static readonly string[] TopicProperties = ["DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow", "RequiresDuplicateDetection"];

    private static readonly string[] SubscriptionProperties =
    [
        "DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive", "ForwardDeadLetteredMessagesTo", "ForwardTo", "LockDuration", "MaxDeliveryCount", "RequiresSession",
    ];

    private static readonly string[] CorrelationFields = ["ContentType", "CorrelationId", "Label", "Subject", "MessageId", "ReplyTo", "ReplyToSessionId", "SessionId", "To", "Properties"];

    private readonly List<string> _warnings = [];

    /// <summary>Where each entity name was first defined, across all namespaces (names are case-insensitive).</summary>
    private readonly Dictionary<string, string> _entityPaths = new(StringComparer.OrdinalIgnoreCase);

    private EmulatorConfigParser()
    {
    }

    [GeneratedRegex("^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$", RegexOptions.CultureInvariant)]
    private static partial Regex EntityNamePattern();

    /// <summary>The file's entities; throws <see cref="EmulatorConfigException"/> at the first problem.</summary>
    public static EmulatorConfigFile Parse(string json)
    {
        JsonDocument document;
        try
        {
            document = JsonDocument.Parse(json, new JsonDocumentOptions { AllowTrailingCommas = true, CommentHandling = JsonCommentHandling.Skip });
        }
        catch (JsonException e)
        {
            throw new EmulatorConfigException(
                string.Create(CultureInfo.InvariantCulture, $"line {e.LineNumber + 1}, position {e.BytePositionInLine + 1}"),
                "not valid JSON");
        }

        using (document)
        {
            return new EmulatorConfigParser().ReadRoot(document.RootElement);
        }
    }

    private EmulatorConfigFile ReadRoot(JsonElement root)
    {
        const string rootPath = "(the file)";
        Expect(root, JsonValueKind.Object, rootPath);
        Known(root, null, "UserConfig");
        var userConfig = Required(root, null, "UserConfig", JsonValueKind.Object);
        const string userPath = "UserConfig";

        // Logging says where the emulator writes its log; a farm node logs to its data directory.
        Known(userConfig, userPath, "Namespaces", "Logging");
        var namespacesPath = userPath + ".Namespaces";
        var namespaces = Required(userConfig, userPath, "Namespaces", JsonValueKind.Array);
        if (namespaces.GetArrayLength() == 0)
        {
            throw new EmulatorConfigException(namespacesPath, "lists no namespace; give one, e.g. {\"Name\": \"sbemulatorns\", \"Queues\": [...], \"Topics\": [...]}");
        }

        var queues = new List<QueueConfig>();
        var topics = new List<TopicConfig>();
        var index = 0;
        foreach (var ns in namespaces.EnumerateArray())
        {
            var nsPath = Index(namespacesPath, index++);
            Expect(ns, JsonValueKind.Object, nsPath);
            Known(ns, nsPath, "Name", "Queues", "Topics");
            RequiredString(ns, nsPath, "Name");
            queues.AddRange(Items(ns, nsPath, "Queues").Select(item => ReadQueue(item.Element, item.Path)));
            topics.AddRange(Items(ns, nsPath, "Topics").Select(item => ReadTopic(item.Element, item.Path)));
        }

        return new EmulatorConfigFile(queues, topics, _warnings);
    }

    private QueueConfig ReadQueue(JsonElement queue, string path)
    {
        Expect(queue, JsonValueKind.Object, path);
        Known(queue, path, "Name", "Properties");
        var name = EntityName(queue, path, "queue");
        var (properties, propertiesPath) = PropertiesOf(queue, path, QueueProperties);
        var receiver = ReadReceiver(properties, propertiesPath, name, ownTopic: null);
        return new QueueConfig(path, name, receiver, ReadDuplicateDetection(properties, propertiesPath));
    }

    private TopicConfig ReadTopic(JsonElement topic, string path)
    {
        Expect(topic, JsonValueKind.Object, path);
        Known(topic, path, "Name", "Properties", "Subscriptions");
        var name = EntityName(topic, path, "topic");
        var (properties, propertiesPath) = PropertiesOf(topic, path, TopicProperties);
        var ttl = PositiveDuration(properties, propertiesPath, "DefaultMessageTimeToLive");

        var subscriptionPaths = new Dictionary<string, string>(StringComparer.OrdinalIgnoreCase);
        var subscriptions = new List<SubscriptionConfig>();
        foreach (var (element, subscriptionPath) in Items(topic, path, "Subscriptions"))
        {
            var subscription = ReadSubscription(element, subscriptionPath, name);
            if (!subscriptionPaths.TryAdd(subscription.Name, subscriptionPath))
            {
                throw new EmulatorConfigException(subscriptionPath + ".Name", $"the subscription '{subscription.Name}' is already defined at {subscriptionPaths[subscription.Name]}");
            }

            subscriptions.Add(subscription);
        }

        return new TopicConfig(path, name, ttl, ReadDuplicateDetection(properties, propertiesPath), subscriptions);
    }

    private SubscriptionConfig ReadSubscription(JsonElement subscription, string path, string topic)
    {
        Expect(subscription, JsonValueKind.Object, path);
        Known(subscription, path, "Name", "Properties", "Rules");
        var name = RequiredString(subscription, path, "Name");
        CheckName(name, path + ".Name", MaxSubscriptionNameLength, "subscription");
        var (properties, propertiesPath) = PropertiesOf(subscription, path, SubscriptionProperties);
        var receiver = ReadReceiver(properties, propertiesPath, self: null, ownTopic: topic);

        var rulePaths = new Dictionary<string, string>(StringComparer.OrdinalIgnoreCase);
        var rules = new List<RuleConfig>();
        foreach (var (element, rulePath) in Items(subscription, path, "Rules"))
        {
            var rule = ReadRule(element, rulePath);
            if (!rulePaths.TryAdd(rule.Name, rulePath))
            {
                throw new EmulatorConfigException(rulePath + ".Name", $"the rule '{rule.Name}' is already defined at {rulePaths[rule.Name]}");
            }

            rules.Add(rule);
        }

        return new SubscriptionConfig(path, name, receiver, rules);
    }

    private RuleConfig ReadRule(JsonElement rule, string path)
    {
        Expect(rule, JsonValueKind.Object, path);
        Known(rule, path, "Name", "Properties");
        var name = RequiredString(rule, path, "Name");
        CheckRuleName(name, path + ".Name");
        var properties = Required(rule, path, "Properties", JsonValueKind.Object);
        var propertiesPath = path + ".Properties";
        Known(properties, propertiesPath, "FilterType", "CorrelationFilter", "SqlFilter", "Action");
        var filterType = RequiredString(properties, propertiesPath, "FilterType");

        string? action = null;
        if (Optional(properties, "Action") is { } actionElement)
        {
            var actionPath = propertiesPath + ".Action";
            Expect(actionElement, JsonValueKind.Object, actionPath);
            Known(actionElement, actionPath, "SqlExpression");

            // An empty action is how some files say "none".
            action = OptionalString(actionElement, actionPath, "SqlExpression") is { } text && !string.IsNullOrWhiteSpace(text) ? text : null;
        }

        if (string.Equals(filterType, "Sql", StringComparison.OrdinalIgnoreCase))
        {
            var sqlPath = propertiesPath + ".SqlFilter";
            var sql = Required(properties, propertiesPath, "SqlFilter", JsonValueKind.Object);
            Known(sql, sqlPath, "SqlExpression");
            var expression = RequiredString(sql, sqlPath, "SqlExpression");
            return new RuleConfig(path, name, expression, null, action);
        }

        if (string.Equals(filterType, "Correlation", StringComparison.OrdinalIgnoreCase))
        {
            var correlationPath = propertiesPath + ".CorrelationFilter";
            var correlation = Required(properties, propertiesPath, "CorrelationFilter", JsonValueKind.Object);
            return new RuleConfig(path, name, null, ReadCorrelation(correlation, correlationPath), action);
        }

        throw new EmulatorConfigException(propertiesPath + ".FilterType", $"'{filterType}' is not a filter type; use Correlation or Sql");
    }

    private CorrelationConfig ReadCorrelation(JsonElement filter, string path)
    {
        Known(filter, path, CorrelationFields);
        var label = OptionalString(filter, path, "Label");
        var subject = OptionalString(filter, path, "Subject");
        if (label is not null && subject is not null && label != subject)
        {
            throw new EmulatorConfigException(path + ".Subject", "Label and Subject are the same property; give one of them");
        }

        var applicationProperties = new List<KeyValuePair<string, object>>();
        if (Optional(filter, "Properties") is { } properties)
        {
            var propertiesPath = path + ".Properties";
            Expect(properties, JsonValueKind.Object, propertiesPath);
            foreach (var property in properties.EnumerateObject())
            {
                applicationProperties.Add(new(property.Name, PropertyValue(property.Value, propertiesPath + "." + property.Name)));
            }
        }

        var result = new CorrelationConfig(
            OptionalString(filter, path, "ContentType"),
            OptionalString(filter, path, "CorrelationId"),
            label ?? subject,
            OptionalString(filter, path, "MessageId"),
            OptionalString(filter, path, "ReplyTo"),
            OptionalString(filter, path, "ReplyToSessionId"),
            OptionalString(filter, path, "SessionId"),
            OptionalString(filter, path, "To"),
            applicationProperties);
        if (applicationProperties.Count == 0 && new[] { result.ContentType, result.CorrelationId, result.Subject, result.MessageId, result.ReplyTo, result.ReplyToSessionId, result.SessionId, result.To }.All(v => v is null))
        {
            throw new EmulatorConfigException(path, "has no condition; give at least one of " + string.Join(", ", CorrelationFields));
        }

        return result;
    }

    /// <summary>An application property's value as a message would carry it: text, a whole number (long), another number (double) or a boolean.</summary>
    private static object PropertyValue(JsonElement value, string path) => value.ValueKind switch
    {
        JsonValueKind.String => value.GetString()!,
        JsonValueKind.True => true,
        JsonValueKind.False => false,
        JsonValueKind.Number when value.TryGetInt64(out var whole) => whole,
        JsonValueKind.Number => value.GetDouble(),
        _ => throw new EmulatorConfigException(path, $"must be a string, a number or true/false, not {Describe(value)}"),
    };

    /// <param name="self">The queue's own name (it may not forward to itself); null for a subscription.</param>
    /// <param name="ownTopic">A subscription's topic (it may not forward to it); null for a queue.</param>
    private ReceiverConfig ReadReceiver(JsonElement? properties, string path, string? self, string? ownTopic)
    {
        if (OptionalBool(properties, path, "RequiresSession") == true)
        {
            throw new EmulatorConfigException(path + ".RequiresSession", "true is not supported: Farm has no sessions yet (see README, 'Not built yet'); remove it or set it to false");
        }

        TimeSpan? lockDuration = PositiveDuration(properties, path, "LockDuration");
        if (lockDuration > MaxLockDuration)
        {
            throw new EmulatorConfigException(path + ".LockDuration", $"{Text(properties, "LockDuration")} is longer than Farm's longest lock, 5 minutes (PT5M)");
        }

        int? maxDeliveryCount = null;
        if (Optional(properties, "MaxDeliveryCount") is { } count)
        {
            if (count.ValueKind != JsonValueKind.Number || !count.TryGetInt32(out var value))
            {
                throw new EmulatorConfigException(path + ".MaxDeliveryCount", $"must be a whole number, not {Describe(count)}");
            }

            maxDeliveryCount = value >= 1 ? value : throw new EmulatorConfigException(path + ".MaxDeliveryCount", string.Create(CultureInfo.InvariantCulture, $"must be at least 1, not {value}"));
        }

        return new ReceiverConfig(
            lockDuration,
            maxDeliveryCount,
            PositiveDuration(properties, path, "DefaultMessageTimeToLive"),
            OptionalBool(properties, path, "DeadLetteringOnMessageExpiration"),
            ForwardTarget(properties, path, "ForwardTo", self, ownTopic),
            ForwardTarget(properties, path, "ForwardDeadLetteredMessagesTo", self, ownTopic));
    }

    private static DuplicateDetectionConfig ReadDuplicateDetection(JsonElement? properties, string path)
    {
        var window = PositiveDuration(properties, path, "DuplicateDetectionHistoryTimeWindow");
        if (window < MinDuplicateWindow || window > MaxDuplicateWindow)
        {
            throw new EmulatorConfigException(
                path + ".DuplicateDetectionHistoryTimeWindow",
                $"{Text(properties, "DuplicateDetectionHistoryTimeWindow")} is outside Farm's range, 20 seconds (PT20S) to 7 days (P7D)");
        }

        return new DuplicateDetectionConfig(OptionalBool(properties, path, "RequiresDuplicateDetection"), window);
    }

    /// <summary>"" (the emulator's "none") is null; anything else must be a queue or topic name other than the entity's own.</summary>
    private static string? ForwardTarget(JsonElement? properties, string path, string name, string? self, string? ownTopic)
    {
        var target = OptionalString(properties, path, name);
        if (string.IsNullOrWhiteSpace(target))
        {
            return null;
        }

        var targetPath = path + "." + name;
        CheckName(target, targetPath, MaxEntityNameLength, "queue or topic");
        if (string.Equals(target, self, StringComparison.OrdinalIgnoreCase))
        {
            throw new EmulatorConfigException(targetPath, $"a queue cannot forward to itself ('{target}')");
        }

        if (string.Equals(target, ownTopic, StringComparison.OrdinalIgnoreCase))
        {
            throw new EmulatorConfigException(targetPath, $"a subscription cannot forward to its own topic ('{target}')");
        }

        return target;
    }

    /// <summary>A queue's or topic's name, which must be unique among the entities of every namespace.</summary>
    private string EntityName(JsonElement entity, string path, string kind)
    {
        var name = RequiredString(entity, path, "Name");
        CheckName(name, path + ".Name", MaxEntityNameLength, kind);
        if (!_entityPaths.TryAdd(name, path))
        {
            var other = _entityPaths[name];
            var why = SameNamespace(other, path) ? string.Empty : " (Farm has one namespace: the entities of every namespace of the file share it)";
            throw new EmulatorConfigException(path + ".Name", $"the name '{name}' is already used at {other}{why}");
        }

        return name;
    }

    private static bool SameNamespace(string a, string b) =>
        string.Equals(a[..(a.IndexOf(']', StringComparison.Ordinal) + 1)], b[..(b.IndexOf(']', StringComparison.Ordinal) + 1)], StringComparison.Ordinal);

    private static void CheckName(string name, string path, int maxLength, string kind)
    {
        if (name.Length > maxLength)
        {
            throw new EmulatorConfigException(path, string.Create(CultureInfo.InvariantCulture, $"a {kind} name is at most {maxLength} characters; '{name}' has {name.Length}"));
        }

        if (!EntityNamePattern().IsMatch(name))
        {
            throw new EmulatorConfigException(path, $"'{name}' is not a valid {kind} name: use letters, digits, '.', '-' and '_', starting and ending with a letter or digit");
        }
    }

    private static void CheckRuleName(string name, string path)
    {
        if (name.Length > MaxRuleNameLength)
        {
            throw new EmulatorConfigException(path, string.Create(CultureInfo.InvariantCulture, $"a rule name is at most {MaxRuleNameLength} characters; '{name}' has {name.Length}"));
        }

        if (name.StartsWith('$') && !string.Equals(name, DefaultRuleName, StringComparison.OrdinalIgnoreCase))
        {
            throw new EmulatorConfigException(path, $"'{name}' is not a valid rule name: names starting with '$' are reserved");
        }

        if (name.Any(c => char.IsControl(c) || c is '/' or '\\' or '?' or '#' or '%'))
        {
            throw new EmulatorConfigException(path, $"'{name}' is not a valid rule name: it may not contain control characters, '/', '\\', '?', '#' or '%'");
        }
    }
}
