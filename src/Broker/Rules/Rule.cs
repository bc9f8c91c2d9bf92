namespace Farm.Broker.Rules;

/// <summary>A named filter with an optional action, as a subscription holds them.</summary>
public sealed record Rule
{
    /// <summary>The rule every new subscription starts with (true filter, no action).</summary>
    public const string DefaultRuleName = "$Default";

    /// <summary>The application property Azure Service Bus stamps on a copy made by a rule's action.</summary>
    public const string RuleNameProperty = "RuleName";

    public Rule(string name, RuleFilter filter, SqlRuleAction? action = null)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        ArgumentNullException.ThrowIfNull(filter);
        Name = name;
        Filter = filter;
        Action = action;
    }

    public static Rule Default { get; } = new(DefaultRuleName, TrueFilter.Instance);

    public string Name { get; }

    public RuleFilter Filter { get; }

    public SqlRuleAction? Action { get; }
}
