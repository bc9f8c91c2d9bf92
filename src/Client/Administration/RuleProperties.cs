namespace Farm.Client;

/// <summary>A rule to add to a subscription, like Azure's CreateRuleOptions.</summary>
public sealed class CreateRuleOptions
{
    private string _name = RuleProperties.DefaultRuleName;
    private RuleFilter _filter = new TrueRuleFilter();

    /// <summary>The <c>$Default</c> rule: the true filter, no action.</summary>
    public CreateRuleOptions()
    {
    }

    /// <param name="name">The rule's name, unique within its subscription.</param>
    /// <param name="filter">Which messages it selects; null: every message (<see cref="TrueRuleFilter"/>).</param>
    public CreateRuleOptions(string name, RuleFilter? filter = null)
    {
        Name = name;
        Filter = filter ?? new TrueRuleFilter();
    }

    public string Name
    {
        get => _name;
        set
        {
            ArgumentException.ThrowIfNullOrWhiteSpace(value);
            _name = value;
        }
    }

    public RuleFilter Filter
    {
        get => _filter;
        set => _filter = value ?? throw new ArgumentNullException(nameof(value));
    }

    /// <summary>Optional: changes the properties of the subscription's copy of each selected message.</summary>
    public RuleAction? Action { get; set; }
}

/// <summary>A subscription's rule as the farm reports it, like Azure's RuleProperties.</summary>
public sealed class RuleProperties
{
    /// <summary>The name of the rule every new subscription gets unless it is created with another.</summary>
    public const string DefaultRuleName = "$Default";

    internal RuleProperties(string topicName, string subscriptionName, string name, RuleFilter filter, RuleAction? action)
    {
        TopicName = topicName;
        SubscriptionName = subscriptionName;
        Name = name;
        Filter = filter;
        Action = action;
    }

    public string TopicName { get; }

    public string SubscriptionName { get; }

    public string Name { get; }

    /// <summary>Settable, as in Azure: change it and pass the rule to <c>UpdateRuleAsync</c>.</summary>
    public RuleFilter Filter { get; set; }

    public RuleAction? Action { get; set; }

    public DateTimeOffset CreatedAt { get; internal init; }
}
