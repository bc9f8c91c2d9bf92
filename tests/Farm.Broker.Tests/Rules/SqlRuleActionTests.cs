using Farm.Broker.Rules;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;
using static Farm.Broker.Tests.Rules.RuleTestMessages;

namespace Farm.Broker.Tests.Rules;

/// <summary>SQL rule actions ("SQL rule action syntax"): SET and REMOVE on a copy of the message.</summary>
public sealed class SqlRuleActionTests
{
    private static Message Apply(string action, RuleMessage message) => SqlRuleAction.Parse(action).Apply(message);

    [Fact]
    public void Set_ChangesACopy_AndLeavesTheOriginalAlone()
    {
        var message = Order();
        var result = Apply("SET color = 'blue'", message);

        Assert.Equal("blue", Value(result, "color"));
        Assert.Equal("red", Value(message.Message, "color"));
        Assert.NotSame(message.Message, result);
        Assert.Equal(message.Message.Body, result.Body);
    }

    [Fact]
    public void Set_WithAnExpressionOverOtherProperties_KeepsTheExistingIntType()
    {
        // The docs' own example: quantity is an int; quantity / 2 is a long; SET converts back.
        var result = Apply("SET quantity = quantity / 2", Order());
        Assert.Equal(5, Value(result, "quantity"));
    }

    [Theory]
    [InlineData("SET total = quantity * price", "total", 25.0)]
    [InlineData("SET n = 1", "n", 1L)]
    [InlineData("SET n = 1.5", "n", 1.5)]
    [InlineData("SET n = 'text'", "n", "text")]
    [InlineData("SET n = TRUE", "n", true)]
    [InlineData("SET n = color + '-' + quantity", "n", "red-10")]
    [InlineData("SET count = 2", "count", 2L)]
    [InlineData("SET price = 3", "price", 3.0)]
    [InlineData("SET quantity = 'ten'", "quantity", "ten")]
    [InlineData("SET quantity = 10000000000", "quantity", 10000000000L)]
    [InlineData("SET count = quantity", "count", 10L)]
    [InlineData("SET [new prop] = 1", "new prop", 1L)]
    [InlineData("SET user.n = sys.SequenceNumber", "n", 42L)]
    [InlineData("SET n = property('color')", "n", "red")]
    public void Set_StoresTheExpressionValueWithItsType(string action, string property, object expected) =>
        Assert.Equal(expected, Value(Apply(action, Order()), property));

    [Fact]
    public void Set_ToAMissingPropertyOrNull_CreatesAPropertyWithoutAValue()
    {
        var result = Apply("SET a = missing; SET b = missing + 1; SET c = NULL", Order());
        Assert.Null(Value(result, "a"));
        Assert.Null(Value(result, "b"));
        Assert.Null(Value(result, "c"));
        Assert.True(SqlFilter.Parse("EXISTS(a) AND a IS NULL").Matches(Of(result)));
    }

    [Fact]
    public void Set_OfANameThatDiffersOnlyInCase_UpdatesTheExistingProperty()
    {
        var result = Apply("SET COLOR = 'blue'", Order());
        Assert.Equal("blue", Value(result, "color"));
        Assert.False(result.ApplicationProperties.ContainsKey("COLOR"));
    }

    [Fact]
    public void Set_NewId_StoresAGuid()
    {
        var result = Apply("SET id = newid(); SET sys.MessageId = newid()", With());
        Assert.True(Guid.TryParse((string)Value(result, "id")!, out _));
        Assert.Equal(PropertyValue.KindOneofCase.GuidValue, result.ApplicationProperties["id"].KindCase);
        Assert.True(Guid.TryParse(result.MessageId, out _));
    }

    [Fact]
    public void Remove_DeletesTheProperty_AndIgnoresAMissingOne()
    {
        var result = Apply("REMOVE color; REMOVE missing; REMOVE QUANTITY", Order());
        Assert.False(result.ApplicationProperties.ContainsKey("color"));
        Assert.False(result.ApplicationProperties.ContainsKey("quantity"));
        Assert.True(Order().Message.ApplicationProperties.ContainsKey("color"));
    }

    [Fact]
    public void Statements_RunInOrder_ALaterOneSeesWhatAnEarlierOneSet()
    {
        var result = Apply("SET a = 1; SET b = a + 1; SET a = b * 10; REMOVE b", With());
        Assert.Equal(20L, Value(result, "a"));
        Assert.False(result.ApplicationProperties.ContainsKey("b"));
    }

    [Theory]
    [InlineData("SET a = 1, SET b = 2")]
    [InlineData("SET a = 1; SET b = 2;")]
    [InlineData("SET a = 1;, SET b = 2")]
    [InlineData("SET a = 1 SET b = 2")]
    [InlineData("set a = 1; remove x; Set b = 2")]
    public void Statements_AreSeparatedByCommasOrSemicolons(string action)
    {
        var result = Apply(action, With(("x", 1L)));
        Assert.Equal(1L, Value(result, "a"));
        Assert.Equal(2L, Value(result, "b"));
    }

    [Fact]
    public void TheDocsExample_HalvesQuantity_RemovesPriority_AndSetsCorrelationId()
    {
        var message = With(("color", "red"), ("quantity", 10), ("priority", "high"));
        var result = Apply("SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';", message);

        Assert.Equal(5, Value(result, "quantity"));
        Assert.False(result.ApplicationProperties.ContainsKey("priority"));
        Assert.Equal("low", result.CorrelationId);
    }

    [Fact]
    public void Set_SystemStringProperties_ChangesTheMessageFields()
    {
        var result = Apply(
            "SET sys.Label = sys.Label + '-routed'; SET sys.To = user.Label; SET sys.ReplyTo = 'r2'; " +
            "SET sys.ReplyToSessionId = 'rs2'; SET sys.SessionId = 's2'; SET sys.ContentType = 'text/plain'; SET sys.MessageId = 'm2'",
            WithSystemProperties());

        Assert.Equal("shipping-routed", result.Subject);
        Assert.Equal("user-label", result.To);
        Assert.Equal("r2", result.ReplyTo);
        Assert.Equal("rs2", result.ReplyToSessionId);
        Assert.Equal("s2", result.SessionId);
        Assert.Equal("text/plain", result.ContentType);
        Assert.Equal("m2", result.MessageId);
    }

    [Fact]
    public void Set_SubjectAndLabel_AreTheSameProperty()
    {
        var result = Apply("SET sys.Subject = 'a'; SET x = sys.Label", With());
        Assert.Equal("a", result.Subject);
        Assert.Equal("a", Value(result, "x"));
    }

    [Fact]
    public void Set_StringSystemPropertyToANumber_StoresItsText() =>
        Assert.Equal("42", Apply("SET sys.CorrelationId = 40 + 2", With()).CorrelationId);

    [Fact]
    public void Remove_OrSetNull_OfASystemProperty_ClearsIt()
    {
        var result = Apply("REMOVE sys.CorrelationId; SET sys.Label = NULL; SET sys.To = missing", WithSystemProperties());
        Assert.Equal("", result.CorrelationId);
        Assert.Equal("", result.Subject);
        Assert.Equal("", result.To);
    }

    [Fact]
    public void Set_TimeToLive_TakesATimeSpanAndChangesExpiry()
    {
        var message = new RuleMessage(Message(("ttl", TimeSpan.FromMinutes(5))), 1, EnqueuedTime) { TimeToLive = TimeSpan.FromDays(1) };
        var result = Apply("SET sys.TimeToLive = ttl; SET readBack = sys.ExpiresAtUtc - sys.EnqueuedTimeUtc", message);

        Assert.Equal(TimeSpan.FromMinutes(5), result.TimeToLive.ToTimeSpan());
        Assert.Equal(TimeSpan.FromMinutes(5), Value(result, "readBack"));
    }

    [Fact]
    public void Set_ScheduledEnqueueTime_TakesADateTime()
    {
        var result = Apply("SET sys.ScheduledEnqueueTimeUtc = sys.EnqueuedTimeUtc + wait", Order());
        Assert.Equal(EnqueuedTime.UtcDateTime + TimeSpan.FromMinutes(5), result.ScheduledEnqueueTime.ToDateTime());
    }

    [Theory]
    [InlineData("SET sys.TimeToLive = 5", "sys.TimeToLive must be set to a TimeSpan value; got long 5.")]
    [InlineData("SET sys.ScheduledEnqueueTimeUtc = 'tomorrow'", "sys.ScheduledEnqueueTimeUtc must be set to a DateTime value")]
    [InlineData("SET a = color * 2", "Operator '*' cannot be applied")]
    [InlineData("SET a = quantity / zero", "division by zero")]
    public void Set_OfAValueThatCannotBeComputedOrStored_ThrowsRuleEvaluationException(string action, string message)
    {
        var parsed = SqlRuleAction.Parse(action);
        var error = Assert.Throws<RuleEvaluationException>(() => parsed.Apply(Order()));
        Assert.Contains(message, error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("SET sys.SequenceNumber = 1", 5)]
    [InlineData("SET sys.EnqueuedTimeUtc = sys.EnqueuedTimeUtc", 5)]
    [InlineData("SET a = 1; REMOVE sys.DeliveryCount", 19)]
    [InlineData("SET sys.Size = 0", 5)]
    [InlineData("SET sys.ExpiresAtUtc = NULL", 5)]
    public void Set_OfABrokerAssignedSystemProperty_IsRejectedAtParseTime(string action, int position)
    {
        var error = Assert.Throws<RuleParseException>(() => SqlRuleAction.Parse(action));
        Assert.Equal(position, error.Position);
        Assert.Contains("is set by the broker and cannot be changed by an action", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("", 1, "The action is empty")]
    [InlineData("SET", 4, "Unexpected end of expression at position 4: expected a property name")]
    [InlineData("SET a", 6, "expected '=' after SET user.a")]
    [InlineData("SET a =", 8, "expected an expression")]
    [InlineData("SET a == 1", 8, "expected an expression")]
    [InlineData("UPDATE a = 1", 1, "Unexpected token 'UPDATE' at position 1: expected SET or REMOVE")]
    [InlineData("SET a = 1,", 11, "expected SET or REMOVE after ','")]
    [InlineData("SET a = 1 b", 11, "Unexpected token 'b' at position 11")]
    [InlineData("SET a = 1; b = 2", 12, "expected SET or REMOVE")]
    [InlineData("SET sys.Nope = 1", 5, "'sys.Nope' at position 5 is not a system property")]
    [InlineData("SET a = b = 1", 11, "Unexpected token '='")]
    [InlineData("SET a = b > 1", 11, "Unexpected token '>'")]
    [InlineData("SET a = (b > 1)", 10, "Expected a value at position 10 but found a condition")]
    [InlineData("SET a = 'x", 9, "Unterminated string constant")]
    [InlineData("SET a = foo()", 9, "Unknown function 'foo'")]
    [InlineData("REMOVE", 7, "expected a property name")]
    [InlineData("REMOVE 1", 8, "expected a property name")]
    public void InvalidActions_AreRejectedWithThePosition(string action, int position, string message)
    {
        var error = Assert.Throws<RuleParseException>(() => SqlRuleAction.Parse(action));
        Assert.Equal(position, error.Position);
        Assert.Contains(message, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Action_KeepsItsExpressionText() =>
        Assert.Equal("SET a = 1", SqlRuleAction.Parse("SET a = 1").SqlExpression);

    [Fact]
    public void Apply_KeepsTheBrokerValues_OfTheMessage()
    {
        var message = new RuleMessage(new Message(), 99, EnqueuedTime) { DeliveryCount = 4, Size = 500 };
        var result = Apply("SET s = sys.SequenceNumber; SET d = sys.DeliveryCount; SET z = sys.Size; SET t = sys.EnqueuedTimeUtc", message);
        Assert.Equal(99L, Value(result, "s"));
        Assert.Equal(4, Value(result, "d"));
        Assert.Equal(500L, Value(result, "z"));
        Assert.Equal(EnqueuedTime.UtcDateTime, Value(result, "t"));
    }

    [Fact]
    public void Set_DurationAndTimestampValues_RoundTripThroughTheWireTypes()
    {
        var result = Apply("SET w = wait * 2; SET p = placed + wait", Order());
        Assert.Equal(TimeSpan.FromMinutes(10), result.ApplicationProperties["w"].DurationValue.ToTimeSpan());
        Assert.Equal(new DateTime(2024, 1, 1, 0, 5, 0, DateTimeKind.Utc), result.ApplicationProperties["p"].TimestampValue.ToDateTime());
        Assert.IsType<Timestamp>(result.ApplicationProperties["p"].TimestampValue);
    }
}
