using Farm.Contracts.V1;

namespace Farm.Broker.Rules;

/// <summary>
/// An Azure Service Bus SQL rule action: SET and REMOVE statements on user properties and on the
/// system properties a sender may set (MessageId, CorrelationId, SessionId, Label/Subject,
/// ContentType, To, ReplyTo, ReplyToSessionId, TimeToLive, ScheduledEnqueueTimeUtc). Parsed once by
/// <see cref="Parse"/>; read-only system properties are rejected there.
/// </summary>
public sealed class SqlRuleAction
{
    private readonly ActionStatement[] _statements;

    private SqlRuleAction(string sqlExpression, ActionStatement[] statements)
    {
        SqlExpression = sqlExpression;
        _statements = statements;
    }

    public string SqlExpression { get; }

    /// <summary>Throws <see cref="RuleParseException"/> naming the position of the first problem.</summary>
    public static SqlRuleAction Parse(string sqlExpression)
    {
        ArgumentNullException.ThrowIfNull(sqlExpression);
        return new SqlRuleAction(sqlExpression, SqlParser.ParseAction(sqlExpression));
    }

    /// <summary>
    /// Runs the statements in order on a copy of the message and returns the copy; the input is not
    /// changed. A missing user property reads as NULL (so <c>SET b = a + 1</c> with no <c>a</c> sets
    /// <c>b</c> to a property without a value). Throws <see cref="RuleEvaluationException"/> as a
    /// <see cref="SqlFilter"/> does, and when a system property is set to a value of the wrong type.
    /// </summary>
    public Message Apply(RuleMessage message)
    {
        ArgumentNullException.ThrowIfNull(message);
        var copy = message.Message.Clone();
        var target = message.WithMessage(copy);
        foreach (var statement in _statements)
        {
            statement.Execute(target);
        }
        return copy;
    }

    public override string ToString() => SqlExpression;
}
