using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Tests;

/// <summary>Bad rules, subscription settings and paths are refused with a message naming what is wrong.</summary>
public sealed class TopicValidationTests
{
    private static BrokerException Refused(Action action)
    {
        var error = Assert.Throws<BrokerException>(action);
        Assert.Equal(FarmErrorCode.InvalidArgument, error.Code);
        return error;
    }

    [Theory]
    [InlineData("color = 'red' AND", 18)]
    [InlineData("color = = 'red'", 9)]
    [InlineData("quantity > 10 OR (size < 3", 27)]
    [InlineData("sys.NoSuchProperty = 1", 1)]
    public void AMalformedSqlFilter_IsRefused_NamingThePosition(string expression, int position)
    {
        var error = Refused(() => RuleDefinitions.Parse(new RuleProperties { Name = "r", SqlFilter = new Contracts.V1.SqlFilter { Expression = expression } }));
        Assert.Contains($"The SQL filter of rule 'r' is invalid at position {position}", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void AMalformedAction_IsRefused_NamingThePosition()
    {
        var error = Refused(() => RuleDefinitions.Parse(new RuleProperties { Name = "r", SqlAction = "SET = 1" }));
        Assert.Contains("The action of rule 'r' is invalid at position 5", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void ACorrelationFilter_NamingASystemPropertyThatDoesNotExist_IsRefused()
    {
        var filter = new Contracts.V1.CorrelationFilter();
        filter.ApplicationProperties["sys.Colour"] = new PropertyValue { StringValue = "red" };

        var error = Refused(() => RuleDefinitions.Parse(new RuleProperties { Name = "r", CorrelationFilter = filter }));

        Assert.Contains("'sys.Colour' is not a system property", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void ACorrelationFilter_MaySetSystemPropertiesBySysKeys_AndApplicationPropertiesByUserKeys()
    {
        var filter = new Contracts.V1.CorrelationFilter();
        filter.ApplicationProperties["sys.CorrelationId"] = new PropertyValue { StringValue = "c-1" };
        filter.ApplicationProperties["user.region"] = new PropertyValue { StringValue = "eu" };

        var rule = RuleDefinitions.Parse(new RuleProperties { Name = "r", CorrelationFilter = filter });

        var correlation = Assert.IsType<CorrelationFilter>(rule.Filter);
        Assert.Equal("c-1", correlation.CorrelationId);
        Assert.Equal("eu", correlation.Properties["region"].StringValue);
    }

    [Theory]
    [InlineData("")]
    [InlineData("$mine")]
    [InlineData("a/b")]
    public void BadRuleNames_AreRefused(string name)
    {
        Refused(() => RuleDefinitions.Parse(new RuleProperties { Name = name }));
    }

    [Fact]
    public void RulesRoundTripThroughTheirStoredForm()
    {
        var rule = new RuleProperties { Name = "r", SqlFilter = new Contracts.V1.SqlFilter { Expression = "a = 1" }, SqlAction = "SET b = 2" };
        Assert.Equal(rule, RuleDefinitions.FromJson(RuleDefinitions.ToJson(rule)));
        Assert.Equal(RuleDefinitions.DefaultRule, RuleDefinitions.FromJson(RuleDefinitions.ToJson(RuleDefinitions.DefaultRule)));
    }

    [Theory]
    [InlineData("orders/Subscriptions/audit", "ForwardTo cannot name the subscription 'orders/Subscriptions/audit' itself.")]
    [InlineData("ORDERS/subscriptions/AUDIT", "ForwardTo cannot name the subscription 'orders/Subscriptions/audit' itself.")]
    [InlineData("orders", "ForwardTo cannot name the subscription's own topic 'orders'")]
    [InlineData("other/Subscriptions/x", "ForwardTo must name a queue or a topic")]
    public void ASubscriptionThatForwardsToItself_OrIntoALoop_IsRefused(string target, string expected)
    {
        var error = Refused(() => new SubscriptionSettings().With(new SubscriptionProperties { ForwardTo = target }, "orders", "audit"));
        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void SubscriptionSettings_ApplyAPatch_AndKeepTheRest()
    {
        var settings = new SubscriptionSettings().With(new SubscriptionProperties
        {
            LockDuration = Duration.FromTimeSpan(TimeSpan.FromSeconds(20)),
            DeadLetteringOnFilterEvaluationExceptions = false,
            ForwardTo = "audit-queue",
        }, "orders", "audit");
        var cleared = settings.With(new SubscriptionProperties { ForwardTo = "" }, "orders", "audit");

        Assert.Equal(TimeSpan.FromSeconds(20), settings.LockDuration);
        Assert.False(settings.DeadLetteringOnFilterEvaluationExceptions);
        Assert.Equal("audit-queue", settings.ForwardTo);
        Assert.Null(cleared.ForwardTo);
        Assert.Equal(TimeSpan.FromSeconds(20), cleared.LockDuration);
        Assert.Equal(settings, SubscriptionSettings.FromJson(settings.ToJson()));
    }

    [Fact]
    public void TopicSettings_SupportOrderingIsOffByDefault_AndCanBeTurnedOn()
    {
        Assert.False(new TopicSettings().SupportOrdering);
        var on = new TopicSettings().With(new TopicProperties { SupportOrdering = true });
        Assert.True(on.SupportOrdering);
        Assert.True(TopicSettings.FromJson(on.ToJson()).SupportOrdering);
        Refused(() => new TopicSettings().With(new TopicProperties { MaxSizeInMegabytes = 0 }));
    }

    [Theory]
    [InlineData("orders/Subscriptions/audit", "orders/Subscriptions/audit", false)]
    [InlineData("orders/subscriptions/audit/$DeadLetterQueue", "orders/Subscriptions/audit", true)]
    [InlineData("orders", "orders", false)]
    public void SubscriptionPaths_Parse(string path, string name, bool deadLetter)
    {
        Assert.True(EntityNames.TryParsePath(path, out var parsed, out var isDeadLetter, out var error), error);
        Assert.Equal(name, parsed);
        Assert.Equal(deadLetter, isDeadLetter);
    }

    [Theory]
    [InlineData("orders/Subscriptions/")]
    [InlineData("orders/Subscriptions/a b")]
    [InlineData("/Subscriptions/audit")]
    [InlineData("orders/Subscriptions/this-name-is-far-too-long-for-a-subscription-name-really")]
    public void BadSubscriptionPaths_AreRefused(string path)
    {
        Assert.False(EntityNames.TryParsePath(path, out _, out _, out var error));
        Assert.Contains("subscription path", error, StringComparison.Ordinal);
    }
}
