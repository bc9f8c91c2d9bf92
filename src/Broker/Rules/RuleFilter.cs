namespace Farm.Broker.Rules;

/// <summary>The condition of a rule: SQL (<see cref="SqlFilter"/>, with <see cref="TrueFilter"/> and <see cref="FalseFilter"/>) or <see cref="CorrelationFilter"/>.</summary>
public abstract class RuleFilter
{
    private protected RuleFilter()
    {
    }

    /// <summary>
    /// Whether the rule selects the message. Throws <see cref="RuleEvaluationException"/> when the
    /// filter cannot be evaluated for this message (see <see cref="SqlFilter"/>).
    /// </summary>
    public abstract bool Matches(RuleMessage message);
}

/// <summary>
/// A filter in the Azure Service Bus SQL subset, parsed once by <see cref="Parse"/>.
/// <para>
/// It matches only when the expression is TRUE; FALSE and unknown do not match. Unknown comes
/// from a missing user property or NULL, and from comparing values that cannot be compared (a
/// string with a number, a number LIKE a pattern). Evaluation throws
/// <see cref="RuleEvaluationException"/> for arithmetic on types it does not apply to ('a' * 2,
/// TRUE + 1), integer division or modulo by zero, DateTime/TimeSpan results out of range, LIKE
/// with a non-string pattern or an escape that is not one character, and property(name) naming a
/// system property that does not exist. Unknown system properties, unknown functions and such
/// errors between constants are rejected when parsing.
/// </para>
/// </summary>
public class SqlFilter : RuleFilter
{
    private readonly PredicateNode _root;

    private protected SqlFilter(string sqlExpression, PredicateNode root)
    {
        SqlExpression = sqlExpression;
        _root = root;
    }

    public string SqlExpression { get; }

    /// <summary>Throws <see cref="RuleParseException"/> naming the position of the first problem.</summary>
    public static SqlFilter Parse(string sqlExpression)
    {
        ArgumentNullException.ThrowIfNull(sqlExpression);
        // Azure's TrueFilter and FalseFilter are the SQL filters 1=1 and 1=0.
        var compact = string.Concat(sqlExpression.Where(c => !char.IsWhiteSpace(c)));
        if (compact == "1=1")
        {
            return TrueFilter.Instance;
        }
        if (compact == "1=0")
        {
            return FalseFilter.Instance;
        }
        return new SqlFilter(sqlExpression, SqlParser.ParseFilter(sqlExpression));
    }

    public override bool Matches(RuleMessage message) => _root.Evaluate(message) == Tri.True;

    /// <summary>The three-valued result: null is unknown.</summary>
    public bool? Evaluate(RuleMessage message) => _root.Evaluate(message) switch
    {
        Tri.True => true,
        Tri.False => false,
        _ => null,
    };

    public override string ToString() => SqlExpression;
}

/// <summary>Selects every message; the filter of the <c>$Default</c> rule.</summary>
public sealed class TrueFilter : SqlFilter
{
    public static TrueFilter Instance { get; } = new();

    private TrueFilter()
        : base("1=1", new ConstantPredicateNode(1, Tri.True))
    {
    }

    public override bool Matches(RuleMessage message) => true;
}

/// <summary>Selects no message.</summary>
public sealed class FalseFilter : SqlFilter
{
    public static FalseFilter Instance { get; } = new();

    private FalseFilter()
        : base("1=0", new ConstantPredicateNode(1, Tri.False))
    {
    }

    public override bool Matches(RuleMessage message) => false;
}
