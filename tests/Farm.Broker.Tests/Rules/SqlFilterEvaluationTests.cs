using Farm.Broker.Rules;
using static Farm.Broker.Tests.Rules.RuleTestMessages;

namespace Farm.Broker.Tests.Rules;

/// <summary>SQL filter semantics as Azure Service Bus documents them ("SQL filter syntax").</summary>
public sealed class SqlFilterEvaluationTests
{
    [Theory]
    [InlineData("color = 'red'")]
    [InlineData("color <> 'blue'")]
    [InlineData("color != 'blue'")]
    [InlineData("quantity > 9")]
    [InlineData("quantity >= 10")]
    [InlineData("quantity < 11")]
    [InlineData("quantity <= 10")]
    [InlineData("quantity = 10")]
    [InlineData("count = 7")]
    [InlineData("price > 2")]
    [InlineData("price < 3")]
    [InlineData("price = 2.5")]
    [InlineData("vip = TRUE")]
    [InlineData("vip <> FALSE")]
    [InlineData("'abc' < 'abd'")]
    [InlineData("'b' > 'abc'")]
    [InlineData("placed < sys.EnqueuedTimeUtc")]
    [InlineData("wait > placed - placed")]
    [InlineData("id = id")]
    [InlineData("blob = blob")]
    public void Comparison_ThatHolds_Matches(string filter) => Assert.True(Evaluate(filter, Order()));

    [Theory]
    [InlineData("color = 'blue'")]
    [InlineData("color <> 'red'")]
    [InlineData("quantity > 10")]
    [InlineData("quantity < 10")]
    [InlineData("quantity >= 11")]
    [InlineData("quantity <= 9")]
    [InlineData("price = 2")]
    [InlineData("vip = FALSE")]
    [InlineData("'abd' < 'abc'")]
    public void Comparison_ThatDoesNotHold_IsFalse(string filter) => Assert.False(Evaluate(filter, Order()));

    [Theory]
    [InlineData("color = 'RED'")]
    [InlineData("color LIKE 'R%'")]
    public void StringComparison_IsCaseSensitive(string filter) => Assert.False(Evaluate(filter, Order()));

    [Theory]
    [InlineData("1 = 1.0")]
    [InlineData("quantity = 10.0")]
    [InlineData("quantity = count + 3")]
    [InlineData("count = 7.0")]
    [InlineData("quantity > 9.5")]
    [InlineData("price * 4 = 10")]
    [InlineData("quantity / 4 = 2")]
    [InlineData("quantity / 4.0 = 2.5")]
    [InlineData("quantity IN (1, 10.0)")]
    public void Numbers_ArePromotedLikeCSharp_IntToLongToDouble(string filter) => Assert.True(Evaluate(filter, Order()));

    [Theory]
    [InlineData("color = 10")]
    [InlineData("quantity = '10'")]
    [InlineData("quantity <> '10'")]
    [InlineData("vip = 'true'")]
    [InlineData("vip = 1")]
    [InlineData("placed = '2024-01-01'")]
    [InlineData("vip > FALSE")]
    [InlineData("id < id")]
    [InlineData("quantity LIKE '1%'")]
    public void Comparing_ValuesOfIncompatibleTypes_IsUnknown(string filter) => Assert.Null(Evaluate(filter, Order()));

    [Fact]
    public void Comparing_AStringWithANumber_DoesNotMatchEvenWhenNegated()
    {
        var message = Order();
        Assert.False(SqlFilter.Parse("quantity = '10'").Matches(message));
        Assert.False(SqlFilter.Parse("NOT quantity = '10'").Matches(message));
    }

    [Theory]
    [InlineData("missing = 1")]
    [InlineData("missing <> 1")]
    [InlineData("missing > 1")]
    [InlineData("NULL = NULL")]
    [InlineData("NULL <> NULL")]
    [InlineData("empty = 1")]
    [InlineData("missing + 1 = 1")]
    [InlineData("-missing = 1")]
    [InlineData("missing * 0 = 0")]
    [InlineData("missing LIKE 'a%'")]
    [InlineData("color LIKE missing")]
    [InlineData("color LIKE 'r%' ESCAPE missing")]
    [InlineData("missing IN (1, 2)")]
    [InlineData("missing NOT IN (1, 2)")]
    [InlineData("missing NOT LIKE 'a%'")]
    [InlineData("sys.ScheduledEnqueueTimeUtc > sys.EnqueuedTimeUtc")]
    public void MissingPropertyOrNull_InAnOperator_IsUnknown(string filter) => Assert.Null(Evaluate(filter, Order()));

    [Theory]
    [InlineData("NOT missing = 1", null)]
    [InlineData("NOT (missing = 1)", null)]
    [InlineData("missing = 1 AND 1 = 1", null)]
    [InlineData("1 = 1 AND missing = 1", null)]
    [InlineData("missing = 1 AND 1 = 0", false)]
    [InlineData("1 = 0 AND missing = 1", false)]
    [InlineData("missing = 1 AND missing = 2", null)]
    [InlineData("missing = 1 OR 1 = 1", true)]
    [InlineData("1 = 1 OR missing = 1", true)]
    [InlineData("missing = 1 OR 1 = 0", null)]
    [InlineData("missing = 1 OR missing = 2", null)]
    [InlineData("NOT (1 = 0)", true)]
    [InlineData("NOT 1 = 1", false)]
    [InlineData("NOT NOT color = 'red'", true)]
    public void Logic_FollowsAzureThreeValuedTables(string filter, bool? expected) => Assert.Equal(expected, Evaluate(filter, Order()));

    [Fact]
    public void UnknownFilter_DoesNotMatch()
    {
        var filter = SqlFilter.Parse("missing = 1");
        Assert.Null(filter.Evaluate(Order()));
        Assert.False(filter.Matches(Order()));
    }

    [Theory]
    [InlineData("missing IS NULL", true)]
    [InlineData("missing IS NOT NULL", false)]
    [InlineData("empty IS NULL", true)]
    [InlineData("color IS NULL", false)]
    [InlineData("color IS NOT NULL", true)]
    [InlineData("EXISTS(color)", true)]
    [InlineData("EXISTS(missing)", false)]
    [InlineData("EXISTS(empty)", true)]
    [InlineData("NOT EXISTS(missing)", true)]
    [InlineData("exists (user.color)", true)]
    [InlineData("EXISTS([name with space])", true)]
    [InlineData("EXISTS(sys.MessageId)", false)]
    [InlineData("missing + 1 IS NULL", true)]
    [InlineData("NULL IS NULL", true)]
    [InlineData("missing IS NULL OR missing = 1", true)]
    public void IsNullAndExists_AreNeverUnknown(string filter, bool expected) => Assert.Equal(expected, Evaluate(filter, Order()));

    [Theory]
    [InlineData("quantity + count = 17")]
    [InlineData("quantity - count = 3")]
    [InlineData("quantity * 2 = 20")]
    [InlineData("quantity / 3 = 3")]
    [InlineData("quantity % 3 = 1")]
    [InlineData("-quantity = -10")]
    [InlineData("+quantity = 10")]
    [InlineData("- -quantity = 10")]
    [InlineData("2 + 3 * 4 = 14")]
    [InlineData("(2 + 3) * 4 = 20")]
    [InlineData("10 - 4 - 3 = 3")]
    [InlineData("100 / 10 / 5 = 2")]
    [InlineData("7 % 4 * 2 = 6")]
    [InlineData("-2 * -3 = 6")]
    [InlineData("quantity * 2 + 1 > 20 AND price * 2 < 5.5")]
    [InlineData("1 + 2 = 3 AND 2 * 3 = 6 OR 1 = 0")]
    [InlineData("price / 0 > 1000000")]
    [InlineData("'a' + 'b' = 'ab'")]
    [InlineData("color + 1 = 'red1'")]
    [InlineData("placed + wait > placed")]
    [InlineData("sys.ExpiresAtUtc - sys.EnqueuedTimeUtc = sys.TimeToLive")]
    [InlineData("-9223372036854775808 < 0")]
    public void Arithmetic_FollowsPrecedenceAndCSharpTypes(string filter) => Assert.True(Evaluate(filter, WithTtl(Order())));

    [Theory]
    [InlineData("color = 'red' OR color = 'blue' AND quantity = 0", true)]
    [InlineData("(color = 'red' OR color = 'blue') AND quantity = 0", false)]
    [InlineData("NOT color = 'blue' AND quantity = 10", true)]
    [InlineData("NOT (color = 'red' AND quantity = 0)", true)]
    public void And_BindsTighterThanOr_AndNotTighterThanAnd(string filter, bool expected) =>
        Assert.Equal(expected, Evaluate(filter, Order()));

    [Theory]
    [InlineData("color LIKE 'r%'", true)]
    [InlineData("color LIKE '%d'", true)]
    [InlineData("color LIKE '%e%'", true)]
    [InlineData("color LIKE 'r_d'", true)]
    [InlineData("color LIKE '___'", true)]
    [InlineData("color LIKE '__'", false)]
    [InlineData("color LIKE 'red'", true)]
    [InlineData("color LIKE 're'", false)]
    [InlineData("color NOT LIKE 'b%'", true)]
    [InlineData("color NOT LIKE 'r%'", false)]
    [InlineData("color LIKE pattern", true)]
    [InlineData("'ABC%' LIKE 'ABC\\%' ESCAPE '\\'", true)]
    [InlineData("'ABCD' LIKE 'ABC\\%' ESCAPE '\\'", false)]
    [InlineData("'a_b' LIKE 'a!_b' ESCAPE '!'", true)]
    [InlineData("color LIKE 'r!%' ESCAPE '!'", false)]
    [InlineData("[HR-EmployeeID] LIKE 'e-%'", true)]
    [InlineData("color LIKE 'r' + '%'", true)]
    public void Like_MatchesPercentUnderscoreAndEscape(string filter, bool expected) =>
        Assert.Equal(expected, Evaluate(filter, Order()));

    [Theory]
    [InlineData("color IN ('blue', 'red')", true)]
    [InlineData("color IN ('blue', 'green')", false)]
    [InlineData("color NOT IN ('blue', 'green')", true)]
    [InlineData("color NOT IN ('red')", false)]
    [InlineData("quantity IN (5, 10)", true)]
    [InlineData("quantity IN (count + 3)", true)]
    [InlineData("color IN ('x', NULL)", false)]
    [InlineData("color NOT IN ('x', NULL)", true)]
    [InlineData("color IN (missing, 'red')", true)]
    [InlineData("color IN (1, 2)", false)]
    public void In_MatchesAnyListItem(string filter, bool expected) => Assert.Equal(expected, Evaluate(filter, Order()));

    [Theory]
    [InlineData("user.color = 'red'")]
    [InlineData("COLOR = 'red'")]
    [InlineData("User.Color = 'red'")]
    [InlineData("[color] = 'red'")]
    [InlineData("\"color\" = 'red'")]
    [InlineData("[name with space] = 'spaced'")]
    [InlineData("user.[name with space] = 'spaced'")]
    [InlineData("[HR-EmployeeID] = 'e-17'")]
    [InlineData("[hr-employeeid] = 'e-17'")]
    public void UserProperties_AreFoundByCaseInsensitiveNameWithOrWithoutScope(string filter) =>
        Assert.True(Evaluate(filter, Order()));

    [Fact]
    public void ExactCaseProperty_WinsOverOneThatDiffersOnlyInCase()
    {
        var message = With(("Color", "upper"), ("color", "lower"));
        Assert.True(Evaluate("color = 'lower'", message));
        Assert.True(Evaluate("Color = 'upper'", message));
    }

    [Fact]
    public void DelimitedIdentifier_WithDoubledBracket_NamesAPropertyWithABracket() =>
        Assert.True(Evaluate("[a]]b] = 1", With(("a]b", 1L))));

    [Fact]
    public void QuotedIdentifier_WithSpecialCharacters_NamesAProperty() =>
        Assert.True(Evaluate(
            "\"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName\" = 'account'",
            With(("http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName", "account"))));

    [Theory]
    [InlineData("color = 'red' and QUANTITY = 10")]
    [InlineData("color = 'blue' Or quantity = 10")]
    [InlineData("not color = 'blue'")]
    [InlineData("color like 'r%' escape '!'")]
    [InlineData("color not in ('x')")]
    [InlineData("missing is null")]
    [InlineData("color Is Not Null")]
    [InlineData("vip = true")]
    [InlineData("Exists(color)")]
    [InlineData("sys.label = 'shipping' OR SYS.LABEL IS NULL")]
    public void Keywords_AreCaseInsensitive(string filter) => Assert.True(Evaluate(filter, Order()));

    [Theory]
    [InlineData("1E1 = 10")]
    [InlineData("0.5E-2 = 0.005")]
    [InlineData("101.5E5 = 10150000")]
    [InlineData("1894.1204 > 1894")]
    [InlineData("2.0 = 2")]
    [InlineData("'it''s' = 'it' + '''s'")]
    [InlineData("'' = ''")]
    [InlineData("'ünïcødé' LIKE '%cød%'")]
    public void Constants_ParseAsTheDocsDescribe(string filter) => Assert.True(Evaluate(filter, Order()));

    [Theory]
    [InlineData("sys.MessageId = 'm1'")]
    [InlineData("sys.CorrelationId = 'c1'")]
    [InlineData("sys.SessionId = 's1'")]
    [InlineData("sys.Label = 'shipping'")]
    [InlineData("sys.Subject = 'shipping'")]
    [InlineData("sys.label LIKE '%ship%'")]
    [InlineData("sys.ContentType = 'application/json'")]
    [InlineData("sys.To IN ('Store5', 'dest')")]
    [InlineData("sys.ReplyTo = 'replies'")]
    [InlineData("sys.ReplyToSessionId = 'rs'")]
    [InlineData("sys.SequenceNumber = 42")]
    [InlineData("sys.EnqueuedSequenceNumber = 42")]
    [InlineData("sys.SequenceNumber > 41.5")]
    [InlineData("sys.DeliveryCount = 3")]
    [InlineData("sys.Size > 0")]
    [InlineData("sys.TimeToLive = sys.ExpiresAtUtc - sys.EnqueuedTimeUtc")]
    [InlineData("sys.ExpiresAtUtc > sys.EnqueuedTimeUtc")]
    [InlineData("sys.ScheduledEnqueueTimeUtc IS NULL")]
    [InlineData("user.Label = 'user-label' AND Label = 'user-label' AND sys.Label = 'shipping'")]
    public void SystemProperties_AreReadWithTheSysScope(string filter) =>
        Assert.True(Evaluate(filter, WithSystemProperties()));

    [Fact]
    public void SystemProperties_TheBrokerAssigned_AreTheOnesItPassed()
    {
        var message = new RuleMessage(new Contracts.V1.Message(), 7, EnqueuedTime)
        {
            DeliveryCount = 2,
            Size = 1234,
            TimeToLive = TimeSpan.FromHours(1),
        };
        Assert.True(Evaluate("sys.SequenceNumber = 7 AND sys.DeliveryCount = 2 AND sys.Size = 1234", message));
        Assert.True(Evaluate("sys.ExpiresAtUtc - sys.EnqueuedTimeUtc = sys.TimeToLive", message));
    }

    [Theory]
    [InlineData("sys.MessageId IS NULL")]
    [InlineData("sys.CorrelationId IS NULL")]
    [InlineData("NOT EXISTS(sys.SessionId)")]
    [InlineData("sys.TimeToLive IS NULL")]
    [InlineData("sys.ExpiresAtUtc IS NULL")]
    public void UnsetSystemProperties_AreNull(string filter) => Assert.True(Evaluate(filter, With()));

    [Fact]
    public void UnsetSystemProperty_InAComparison_IsUnknown() => Assert.Null(Evaluate("sys.SessionId = 's1'", With()));

    [Theory]
    [InlineData("property('color') = 'red'")]
    [InlineData("p('color') = 'red'")]
    [InlineData("PROPERTY('user.color') = 'red'")]
    [InlineData("property('sys.Label') = 'shipping'")]
    [InlineData("property(propName) = 'red'")]
    [InlineData("property('Label') = 'user-label'")]
    [InlineData("property('missing') IS NULL")]
    [InlineData("newid() IS NOT NULL")]
    [InlineData("newid() <> newid()")]
    public void Functions_PropertyAndNewId_Work(string filter)
    {
        var message = WithSystemProperties();
        message.Message.ApplicationProperties.Add(Order().Message.ApplicationProperties);
        Assert.True(Evaluate(filter, message));
    }

    [Fact]
    public void Property_WithANonConstantName_IsLookedUpPerMessage()
    {
        var filter = SqlFilter.Parse("property(propName) = 'x'");
        Assert.True(filter.Matches(With(("propName", "a"), ("a", "x"))));
        Assert.False(filter.Matches(With(("propName", "b"), ("a", "x"), ("b", "y"))));
        Assert.Null(filter.Evaluate(With(("a", "x"))));
    }

    [Theory]
    [InlineData("color * 2 = 1", "'*'")]
    [InlineData("vip + 1 = 2", "'+'")]
    [InlineData("-color = 1", "'-'")]
    [InlineData("+vip = TRUE", "'+'")]
    [InlineData("quantity / zero = 1", "division by zero")]
    [InlineData("quantity % zero = 1", "division by zero")]
    [InlineData("count / zero = 1", "division by zero")]
    [InlineData("color LIKE quantity", "pattern must be a string")]
    [InlineData("color LIKE 'r%' ESCAPE twoChars", "one character")]
    [InlineData("property(badSys) = 1", "not a system property")]
    [InlineData("property(quantity) = 1", "string name")]
    [InlineData("placed + placed > placed", "'+'")]
    [InlineData("color IN (1, blob * 2)", "'*'")]
    public void EvaluationErrors_ThrowRuleEvaluationException(string filter, string because)
    {
        var parsed = SqlFilter.Parse(filter);
        var error = Assert.Throws<RuleEvaluationException>(() => parsed.Matches(Order()));
        Assert.Contains(because, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void EvaluationError_OnTheSkippedSideOfAndOr_DoesNotHappen()
    {
        Assert.False(Evaluate("1 = 0 AND quantity / zero = 1", Order()));
        Assert.True(Evaluate("1 = 1 OR quantity / zero = 1", Order()));
    }

    [Fact]
    public void TrueFilter_And_FalseFilter_AreOneEqualsOneAndOneEqualsZero()
    {
        Assert.Same(TrueFilter.Instance, SqlFilter.Parse("1=1"));
        Assert.Same(TrueFilter.Instance, SqlFilter.Parse(" 1 = 1 "));
        Assert.Same(FalseFilter.Instance, SqlFilter.Parse("1=0"));
        Assert.True(TrueFilter.Instance.Matches(With()));
        Assert.False(FalseFilter.Instance.Matches(With()));
        Assert.Equal("1=1", TrueFilter.Instance.SqlExpression);
    }

    [Fact]
    public void ConstantFilter_OtherThanOneEqualsOne_KeepsItsTextButEvaluatesOnce()
    {
        var filter = SqlFilter.Parse("2 > 1");
        Assert.IsNotType<TrueFilter>(filter);
        Assert.Equal("2 > 1", filter.SqlExpression);
        Assert.True(filter.Matches(With()));
    }

    [Fact]
    public void Filter_KeepsItsExpressionText()
    {
        Assert.Equal("color = 'red'", SqlFilter.Parse("color = 'red'").SqlExpression);
        Assert.Equal("color = 'red'", SqlFilter.Parse("color = 'red'").ToString());
    }

    [Fact]
    public void Evaluating_NumbersAndStringsFromProperties_AllocatesNothing()
    {
        var filter = SqlFilter.Parse("quantity > 5 AND color = 'red' AND sys.SequenceNumber > 1 AND price * 2 < 10 AND color LIKE 'r%' AND COLOR IN ('red', 'blue')");
        var message = Order();
        Assert.True(filter.Matches(message));

        var before = GC.GetAllocatedBytesForCurrentThread();
        for (var i = 0; i < 1000; i++)
        {
            filter.Matches(message);
        }
        Assert.Equal(0, GC.GetAllocatedBytesForCurrentThread() - before);
    }

    private static RuleMessage WithTtl(RuleMessage message) => new(message.Message, message.SequenceNumber, message.EnqueuedTime)
    {
        TimeToLive = TimeSpan.FromMinutes(1),
    };
}
