using System.CommandLine;
using Farm.Cli.Entities;
using Farm.Client;

namespace Farm.Cli.Tests;

/// <summary>The entity commands' options, parsed as the real command line would be.</summary>
public class EntityOptionTests
{
    private static (Command Command, PropertyOptions<T> Options) CommandWith<T>(Func<PropertyOptions<T>> create)
    {
        var options = create();
        var command = new Command("test");
        options.AddTo(command);
        return (command, options);
    }

    [Fact]
    public void TopicUpdate_SupportOrderingFalse_IsAnExplicitChange()
    {
        var (command, options) = CommandWith(TopicPropertyOptions.Create);
        var topic = new TopicProperties("t");

        var count = options.ApplyTo(command.Parse("--support-ordering false"), topic);

        Assert.Equal(1, count);
        Assert.False(topic.SupportOrdering);
        Assert.True(topic.IsAssigned(nameof(TopicSettings.SupportOrdering)));
    }

    [Fact]
    public void TopicOptions_MapToTheirProperties()
    {
        var (command, options) = CommandWith(TopicPropertyOptions.Create);
        var topic = new CreateTopicOptions("t");

        var count = options.ApplyTo(
            command.Parse("--support-ordering --default-ttl 1d --duplicate-detection true --duplicate-window 2m --max-size-mb 512 --batched-operations false"),
            topic);

        Assert.Equal(6, count);
        Assert.True(topic.SupportOrdering);
        Assert.Equal(TimeSpan.FromDays(1), topic.DefaultMessageTimeToLive);
        Assert.True(topic.RequiresDuplicateDetection);
        Assert.Equal(TimeSpan.FromMinutes(2), topic.DuplicateDetectionHistoryTimeWindow);
        Assert.Equal(512, topic.MaxSizeInMegabytes);
        Assert.False(topic.EnableBatchedOperations);
    }

    [Fact]
    public void TopicOptions_NoneGiven_AssignNothing()
    {
        var (command, options) = CommandWith(TopicPropertyOptions.Create);
        var topic = new TopicProperties("t");

        Assert.Equal(0, options.ApplyTo(command.Parse(""), topic));
        Assert.Equal(0, topic.AssignedCount);
    }

    [Theory]
    [InlineData("--max-size-mb 0", "--max-size-mb must be at least 1")]
    [InlineData("--default-ttl soon", "--default-ttl 'soon' is not a duration")]
    public void TopicOptions_BadValues_AreBadInput(string line, string expected)
    {
        var (command, options) = CommandWith(TopicPropertyOptions.Create);

        var error = Assert.Throws<CliException>(() => options.ApplyTo(command.Parse(line), new TopicProperties("t")));

        Assert.Equal(ExitCodes.BadInput, error.ExitCode);
        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void QueueOptions_MapToTheirProperties()
    {
        var (command, options) = CommandWith(QueuePropertyOptions.Create);
        var queue = new CreateQueueOptions("q");

        var count = options.ApplyTo(
            command.Parse("--lock-duration 30s --max-delivery-count 3 --default-ttl 1d --dead-letter-on-expiration --duplicate-detection true "
                + "--duplicate-window 2m --forward-to q1 --forward-dead-lettered-to q2 --max-size-mb 512"),
            queue);

        Assert.Equal(9, count);
        Assert.Equal(TimeSpan.FromSeconds(30), queue.LockDuration);
        Assert.Equal(3, queue.MaxDeliveryCount);
        Assert.Equal(TimeSpan.FromDays(1), queue.DefaultMessageTimeToLive);
        Assert.True(queue.DeadLetteringOnMessageExpiration);
        Assert.True(queue.RequiresDuplicateDetection);
        Assert.Equal(TimeSpan.FromMinutes(2), queue.DuplicateDetectionHistoryTimeWindow);
        Assert.Equal(("q1", "q2"), (queue.ForwardTo, queue.ForwardDeadLetteredMessagesTo));
        Assert.Equal(512, queue.MaxSizeInMegabytes);
    }

    /// <summary>
    /// Queues take the spelling subscriptions take (and the README gave for both); before, a queue
    /// refused it as an unrecognized argument.
    /// </summary>
    [Fact]
    public void QueueOptions_TakeForwardDeadLettersTo_AsSubscriptionsDo()
    {
        var (command, options) = CommandWith(QueuePropertyOptions.Create);
        var queue = new CreateQueueOptions("q");

        options.ApplyTo(command.Parse("--forward-dead-letters-to errors"), queue);

        Assert.Equal("errors", queue.ForwardDeadLetteredMessagesTo);
    }

    [Theory]
    [InlineData("--max-delivery-count 0", "--max-delivery-count must be at least 1, not 0.")]
    [InlineData("--lock-duration 0s", "--lock-duration must be positive, not '0s'.")]
    [InlineData("--duplicate-window infinite", "--duplicate-window 'infinite' is not a duration; use e.g. 500ms, 30s, 5m, 1h, 1d or hh:mm:ss.")]
    public void QueueOptions_BadValues_NameTheOption(string line, string expected)
    {
        var (command, options) = CommandWith(QueuePropertyOptions.Create);

        var error = Assert.Throws<CliException>(() => options.ApplyTo(command.Parse(line), new QueueProperties("q")));

        Assert.Equal(ExitCodes.BadInput, error.ExitCode);
        Assert.Equal(expected, error.Message);
    }

    [Fact]
    public void SubscriptionOptions_MapToTheirProperties()
    {
        var (command, options) = CommandWith(SubscriptionPropertyOptions.Create);
        var subscription = new CreateSubscriptionOptions("t", "s");

        var count = options.ApplyTo(
            command.Parse("--lock-duration 30s --max-delivery-count 3 --default-ttl infinite --dead-letter-on-expiration "
                + "--dead-letter-on-filter-errors false --forward-to q1 --forward-dead-letters-to q2 --batched-operations false"),
            subscription);

        Assert.Equal(8, count);
        Assert.Equal(TimeSpan.FromSeconds(30), subscription.LockDuration);
        Assert.Equal(3, subscription.MaxDeliveryCount);
        Assert.Equal(TimeSpan.MaxValue, subscription.DefaultMessageTimeToLive);
        Assert.True(subscription.DeadLetteringOnMessageExpiration);
        Assert.False(subscription.EnableDeadLetteringOnFilterEvaluationExceptions);
        Assert.Equal(("q1", "q2"), (subscription.ForwardTo, subscription.ForwardDeadLetteredMessagesTo));
        Assert.False(subscription.EnableBatchedOperations);
    }

    [Fact]
    public void SubscriptionUpdate_EmptyForwardTo_Clears()
    {
        var (command, options) = CommandWith(SubscriptionPropertyOptions.Create);
        var subscription = new SubscriptionProperties("t", "s");

        options.ApplyTo(command.Parse(["--forward-to", "", "--forward-dead-lettered-to", ""]), subscription);

        Assert.Null(subscription.ForwardTo);
        Assert.True(subscription.IsAssigned(nameof(SubscriptionSettings.ForwardTo)));
        Assert.True(subscription.IsAssigned(nameof(SubscriptionSettings.ForwardDeadLetteredMessagesTo)));
    }

    [Fact]
    public void RuleOptions_None_IsNoRule()
    {
        var options = new RuleOptions();
        var command = new Command("test");
        options.AddTo(command);

        Assert.Null(options.ToRule(command.Parse(""), "$Default"));
    }

    [Fact]
    public void RuleOptions_SqlFilterAndAction()
    {
        var options = new RuleOptions();
        var command = new Command("test");
        options.AddTo(command);

        var rule = options.ToRule(command.Parse(["--sql-filter", "color = 'red'", "--action", "SET seen = TRUE"]), "red")!;

        Assert.Equal("red", rule.Name);
        Assert.Equal("color = 'red'", Assert.IsType<SqlRuleFilter>(rule.Filter).SqlExpression);
        Assert.Equal("SET seen = TRUE", Assert.IsType<SqlRuleAction>(rule.Action).SqlExpression);
    }

    [Fact]
    public void RuleOptions_ActionAlone_KeepsTheTrueFilter()
    {
        var options = new RuleOptions();
        var command = new Command("test");
        options.AddTo(command);

        var rule = options.ToRule(command.Parse(["--action", "SET seen = TRUE"]), "$Default")!;

        Assert.IsType<TrueRuleFilter>(rule.Filter);
        Assert.NotNull(rule.Action);
    }

    [Theory]
    [InlineData("--correlation-filter sys.CorrelationId=c color=red")]
    [InlineData("--correlation-filter sys.CorrelationId=c --correlation-filter color=red")]
    public void RuleOptions_CorrelationPairs_OneOrManyPerOption(string line)
    {
        var options = new RuleOptions();
        var command = new Command("test");
        options.AddTo(command);

        var filter = Assert.IsType<CorrelationRuleFilter>(options.ToRule(command.Parse(line), "c")!.Filter);

        Assert.Equal("c", filter.CorrelationId);
        Assert.Equal("red", filter.ApplicationProperties["color"]);
    }

    [Theory]
    [InlineData(new[] { "--sql-filter", "a = 1", "--correlation-filter", "b=2" }, "not both")]
    [InlineData(new[] { "--sql-filter", " " }, "--sql-filter needs an expression")]
    [InlineData(new[] { "--action", "" }, "--action needs an expression")]
    public void RuleOptions_BadCombinations_AreBadInput(string[] args, string expected)
    {
        var options = new RuleOptions();
        var command = new Command("test");
        options.AddTo(command);

        var error = Assert.Throws<CliException>(() => options.ToRule(command.Parse(args), "r"));

        Assert.Equal(ExitCodes.BadInput, error.ExitCode);
        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void RuleText_ReadsAsTheFilterKind()
    {
        var correlation = new CorrelationRuleFilter("c");
        correlation.ApplicationProperties["color"] = "red";

        Assert.Equal("true", RuleOptions.FilterText(new TrueRuleFilter()));
        Assert.Equal("false", RuleOptions.FilterText(new FalseRuleFilter()));
        Assert.Equal("sql: a > 1", RuleOptions.FilterText(new SqlRuleFilter("a > 1")));
        Assert.Equal("correlation: sys.CorrelationId = 'c' AND color = 'red'", RuleOptions.FilterText(correlation));
        Assert.Equal("-", RuleOptions.ActionText(null));
    }
}
