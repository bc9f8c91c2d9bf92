using System.Globalization;
using System.Text;

namespace Farm.Client;

/// <summary>Which messages a subscription rule selects, like Azure's RuleFilter.</summary>
public abstract class RuleFilter
{
    private protected RuleFilter()
    {
    }
}

/// <summary>
/// A condition in the Azure Service Bus SQL subset, e.g. <c>color = 'red' AND user.quantity > 10</c>.
/// The farm parses it when the rule is created and refuses a malformed one, naming the position.
/// </summary>
public class SqlRuleFilter : RuleFilter
{
    public SqlRuleFilter(string sqlExpression)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(sqlExpression);
        SqlExpression = sqlExpression;
    }

    public string SqlExpression { get; }

    public override string ToString() => SqlExpression;
}

/// <summary>Selects every message: the filter of a subscription's <c>$Default</c> rule.</summary>
public sealed class TrueRuleFilter : SqlRuleFilter
{
    public TrueRuleFilter()
        : base("1=1")
    {
    }
}

/// <summary>Selects no message.</summary>
public sealed class FalseRuleFilter : SqlRuleFilter
{
    public FalseRuleFilter()
        : base("1=0")
    {
    }
}

/// <summary>
/// Selects messages whose set properties all equal the filter's (exact and case-sensitive), as in
/// Azure Service Bus. Cheaper for the farm to evaluate than a SQL filter.
/// </summary>
public sealed class CorrelationRuleFilter : RuleFilter
{
    public CorrelationRuleFilter()
    {
    }

    public CorrelationRuleFilter(string correlationId)
    {
        ArgumentException.ThrowIfNullOrEmpty(correlationId);
        CorrelationId = correlationId;
    }

    public string? CorrelationId { get; set; }

    public string? MessageId { get; set; }

    public string? To { get; set; }

    public string? ReplyTo { get; set; }

    /// <summary>Label in Azure's older SDKs.</summary>
    public string? Subject { get; set; }

    public string? SessionId { get; set; }

    public string? ReplyToSessionId { get; set; }

    public string? ContentType { get; set; }

    /// <summary>
    /// Application properties to match: the values take the same types as a message's
    /// (string, int, long, double, bool, byte[], DateTimeOffset, TimeSpan, Guid), and a value
    /// matches only one of the same kind (the string "10" does not equal the number 10).
    /// </summary>
    public IDictionary<string, object?> ApplicationProperties { get; } = new Dictionary<string, object?>(StringComparer.Ordinal);

    /// <summary>The conditions as SQL-like text, e.g. <c>sys.CorrelationId = 'abc' AND color = 'red'</c>.</summary>
    public override string ToString()
    {
        var parts = new List<string>();
        void Part(string name, string? value)
        {
            if (value is not null)
            {
                parts.Add($"sys.{name} = {Quote(value)}");
            }
        }

        Part(nameof(CorrelationId), CorrelationId);
        Part(nameof(MessageId), MessageId);
        Part(nameof(To), To);
        Part(nameof(ReplyTo), ReplyTo);
        Part(nameof(Subject), Subject);
        Part(nameof(SessionId), SessionId);
        Part(nameof(ReplyToSessionId), ReplyToSessionId);
        Part(nameof(ContentType), ContentType);
        foreach (var (name, value) in ApplicationProperties.OrderBy(p => p.Key, StringComparer.Ordinal))
        {
            parts.Add($"{name} = {Literal(value)}");
        }

        return parts.Count == 0 ? "(no conditions)" : string.Join(" AND ", parts);
    }

    private static string Quote(string value) => "'" + value.Replace("'", "''", StringComparison.Ordinal) + "'";

    private static string Literal(object? value) => value switch
    {
        null => "NULL",
        string s => Quote(s),
        bool b => b ? "TRUE" : "FALSE",
        byte[] bytes => "0x" + Convert.ToHexString(bytes),
        DateTimeOffset dto => Quote(dto.ToString("O", CultureInfo.InvariantCulture)),
        DateTime dt => Quote(dt.ToString("O", CultureInfo.InvariantCulture)),
        TimeSpan ts => Quote(ts.ToString("c", CultureInfo.InvariantCulture)),
        Guid g => Quote(g.ToString("D")),
        IFormattable f => f.ToString(null, CultureInfo.InvariantCulture),
        _ => Quote(value.ToString() ?? string.Empty),
    };
}

/// <summary>What a rule does to the messages it selects, like Azure's RuleAction.</summary>
public abstract class RuleAction
{
    private protected RuleAction()
    {
    }
}

/// <summary>A SQL rule action, e.g. <c>SET priority = 'high'; REMOVE temp</c>, applied to the subscription's copy.</summary>
public sealed class SqlRuleAction : RuleAction
{
    public SqlRuleAction(string sqlExpression)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(sqlExpression);
        SqlExpression = sqlExpression;
    }

    public string SqlExpression { get; }

    public override string ToString() => SqlExpression;
}
