using System.Collections.Immutable;
using Farm.Contracts.V1;

namespace Farm.Broker.Rules;

/// <summary>
/// The rules of one subscription, immutable: adding or removing a rule makes a new set, so a
/// fan-out in progress keeps evaluating the set it started with.
/// <para>
/// What a message produces on the subscription follows Azure Service Bus ("Topic filters and
/// actions"): all matching rules <i>without</i> an action are OR-ed together and give the message
/// once, unchanged; each matching rule <i>with</i> an action gives its own copy, changed by that
/// action and stamped with the application property <c>RuleName</c> = the rule's name. So a message
/// matching five rules, two of them with actions, arrives three times. A message that several
/// action-less rules match still arrives once, which is the issue's "reaches a subscription once
/// even if several rules match".
/// </para>
/// </summary>
public sealed class RuleSet
{
    private readonly Rule[] _rules;

    // Set when an action-less rule with the true filter is present: every message is delivered
    // unchanged without evaluating the other action-less rules (the $Default-only subscription).
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
    /// Evaluates every rule against the message, in order. Allocates nothing unless an action
    /// matches. Throws <see cref="RuleEvaluationException"/> (with <see cref="RuleEvaluationException.RuleName"/>)
    /// when a rule cannot be evaluated, which the subscription turns into dead-lettering or dropping
    /// the message per its "dead-lettering on filter evaluation exceptions" setting.
    /// </summary>
    public RuleSetResult Evaluate(RuleMessage message)
    {
        ArgumentNullException.ThrowIfNull(message);
        if (_alwaysDeliversOriginal && !_hasActions)
        {
            return new RuleSetResult(true, []);
        }
        var original = _alwaysDeliversOriginal;
        List<RuleDelivery>? copies = null;
        foreach (var rule in _rules)
        {
            // Action-less rules are OR-ed: once one matched, the others cannot add anything.
            if (rule.Action is null && original)
            {
                continue;
            }
            try
            {
                if (!rule.Filter.Matches(message))
                {
                    continue;
                }
                if (rule.Action is null)
                {
                    original = true;
                    continue;
                }
                var copy = rule.Action.Apply(message);
                copy.ApplicationProperties[Rule.RuleNameProperty] = new PropertyValue { StringValue = rule.Name };
                (copies ??= []).Add(new RuleDelivery(rule.Name, copy));
            }
            catch (RuleEvaluationException e)
            {
                e.RuleName ??= rule.Name;
                throw;
            }
        }
        return new RuleSetResult(original, copies is null ? [] : [.. copies]);
    }
}

/// <summary>A copy of a message made by the action of the rule named <paramref name="RuleName"/>.</summary>
public readonly record struct RuleDelivery(string RuleName, Message Message);

/// <summary>What one message gives one subscription; see <see cref="RuleSet"/>.</summary>
public readonly struct RuleSetResult
{
    private readonly RuleDelivery[]? _actionCopies;

    internal RuleSetResult(bool deliversOriginal, RuleDelivery[] actionCopies)
    {
        DeliversOriginal = deliversOriginal;
        _actionCopies = actionCopies;
    }

    /// <summary>A rule without an action matched: the subscription gets the message as sent, once.</summary>
    public bool DeliversOriginal { get; }

    /// <summary>One copy per matching rule with an action, in rule order; empty when none matched.</summary>
    public IReadOnlyList<RuleDelivery> ActionCopies => _actionCopies ?? [];

    public bool IsMatch => DeliversOriginal || ActionCopies.Count > 0;

    /// <summary>How many messages the subscription gets.</summary>
    public int DeliveryCount => (DeliversOriginal ? 1 : 0) + ActionCopies.Count;

    /// <summary>The messages to store on the subscription: the original (if delivered) first, then the action copies.</summary>
    public IEnumerable<Message> Messages(Message original)
    {
        if (DeliversOriginal)
        {
            yield return original;
        }
        foreach (var copy in ActionCopies)
        {
            yield return copy.Message;
        }
    }
}
