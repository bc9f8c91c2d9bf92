using Farm.Broker.Rules;
using Farm.Contracts.V1;
using Google.Protobuf;
using CorrelationFilter = Farm.Broker.Rules.CorrelationFilter;
using SqlFilter = Farm.Broker.Rules.SqlFilter;
using WireCorrelationFilter = Farm.Contracts.V1.CorrelationFilter;

namespace Farm.Broker.Topics;

/// <summary>
/// Turns a rule as the wire and the farm database carry it (<see cref="RuleProperties"/>, stored as
/// protobuf JSON) into a parsed <see cref="Rule"/>. Parsing happens once, when the rule is added;
/// a malformed filter or action is an InvalidArgument naming the position of the error.
/// </summary>
public static class RuleDefinitions
{
    public const int MaxNameLength = 50;

    private static readonly JsonFormatter Formatter = new(JsonFormatter.Settings.Default.WithFormatDefaultValues(false));

    /// <summary>The $Default rule as stored: no filter (true), no action.</summary>
    public static RuleProperties DefaultRule => new() { Name = Rule.DefaultRuleName };

    public static string ToJson(RuleProperties rule) => Formatter.Format(rule);

    public static RuleProperties FromJson(string json) => RuleProperties.Parser.ParseJson(json);

    /// <summary>Parses the rule; throws BrokerException(InvalidArgument) naming what is wrong and where.</summary>
    public static Rule Parse(RuleProperties rule)
    {
        if (ValidateName(rule.Name) is { } nameError)
        {
            throw FarmErrors.Invalid(nameError);
        }
        RuleFilter filter;
        try
        {
            filter = rule.FilterCase switch
            {
                RuleProperties.FilterOneofCase.SqlFilter => SqlFilter.Parse(rule.SqlFilter.Expression),
                RuleProperties.FilterOneofCase.CorrelationFilter => ToCorrelationFilter(rule.CorrelationFilter),
                _ => TrueFilter.Instance,
            };
        }
        catch (RuleParseException e)
        {
            var what = rule.FilterCase == RuleProperties.FilterOneofCase.SqlFilter ? "SQL filter" : "correlation filter";
            throw FarmErrors.Invalid(Describe($"The {what} of rule '{rule.Name}'", e));
        }
        SqlRuleAction? action = null;
        if (!string.IsNullOrWhiteSpace(rule.SqlAction))
        {
            try
            {
                action = SqlRuleAction.Parse(rule.SqlAction);
            }
            catch (RuleParseException e)
            {
                throw FarmErrors.Invalid(Describe($"The action of rule '{rule.Name}'", e));
            }
        }
        return new Rule(rule.Name, filter, action);
    }

    /// <summary>Null when valid. Rule names: 1-50 characters; "$Default" is the only one that may start with '$'.</summary>
    public static string? ValidateName(string? name)
    {
        if (string.IsNullOrEmpty(name))
        {
            return "A rule name is required.";
        }
        if (name.Length > MaxNameLength)
        {
            return $"The rule name '{name[..20]}...' is {name.Length} characters long; the maximum is {MaxNameLength}.";
        }
        if (name.StartsWith('$') && !string.Equals(name, Rule.DefaultRuleName, StringComparison.OrdinalIgnoreCase))
        {
            return $"The rule name '{name}' is invalid: names starting with '$' are reserved.";
        }
        if (name.Any(c => char.IsControl(c) || c is '/' or '\\' or '?' or '#' or '%'))
        {
            return $"The rule name '{name}' is invalid: it may not contain control characters, '/', '\\', '?', '#' or '%'.";
        }
        return null;
    }

    private static string Describe(string what, RuleParseException e) =>
        e.Position > 0 ? $"{what} is invalid at position {e.Position}: {e.Message}" : $"{what} is invalid: {e.Message}";

    /// <summary>
    /// Application-property keys "sys.X" set system property X (only the ones a correlation filter
    /// matches; any other is rejected) and "user.X" name application property X.
    /// </summary>
    private static CorrelationFilter ToCorrelationFilter(WireCorrelationFilter wire)
    {
        var systemPairs = new List<KeyValuePair<string, string>>();
        var properties = new List<KeyValuePair<string, PropertyValue>>();
        foreach (var (key, value) in wire.ApplicationProperties)
        {
            if (key.StartsWith("sys.", StringComparison.OrdinalIgnoreCase))
            {
                if (value.KindCase != PropertyValue.KindOneofCase.StringValue)
                {
                    throw new RuleParseException($"'{key}' must be given a string value.", 0);
                }
                systemPairs.Add(new(key, value.StringValue));
            }
            else if (key.StartsWith("user.", StringComparison.OrdinalIgnoreCase))
            {
                properties.Add(new(key[5..], value));
            }
            else
            {
                properties.Add(new(key, value));
            }
        }
        var system = systemPairs.Count > 0 ? CorrelationFilter.FromPairs(systemPairs) : null;
        return new CorrelationFilter(
            correlationId: Pick(wire.HasCorrelationId, wire.CorrelationId, system?.CorrelationId),
            messageId: Pick(wire.HasMessageId, wire.MessageId, system?.MessageId),
            to: Pick(wire.HasTo, wire.To, system?.To),
            replyTo: Pick(wire.HasReplyTo, wire.ReplyTo, system?.ReplyTo),
            subject: Pick(wire.HasSubject, wire.Subject, system?.Subject),
            sessionId: Pick(wire.HasSessionId, wire.SessionId, system?.SessionId),
            replyToSessionId: Pick(wire.HasReplyToSessionId, wire.ReplyToSessionId, system?.ReplyToSessionId),
            contentType: Pick(wire.HasContentType, wire.ContentType, system?.ContentType),
            properties: properties);
    }

    private static string? Pick(bool set, string value, string? fromSystemKey) => set ? value : fromSystemKey;

    /// <summary>The rule as the wire shows it (for rule list): the stored definition, which is what was added.</summary>
    public static RuleProperties Describe(string definitionJson) => FromJson(definitionJson);
}
