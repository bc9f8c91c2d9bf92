using Farm.Broker.Rules;
using Farm.Contracts.V1;
using static Farm.Broker.Tests.Rules.RuleTestMessages;

namespace Farm.Broker.Tests.Rules;

/// <summary>
/// A subscription's rules together: a message that any rule matches arrives once; the actions of all
/// matching rules apply, in order, to that one copy.
/// </summary>
public sealed class RuleSetTests
{
    private static Rule Sql(string name, string filter, string? action = null) =>
        new(name, SqlFilter.Parse(filter), action is null ? null : SqlRuleAction.Parse(action));

    [Fact]
    public void DefaultRuleSet_DeliversEveryMessageOnceUnchanged()
    {
        var result = RuleSet.Default.Evaluate(Order());
        Assert.True(result.IsMatch);
        Assert.Null(result.Changed);
        Assert.Empty(result.AppliedActions);
        Assert.Equal(Rule.DefaultRuleName, Assert.Single(RuleSet.Default.Rules).Name);
    }

    [Fact]
    public void EmptyRuleSet_DeliversNothing()
    {
        var result = RuleSet.Empty.Evaluate(Order());
        Assert.False(result.IsMatch);
        Assert.Null(result.MessageFor(Order().Message));
    }

    [Fact]
    public void SeveralMatchingRulesWithoutActions_DeliverTheMessageOnce()
    {
        var rules = new RuleSet([
            Sql("red", "color = 'red'"),
            Sql("big", "quantity >= 10"),
            new Rule("corr", new CorrelationFilter(properties: [new("vip", Property(true))])),
        ]);
        var message = Order();

        var result = rules.Evaluate(message);

        Assert.True(result.IsMatch);
        Assert.Null(result.Changed);
        Assert.Same(message.Message, result.MessageFor(message.Message));
    }

    [Fact]
    public void NoMatchingRule_DeliversNothing()
    {
        var rules = new RuleSet([Sql("blue", "color = 'blue'"), Sql("small", "quantity < 5", "SET x = 1")]);
        Assert.False(rules.Evaluate(Order()).IsMatch);
    }

    [Fact]
    public void FiveMatchingRules_TwoWithActions_GiveOneMessage_WithBothActionsAppliedInOrder()
    {
        var rules = new RuleSet([
            Sql("a", "color = 'red'"),
            Sql("halve", "quantity > 1", "SET quantity = quantity / 2"),
            Sql("b", "EXISTS(vip)"),
            Sql("tag", "1 = 1", "SET tag = 'tagged'; REMOVE color; SET seen = quantity"),
            new Rule("c", TrueFilter.Instance),
        ]);
        var message = Order();

        var result = rules.Evaluate(message);

        Assert.True(result.IsMatch);
        Assert.Equal(["halve", "tag"], result.AppliedActions);
        var copy = Assert.IsType<Message>(result.Changed);
        Assert.Same(copy, result.MessageFor(message.Message));
        Assert.Equal(5, Value(copy, "quantity"));
        Assert.Equal("tagged", Value(copy, "tag"));
        Assert.False(copy.ApplicationProperties.ContainsKey("color"));
        // The second action sees what the first one did.
        Assert.Equal(5, Value(copy, "seen"));
        Assert.Equal("halve,tag", Value(copy, Rule.RuleNameProperty));

        // The message as sent is untouched: the subscription's copy is a copy.
        Assert.False(message.Message.ApplicationProperties.ContainsKey(Rule.RuleNameProperty));
        Assert.Equal(10, Value(message.Message, "quantity"));
        Assert.Equal("red", Value(message.Message, "color"));
    }

    [Fact]
    public void FiltersSeeTheMessageAsSent_NotAnEarlierActionsChanges()
    {
        var rules = new RuleSet([
            Sql("recolor", "color = 'red'", "SET color = 'blue'"),
            Sql("blue", "color = 'blue'", "SET matchedBlue = TRUE"),
        ]);

        var copy = rules.Evaluate(Order()).Changed!;

        Assert.Equal("blue", Value(copy, "color"));
        Assert.False(copy.ApplicationProperties.ContainsKey("matchedBlue"));
    }

    [Fact]
    public void OnlyARuleWithAnAction_Matching_DeliversItsCopy()
    {
        var rules = new RuleSet([Sql("blue", "color = 'blue'"), Sql("red", "color = 'red'", "SET sys.Label = 'red-orders'")]);

        var result = rules.Evaluate(WithSystemProperties().WithProperty("color", "red"));

        Assert.True(result.IsMatch);
        Assert.Equal("red-orders", result.Changed!.Subject);
        Assert.Equal("red", Value(result.Changed, Rule.RuleNameProperty));
    }

    [Fact]
    public void EvaluationError_NamesTheRuleThatFailed()
    {
        var rules = new RuleSet([Sql("fine", "color = 'blue'"), Sql("broken", "quantity / zero = 1")]);
        var error = Assert.Throws<RuleEvaluationException>(() => rules.Evaluate(Order()));
        Assert.Equal("broken", error.RuleName);
    }

    [Fact]
    public void EvaluationError_InAnAction_NamesTheRule()
    {
        var rules = new RuleSet([Sql("act", "1 = 1", "SET sys.TimeToLive = 'soon'")]);
        Assert.Equal("act", Assert.Throws<RuleEvaluationException>(() => rules.Evaluate(Order())).RuleName);
    }

    [Fact]
    public void ActionlessRules_AfterOneMatched_AreNotEvaluated()
    {
        // They are OR-ed: the first match decides, so a later failing filter cannot dead-letter the message.
        var rules = new RuleSet([Sql("red", "color = 'red'"), Sql("broken", "quantity / zero = 1")]);
        Assert.True(rules.Evaluate(Order()).IsMatch);
    }

    [Fact]
    public void RuleNames_MustBeUnique_IgnoringCase()
    {
        var error = Assert.Throws<ArgumentException>(() => new RuleSet([Sql("Red", "1=1"), Sql("red", "1=0")]));
        Assert.Contains("The rule name 'red' is already taken.", error.Message, StringComparison.Ordinal);
        Assert.Throws<ArgumentException>(() => RuleSet.Default.Add(new Rule("$default", FalseFilter.Instance)));
    }

    [Fact]
    public void AddAndRemove_MakeNewSets_AndLeaveTheOldOneAlone()
    {
        var withRed = RuleSet.Default.Add(Sql("red", "color = 'red'"));
        var withoutDefault = withRed.Remove(Rule.DefaultRuleName)!;

        Assert.Single(RuleSet.Default.Rules);
        Assert.Equal(["$Default", "red"], withRed.Rules.Select(r => r.Name));
        Assert.Equal(["red"], withoutDefault.Rules.Select(r => r.Name));
        Assert.True(withoutDefault.Contains("RED"));
        Assert.Null(withoutDefault.Remove("nope"));
        Assert.False(withoutDefault.Evaluate(With(("color", "blue"))).IsMatch);
        Assert.True(withoutDefault.Evaluate(Order()).IsMatch);
    }

    [Fact]
    public void Rule_RequiresANameAndAFilter()
    {
        Assert.Throws<ArgumentException>(() => new Rule("", TrueFilter.Instance));
        Assert.Throws<ArgumentNullException>(() => new Rule("a", null!));
    }

    [Fact]
    public void Evaluating_ActionlessRules_AllocatesNothing()
    {
        var rules = new RuleSet([Sql("blue", "color = 'blue'"), new Rule("corr", new CorrelationFilter(subject: "x")), Sql("red", "quantity = 10 AND color = 'red'")]);
        var message = Order();
        Assert.True(rules.Evaluate(message).IsMatch);

        var before = GC.GetAllocatedBytesForCurrentThread();
        for (var i = 0; i < 1000; i++)
        {
            rules.Evaluate(message);
        }
        Assert.Equal(0, GC.GetAllocatedBytesForCurrentThread() - before);
    }
}

internal static class RuleMessageTestExtensions
{
    public static RuleMessage WithProperty(this RuleMessage message, string name, object value)
    {
        message.Message.ApplicationProperties[name] = Property(value);
        return message;
    }
}
