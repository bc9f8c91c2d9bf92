using Farm.Broker.Rules;

namespace Farm.Broker.Tests.Rules;

/// <summary>Invalid filters are rejected when the rule is added, naming the 1-based position of the problem.</summary>
public sealed class SqlFilterParseTests
{
    private static RuleParseException Rejected(string filter) => Assert.Throws<RuleParseException>(() => SqlFilter.Parse(filter));

    [Theory]
    [InlineData("quantity > 5 AND )", 18, "Unexpected token ')' at position 18: expected an expression.")]
    [InlineData("color = ", 9, "Unexpected end of expression at position 9: expected an expression.")]
    [InlineData("color = 'red' AND", 18, "Unexpected end of expression at position 18: expected an expression.")]
    [InlineData("color = 'red' OR OR x = 1", 18, "Unexpected token 'OR' at position 18: expected an expression.")]
    [InlineData("a = AND", 5, "Unexpected token 'AND' at position 5: expected an expression.")]
    [InlineData("NOT", 4, "Unexpected end of expression at position 4: expected an expression.")]
    [InlineData("a = 1 +", 8, "Unexpected end of expression at position 8: expected an expression.")]
    [InlineData("a * = 1", 5, "Unexpected token '=' at position 5: expected an expression.")]
    [InlineData("a IN ()", 7, "Unexpected token ')' at position 7: expected an expression.")]
    public void DanglingOperator_IsRejectedWhereTheExpressionIsMissing(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Equal(message, error.Message);
    }

    [Theory]
    [InlineData("(color = 'red'", 15, "expected ')'")]
    [InlineData("((a = 1) OR (b = 2)", 20, "expected ')'")]
    [InlineData("color = 'red')", 14, "Unexpected token ')' at position 14: expected AND, OR or the end of the expression.")]
    [InlineData("a IN (1, 2", 11, "expected ',' or ')'")]
    [InlineData("a IN 1, 2", 6, "expected '(' after IN")]
    [InlineData("EXISTS color", 8, "expected '(' after EXISTS")]
    [InlineData("EXISTS(color", 13, "expected ')'")]
    public void UnbalancedParentheses_AreRejected(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Contains(message, error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("", 1)]
    [InlineData("   ", 1)]
    public void EmptyExpression_IsRejected(string filter, int position)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Equal("The filter expression is empty.", error.Message);
    }

    [Theory]
    [InlineData("color = 'red", 9, "Unterminated string constant starting at position 9.")]
    [InlineData("color = 'it''s", 9, "Unterminated string constant starting at position 9.")]
    [InlineData("[color = 'red'", 1, "Unterminated delimited identifier starting at position 1.")]
    [InlineData("\"color = 'red'", 1, "Unterminated quoted identifier starting at position 1.")]
    public void UnterminatedQuotes_AreRejectedAtTheOpeningQuote(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Equal(message, error.Message);
    }

    [Fact]
    public void UnknownFunction_IsRejected()
    {
        var error = Rejected("a = 1 AND upper(color) = 'RED'");
        Assert.Equal(11, error.Position);
        Assert.StartsWith("Unknown function 'upper' at position 11", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("newid(1) = 1", 7, "newid() takes no argument")]
    [InlineData("property() = 1", 10, "expected an expression.")]
    [InlineData("property('a', 'b') = 1", 13, "takes one argument")]
    [InlineData("property(1) = 1", 10, "needs a property name as a string")]
    [InlineData("property('sys.Nope') = 1", 10, "'sys.Nope' at position 10 is not a system property")]
    public void FunctionArguments_AreChecked(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Contains(message, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void UnknownSystemProperty_IsRejected()
    {
        var error = Rejected("color = 'red' AND sys.Nope = 1");
        Assert.Equal(19, error.Position);
        Assert.StartsWith("'sys.Nope' at position 19 is not a system property; the system properties are MessageId, CorrelationId", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void UnknownScope_IsRejected()
    {
        var error = Rejected("app.color = 'red'");
        Assert.Equal(1, error.Position);
        Assert.Contains("Unknown scope 'app'", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("color", 1)]
    [InlineData("TRUE", 1)]
    [InlineData("a = 1 AND quantity + 1", 11)]
    [InlineData("NOT quantity", 5)]
    [InlineData("(color)", 2)]
    public void Value_WhereAConditionBelongs_IsRejected(string filter, int position)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.StartsWith($"Expected a condition at position {position} but found a value", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("(a = 1) = TRUE", 2)]
    [InlineData("1 + (a = 1) = 2", 6)]
    [InlineData("EXISTS(a) IN (TRUE)", 1)]
    public void Condition_WhereAValueBelongs_IsRejected(string filter, int position)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.StartsWith($"Expected a value at position {position} but found a condition", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("a = 1 = 2", 7)]
    [InlineData("a < b < c", 7)]
    [InlineData("a = 1 b = 2", 7)]
    [InlineData("a NOT = 1", 3)]
    public void ChainedComparisons_AreRejected(string filter, int position) => Assert.Equal(position, Rejected(filter).Position);

    [Theory]
    [InlineData("a IS 1", 6, "expected NULL or NOT NULL")]
    [InlineData("a IS NOT 1", 10, "expected NULL")]
    public void IsWithoutNull_IsRejected(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Contains(message, error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("a # 1", 3, "Unexpected character '#' at position 3.")]
    [InlineData("a == 1", 4, "Unexpected token '=' at position 4: expected an expression.")]
    [InlineData("a ! 1", 3, "Unexpected character '!' at position 3.")]
    [InlineData("a = @p", 5, "Parameters such as '@name' are not supported (position 5); write the value into the expression.")]
    [InlineData("_a = 1", 1, "Unexpected character '_' at position 1.")]
    public void UnknownCharacters_AreRejected(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Equal(message, error.Message);
    }

    [Theory]
    [InlineData("a = 99999999999999999999", 5, "out of the range of a 64-bit integer")]
    [InlineData("a = 1E", 5, "the exponent has no digits")]
    [InlineData("a = 12abc", 5, "runs into a name")]
    [InlineData("a = 1E999", 5, "out of range")]
    public void MalformedNumbers_AreRejected(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Contains(message, error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("a = 1 / 0", 7, "division by zero")]
    [InlineData("a = 5 % 0", 7, "division by zero")]
    [InlineData("a = 'x' * 2", 9, "Operator '*' cannot be applied to operands of type 'string' and 'long'")]
    [InlineData("a = -TRUE", 5, "Operator '-' cannot be applied")]
    [InlineData("a LIKE 5", 8, "A LIKE pattern must be a string")]
    [InlineData("a LIKE 'x' ESCAPE 'ab'", 8, "A LIKE escape must be a string of one character")]
    [InlineData("a LIKE 'x!' ESCAPE '!'", 8, "ends with its escape character")]
    public void ErrorsBetweenConstants_AreRejectedAtParseTime(string filter, int position, string message)
    {
        var error = Rejected(filter);
        Assert.Equal(position, error.Position);
        Assert.Contains(message, error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void ParseException_IsAFormatException() => Assert.IsAssignableFrom<FormatException>(Rejected("a ="));

    [Theory]
    [InlineData("sys.Label LIKE '%bus%'")]
    [InlineData("sys.Label LIKE '%bus%' OR user.tag IN ('queue', 'topic', 'subscription')")]
    [InlineData("StoreId IN('Store1', 'Store2', 'Store3')")]
    [InlineData("sys.To IN ('Store5','Store6','Store7') OR StoreId = 'Store8'")]
    [InlineData("sys.To NOT IN ('Store1','Store2','Store3','Store4','Store5','Store6','Store7','Store8') OR StoreId NOT IN ('Store1','Store2','Store3','Store4','Store5','Store6','Store7','Store8')")]
    [InlineData("sys.messageid = 'xxxx'")]
    [InlineData("sys.correlationid like 'abc-%'")]
    [InlineData("MessageProperty = 1 AND MessageProperty2 = 3")]
    [InlineData("MessageProperty > 2.08")]
    [InlineData("user.SuperHero like 'SuperMan%'")]
    [InlineData("color='blue' AND quantity=10")]
    [InlineData("\"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName\" = 'account'")]
    [InlineData("[Property With Space] = 1 AND [HR-EmployeeID] = 2")]
    [InlineData("Größe > 1 AND 名前 = 'x' AND a_1 = 2")]
    public void TheDocsExamples_Parse(string filter) => Assert.NotNull(SqlFilter.Parse(filter));
}

public sealed class SqlFilterNestingTests
{
    [Theory]
    [InlineData("(", ")", "a = 1")]
    [InlineData("NOT ", "", "a = 1")]
    [InlineData("", "", "a = ", "-")]
    public void DeepNesting_IsRejectedInsteadOfOverflowingTheStack(string open, string close, string inner, string sign = "")
    {
        var depth = 100_000;
        var text = sign.Length > 0
            ? inner + string.Concat(Enumerable.Repeat(sign, depth)) + "1"
            : string.Concat(Enumerable.Repeat(open, depth)) + inner + string.Concat(Enumerable.Repeat(close, depth));
        var error = Assert.Throws<RuleParseException>(() => SqlFilter.Parse(text));
        Assert.Contains("nests deeper than 128 levels", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void ReasonableNesting_Parses() =>
        Assert.True(SqlFilter.Parse(new string('(', 100) + "1 = 1" + new string(')', 100)).Matches(RuleTestMessages.With()));
}
