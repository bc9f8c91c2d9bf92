using Farm.Broker.Rules;
using Farm.Contracts.V1;
using static Farm.Broker.Tests.Rules.RuleTestMessages;

namespace Farm.Broker.Tests.Rules;

/// <summary>Correlation filters: every set condition must equal the message's value.</summary>
public sealed class CorrelationFilterTests
{
    private static KeyValuePair<string, string> Pair(string key, string value) => new(key, value);

    private static KeyValuePair<string, PropertyValue> Prop(string key, object value) => new(key, Property(value));

    [Fact]
    public void CorrelationId_MatchesOnlyAnEqualCorrelationId()
    {
        var filter = new CorrelationFilter(correlationId: "c1");
        Assert.True(filter.Matches(WithSystemProperties()));
        Assert.False(filter.Matches(Of(new Message { CorrelationId = "c2" })));
        Assert.False(filter.Matches(Of(new Message { CorrelationId = "C1" })));
        Assert.False(filter.Matches(Of(new Message())));
    }

    [Fact]
    public void EverySystemField_IsMatched()
    {
        var filter = new CorrelationFilter(
            correlationId: "c1", messageId: "m1", to: "dest", replyTo: "replies", subject: "shipping",
            sessionId: "s1", replyToSessionId: "rs", contentType: "application/json");
        Assert.True(filter.Matches(WithSystemProperties()));
    }

    [Theory]
    [InlineData("messageId")]
    [InlineData("to")]
    [InlineData("replyTo")]
    [InlineData("subject")]
    [InlineData("sessionId")]
    [InlineData("replyToSessionId")]
    [InlineData("contentType")]
    public void OneDifferingField_MeansNoMatch(string field)
    {
        var filter = new CorrelationFilter(
            correlationId: "c1",
            messageId: field == "messageId" ? "x" : "m1",
            to: field == "to" ? "x" : "dest",
            replyTo: field == "replyTo" ? "x" : "replies",
            subject: field == "subject" ? "x" : "shipping",
            sessionId: field == "sessionId" ? "x" : "s1",
            replyToSessionId: field == "replyToSessionId" ? "x" : "rs",
            contentType: field == "contentType" ? "x" : "application/json");
        Assert.False(filter.Matches(WithSystemProperties()));
    }

    [Fact]
    public void ApplicationProperties_MustAllExistWithEqualValues()
    {
        var filter = new CorrelationFilter(properties: [Prop("color", "red"), Prop("quantity", 10)]);
        Assert.True(filter.Matches(Order()));
        Assert.False(filter.Matches(With(("color", "red"))));
        Assert.False(filter.Matches(With(("color", "red"), ("quantity", 11))));
        Assert.False(filter.Matches(With(("color", "Red"), ("quantity", 10))));
    }

    [Fact]
    public void ApplicationProperty_Equality_IsTyped_WithNumericPromotion()
    {
        Assert.False(new CorrelationFilter(properties: [Prop("quantity", "10")]).Matches(Order()));
        Assert.True(new CorrelationFilter(properties: [Prop("quantity", 10L)]).Matches(Order()));
        Assert.True(new CorrelationFilter(properties: [Prop("quantity", 10.0)]).Matches(Order()));
        Assert.True(new CorrelationFilter(properties: [Prop("vip", true)]).Matches(Order()));
        Assert.False(new CorrelationFilter(properties: [Prop("vip", "true")]).Matches(Order()));
        Assert.True(new CorrelationFilter(properties: [Prop("id", Guid.Parse("6f9619ff-8b86-d011-b42d-00cf4fc964ff"))]).Matches(Order()));
    }

    [Fact]
    public void ApplicationPropertyNames_AreCaseInsensitive() =>
        Assert.True(new CorrelationFilter(properties: [Prop("COLOR", "red")]).Matches(Order()));

    [Fact]
    public void SystemAndApplicationConditions_AreAnded()
    {
        var filter = new CorrelationFilter(subject: "shipping", properties: [Prop("Label", "user-label")]);
        Assert.True(filter.Matches(WithSystemProperties()));
        Assert.False(new CorrelationFilter(subject: "shipping", properties: [Prop("Label", "other")]).Matches(WithSystemProperties()));
    }

    [Fact]
    public void FromPairs_MapsSysNamesAndKnownNamesToSystemFields_AndTheRestToApplicationProperties()
    {
        var filter = CorrelationFilter.FromPairs([
            Pair("sys.CorrelationId", "c1"),
            Pair("sys.label", "shipping"),
            Pair("To", "dest"),
            Pair("replytosessionid", "rs"),
            Pair("user.To", "user-to"),
            Pair("color", "red"),
        ]);

        Assert.Equal("c1", filter.CorrelationId);
        Assert.Equal("shipping", filter.Subject);
        Assert.Equal("dest", filter.To);
        Assert.Equal("rs", filter.ReplyToSessionId);
        Assert.Equal(2, filter.Properties.Count);
        Assert.Equal("user-to", filter.Properties["To"].StringValue);
        Assert.Equal("red", filter.Properties["color"].StringValue);

        var message = WithSystemProperties();
        message.Message.ApplicationProperties["To"] = Property("user-to");
        message.Message.ApplicationProperties["color"] = Property("red");
        Assert.True(filter.Matches(message));
    }

    [Fact]
    public void FromPairs_RejectsASysNameThatIsNotASystemProperty()
    {
        var error = Assert.Throws<RuleParseException>(() => CorrelationFilter.FromPairs([Pair("sys.Foo", "bar")]));
        Assert.StartsWith("'sys.Foo' is not a system property; a correlation filter matches sys.CorrelationId, sys.MessageId", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("sys.SequenceNumber")]
    [InlineData("sys.EnqueuedTimeUtc")]
    [InlineData("sys.deliverycount")]
    public void FromPairs_RejectsASystemPropertyACorrelationFilterCannotMatch(string key)
    {
        var error = Assert.Throws<RuleParseException>(() => CorrelationFilter.FromPairs([Pair(key, "1")]));
        Assert.Contains("cannot be matched by a correlation filter", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("sys.Label", "Subject")]
    [InlineData("CorrelationId", "sys.correlationid")]
    [InlineData("color", "COLOR")]
    public void FromPairs_RejectsTheSameConditionTwice(string first, string second) =>
        Assert.Throws<RuleParseException>(() => CorrelationFilter.FromPairs([Pair(first, "a"), Pair(second, "b")]));

    [Fact]
    public void FromPairs_RejectsNoPairsAndEmptyNames()
    {
        Assert.Throws<RuleParseException>(() => CorrelationFilter.FromPairs([]));
        Assert.Throws<RuleParseException>(() => CorrelationFilter.FromPairs([Pair("", "x")]));
    }

    [Fact]
    public void AFilterWithNoCondition_IsRejected()
    {
        Assert.Throws<RuleParseException>(() => new CorrelationFilter());
        Assert.Throws<RuleParseException>(() => new CorrelationFilter(correlationId: ""));
    }

    [Fact]
    public void AnApplicationPropertyWithoutAValue_IsRejected() =>
        Assert.Throws<RuleParseException>(() => new CorrelationFilter(properties: [new("a", new PropertyValue())]));

    [Fact]
    public void ToString_ShowsTheEquivalentSqlFilter()
    {
        var filter = new CorrelationFilter(correlationId: "it's", subject: "s", properties: [Prop("color", "red"), Prop("n", 3L)]);
        Assert.Equal("sys.CorrelationId = 'it''s' AND sys.Label = 's' AND [color] = 'red' AND [n] = 3", filter.ToString());
        var equivalent = SqlFilter.Parse(filter.ToString());
        var message = Of(new Message { CorrelationId = "it's", Subject = "s", ApplicationProperties = { ["color"] = Property("red"), ["n"] = Property(3L) } });
        Assert.True(filter.Matches(message));
        Assert.True(equivalent.Matches(message));
    }
}
