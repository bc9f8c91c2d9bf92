using System.Collections.Immutable;
using Farm.Contracts.V1;

namespace Farm.Broker.Rules;

/// <summary>
/// The rules of one subscription, immutable: adding or removing a rule makes a new set, so a
/// fan-out in progress keeps evaluating the set it started with.
/// <para>
/// A message reaches the subscription <b>once</b> when at least one rule's filter matches it, however
/// many do (the rule; Azure Service Bus instead makes one copy per matching rule that has an
/// action). Every filter sees the message as sent. The actions of all matching rules apply, in rule
/// order, to that one copy, each to the result of the one before, and the copy carries the
/// application property <c>RuleName</c>: the names of the rules whose actions changed it, joined by
/// ','. With no matching action the subscription gets the message unchanged.
/// </para>
/// </summary>
public sealed class RuleSet
{
    private readonly Rule[] _rules;

    // Set when an action-less rule with the true filter is present and no rule has an action: every
    // message is delivered unchanged without evaluating anything (the $Default-only subscription).
    private readonly bool _alwaysDeliversOriginal;
    private readonly bool _hasActions;

    public RuleSet(IEnumerable<Rule> rules)
    {
        ArgumentNullException.ThrowIfNull(rules);
        var list = rules.ToArray();
        var names = new HashSet<string>(StringComparer.OrdinalIgnoreCase);
        foreach (var rule in list)
        {
            ArgumentNullException.ThrowIfNull(rule, nameof(rules));
            if (!names.Add(rule.Name))
            {
                throw new ArgumentException($"The rule name '{rule.Name}' is already taken.", nameof(rules));
            }
        }
        _rules = list;
        Rules = ImmutableArray.Create(list);
        _alwaysDeliversOriginal = list.Any(r => r.Action is null && r.Filter is TrueFilter);
        _hasActions = list.Any(r => r.Action is not null);
    }

    /// <summary>A new subscription's rules: just <c>$Default</c>.</summary>
    public static RuleSet Default { get; } = new([Rule.Default]);

    public static RuleSet Empty { get; } = new([]);

    public ImmutableArray<Rule> Rules { get; }

    /// <summary>Rule names are case-insensitive, like entity names.</summary>
    public bool Contains(string name) => Array.Exists(_rules, r => string.Equals(r.Name, name, StringComparison.OrdinalIgnoreCase));

    /// <summary>Throws <see cref="ArgumentException"/> if the name is taken.</summary>
    public RuleSet Add(Rule rule) => new([.. _rules, rule]);

    /// <summary>Null when no rule has that name.</summary>
    public RuleSet? Remove(string name) => Contains(name)
        ? new(_rules.Where(r => !string.Equals(r.Name, name, StringComparison.OrdinalIgnoreCase)))
        : null;

    /// <summary>
    /// Evaluates the rules against the message, in order. Allocates nothing unless an action
    /// matches. Throws <see cref="RuleEvaluationException"/> (with <see cref="RuleEvaluationException.RuleName"/>)
    /// when a rule cannot be evaluated, which the subscription turns into dead-lettering or dropping
    /// the message per its "dead-lettering on filter evaluation exceptions" setting.
    /// </summary>
    public RuleSetResult Evaluate(RuleMessage message)
    {
        ArgumentNullException.ThrowIfNull(message);
        if (_alwaysDeliversOriginal && !_hasActions)
        {
            return new RuleSetResult(true, null, null);
        }
        var matched = _alwaysDeliversOriginal;
        RuleMessage? changed = null;
        List<string>? applied = null;
        foreach (var rule in _rules)
        {
            // Once something matched, an action-less rule cannot add anything.
            if (rule.Action is null && matched)
            {
                continue;
            }
            try
            {
                if (!rule.Filter.Matches(message))
                {
                    continue;
                }
                matched = true;
                if (rule.Action is not null)
                {
                    changed = message.WithMessage(rule.Action.Apply(changed ?? message));
                    (applied ??= []).Add(rule.Name);
                }
            }
            catch (RuleEvaluationException e)
            {
                e.RuleName ??= rule.Name;
                throw;
            }
        }
        if (changed is null)
        {
            return new RuleSetResult(matched, null, null);
        }
        var copy = changed.Message;
        copy.ApplicationProperties[Rule.RuleNameProperty] = new PropertyValue { StringValue = string.Join(',', applied!) };
        return new RuleSetResult(true, copy, applied);
    }
}

/// <summary>What one message gives one subscription; see <see cref="RuleSet"/>.</summary>
public readonly struct RuleSetResult
{
    internal RuleSetResult(bool isMatch, Message? changed, IReadOnlyList<string>? appliedActions)
    {
        IsMatch = isMatch;
        Changed = changed;
        AppliedActions = appliedActions ?? [];
    }

    /// <summary>At least one rule matched: the subscription gets the message, once.</summary>
    public bool IsMatch { get; }

    /// <summary>The copy the matching rules' actions made; null when the message goes unchanged.</summary>
    public Message? Changed { get; }

    /// <summary>The names of the rules whose actions were applied, in order.</summary>
    public IReadOnlyList<string> AppliedActions { get; }

    /// <summary>What the subscription stores: the changed copy, or the message as sent; null when nothing matched.</summary>
    public Message? MessageFor(Message original) => IsMatch ? Changed ?? original : null;
}
