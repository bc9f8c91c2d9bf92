using Farm.Contracts.V1;

namespace Farm.Broker.Rules;

/// <summary>
/// Matches when every condition it sets holds: each set system property equals the message's
/// (ordinal, case-sensitive), and each application property exists on the message with an equal
/// value. Equality is typed like SQL '=': the string "10" does not equal the number 10, while the
/// int 10 equals the long 10 and the double 10.0. Property names are looked up case-insensitively,
/// as in SQL filters.
/// </summary>
public sealed class CorrelationFilter : RuleFilter
{
    /// <summary>The system properties a correlation filter can match (Azure's list; Subject is Label).</summary>
    private static readonly string[] SystemFieldNames =
        ["CorrelationId", "MessageId", "To", "ReplyTo", "Label", "Subject", "SessionId", "ReplyToSessionId", "ContentType"];

    private readonly (Func<Message, string> Read, string Expected)[] _systemConditions;
    private readonly (string Name, SqlValue Expected)[] _propertyConditions;

    public CorrelationFilter(
        string? correlationId = null,
        string? messageId = null,
        string? to = null,
        string? replyTo = null,
        string? subject = null,
        string? sessionId = null,
        string? replyToSessionId = null,
        string? contentType = null,
        IEnumerable<KeyValuePair<string, PropertyValue>>? properties = null)
    {
        // Proto3 strings cannot be null: an empty condition would be one no message can meet, so
        // empty means "not set" here as it does on the message.
        CorrelationId = NullIfEmpty(correlationId);
        MessageId = NullIfEmpty(messageId);
        To = NullIfEmpty(to);
        ReplyTo = NullIfEmpty(replyTo);
        Subject = NullIfEmpty(subject);
        SessionId = NullIfEmpty(sessionId);
        ReplyToSessionId = NullIfEmpty(replyToSessionId);
        ContentType = NullIfEmpty(contentType);

        var byName = new Dictionary<string, PropertyValue>(StringComparer.OrdinalIgnoreCase);
        foreach (var (name, value) in properties ?? [])
        {
            if (string.IsNullOrEmpty(name))
            {
                throw new RuleParseException("A correlation filter property needs a name.", 0);
            }
            if (value is null || value.KindCase == PropertyValue.KindOneofCase.None)
            {
                throw new RuleParseException($"The correlation filter property '{name}' needs a value.", 0);
            }
            if (!byName.TryAdd(name, value))
            {
                throw new RuleParseException($"The correlation filter names the property '{name}' twice.", 0);
            }
        }
        Properties = byName;

        var system = new List<(Func<Message, string>, string)>();
        Add(system, CorrelationId, m => m.CorrelationId);
        Add(system, MessageId, m => m.MessageId);
        Add(system, To, m => m.To);
        Add(system, ReplyTo, m => m.ReplyTo);
        Add(system, Subject, m => m.Subject);
        Add(system, SessionId, m => m.SessionId);
        Add(system, ReplyToSessionId, m => m.ReplyToSessionId);
        Add(system, ContentType, m => m.ContentType);
        _systemConditions = [.. system];
        _propertyConditions = [.. byName.Select(p => (p.Key, SqlValue.FromProperty(p.Value)))];
        if (_systemConditions.Length == 0 && _propertyConditions.Length == 0)
        {
            throw new RuleParseException("A correlation filter needs at least one system or application property to match.", 0);
        }
    }

    public string? CorrelationId { get; }
    public string? MessageId { get; }
    public string? To { get; }
    public string? ReplyTo { get; }

    /// <summary>Label in Azure's older SDKs.</summary>
    public string? Subject { get; }
    public string? SessionId { get; }
    public string? ReplyToSessionId { get; }
    public string? ContentType { get; }

    /// <summary>The application properties to match, by name (case-insensitive).</summary>
    public IReadOnlyDictionary<string, PropertyValue> Properties { get; }

    /// <summary>
    /// Builds a filter from text pairs such as the CLI's <c>--correlation-filter k=v</c>:
    /// <c>sys.X</c> and the bare names of the matchable system properties (CorrelationId,
    /// MessageId, To, ReplyTo, Label/Subject, SessionId, ReplyToSessionId, ContentType; any case) set
    /// those; <c>user.X</c> and every other name is an application property with a string value.
    /// Throws <see cref="RuleParseException"/> (Position 0) for a <c>sys.</c> name that is not a
    /// system property or one a correlation filter cannot match, a property given twice, or no pairs.
    /// </summary>
    public static CorrelationFilter FromPairs(IEnumerable<KeyValuePair<string, string>> pairs)
    {
        ArgumentNullException.ThrowIfNull(pairs);
        var system = new Dictionary<string, string>(StringComparer.OrdinalIgnoreCase);
        var properties = new List<KeyValuePair<string, PropertyValue>>();
        foreach (var (key, value) in pairs)
        {
            if (string.IsNullOrEmpty(key))
            {
                throw new RuleParseException("A correlation filter pair needs a name before '='.", 0);
            }
            string? field = null;
            if (key.StartsWith("sys.", StringComparison.OrdinalIgnoreCase))
            {
                var name = key[4..];
                field = Array.Find(SystemFieldNames, f => f.Equals(name, StringComparison.OrdinalIgnoreCase));
                if (field is null)
                {
                    throw SystemProperty.TryFind(name, out var known)
                        ? new RuleParseException(
                            $"sys.{known.Name} cannot be matched by a correlation filter; it matches sys.{string.Join(", sys.", SystemFieldNames)} and application properties. Use a SQL filter instead.", 0)
                        : new RuleParseException(
                            $"'{key}' is not a system property; a correlation filter matches sys.{string.Join(", sys.", SystemFieldNames)} and application properties.", 0);
                }
            }
            else if (key.StartsWith("user.", StringComparison.OrdinalIgnoreCase))
            {
                properties.Add(new(key[5..], new PropertyValue { StringValue = value ?? "" }));
                continue;
            }
            else
            {
                field = Array.Find(SystemFieldNames, f => f.Equals(key, StringComparison.OrdinalIgnoreCase));
            }
            if (field is null)
            {
                properties.Add(new(key, new PropertyValue { StringValue = value ?? "" }));
                continue;
            }
            if (field == "Label")
            {
                field = "Subject";
            }
            if (!system.TryAdd(field, value ?? ""))
            {
                throw new RuleParseException($"The correlation filter sets {field} twice.", 0);
            }
        }
        return new CorrelationFilter(
            correlationId: system.GetValueOrDefault("CorrelationId"),
            messageId: system.GetValueOrDefault("MessageId"),
            to: system.GetValueOrDefault("To"),
            replyTo: system.GetValueOrDefault("ReplyTo"),
            subject: system.GetValueOrDefault("Subject"),
            sessionId: system.GetValueOrDefault("SessionId"),
            replyToSessionId: system.GetValueOrDefault("ReplyToSessionId"),
            contentType: system.GetValueOrDefault("ContentType"),
            properties: properties);
    }

    public override bool Matches(RuleMessage message)
    {
        ArgumentNullException.ThrowIfNull(message);
        var wire = message.Message;
        foreach (var (read, expected) in _systemConditions)
        {
            if (!string.Equals(read(wire), expected, StringComparison.Ordinal))
            {
                return false;
            }
        }
        foreach (var (name, expected) in _propertyConditions)
        {
            if (!message.TryGetUserProperty(name, out var actual)
                || SqlOperators.Equal(SqlValue.FromProperty(actual), expected) != Tri.True)
            {
                return false;
            }
        }
        return true;
    }

    /// <summary>The equivalent SQL filter text, for display.</summary>
    public override string ToString()
    {
        var parts = new List<string>();
        void Part(string name, string? value)
        {
            if (value is not null)
            {
                parts.Add($"sys.{name} = {SqlValue.FromString(value)}");
            }
        }
        Part("CorrelationId", CorrelationId);
        Part("MessageId", MessageId);
        Part("To", To);
        Part("ReplyTo", ReplyTo);
        Part("Label", Subject);
        Part("SessionId", SessionId);
        Part("ReplyToSessionId", ReplyToSessionId);
        Part("ContentType", ContentType);
        foreach (var (name, value) in _propertyConditions)
        {
            parts.Add($"[{name.Replace("]", "]]", StringComparison.Ordinal)}] = {value}");
        }
        return string.Join(" AND ", parts);
    }

    private static string? NullIfEmpty(string? value) => string.IsNullOrEmpty(value) ? null : value;

    private static void Add(List<(Func<Message, string>, string)> conditions, string? expected, Func<Message, string> read)
    {
        if (expected is not null)
        {
            conditions.Add((read, expected));
        }
    }
}
