namespace Farm.Broker.Rules;

/// <summary>
/// A SQL filter, SQL rule action or correlation filter that cannot be accepted. Thrown when the
/// rule is added, never while messages flow.
/// </summary>
public sealed class RuleParseException : FormatException
{
    public RuleParseException(string message, int position)
        : base(message)
    {
        Position = position;
    }

    /// <summary>1-based index of the character where the problem starts; 0 when it has no place in the text.</summary>
    public int Position { get; }
}

/// <summary>
/// A rule could not be evaluated against one message: an arithmetic operator on operands it does
/// not apply to, an integer division by zero, a non-string LIKE pattern, a system property of the
/// wrong type in an action. Azure Service Bus reports these as filter evaluation exceptions, which a
/// subscription can dead-letter ("dead-lettering on filter evaluation exceptions").
/// </summary>
public sealed class RuleEvaluationException : Exception
{
    public RuleEvaluationException(string message)
        : base(message)
    {
    }

    public RuleEvaluationException(string message, Exception innerException)
        : base(message, innerException)
    {
    }

    /// <summary>The rule that failed, filled in by <see cref="RuleSet.Evaluate"/>.</summary>
    public string? RuleName { get; internal set; }
}
