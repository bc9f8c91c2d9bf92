using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Proto = Farm.Contracts.V1;

namespace Farm.Client.Tests;

public class RuleMappingTests
{
    [Fact]
    public void DefaultRule_IsTheTrueFilterNamedDefault_AndSendsNoFilter()
    {
        var options = new CreateRuleOptions();

        var proto = RuleMapper.ToProto(options);

        Assert.Equal("$Default", options.Name);
        Assert.IsType<TrueRuleFilter>(options.Filter);
        Assert.Equal("$Default", proto.Name);
        Assert.Equal(Proto.RuleProperties.FilterOneofCase.None, proto.FilterCase);
        Assert.Equal(string.Empty, proto.SqlAction);
    }

    [Fact]
    public void SqlFilter_AndAction_GoOnTheWireAsWritten()
    {
        var options = new CreateRuleOptions("red", new SqlRuleFilter("color = 'red' AND user.quantity > 10"))
        {
            Action = new SqlRuleAction("SET priority = 'high'; REMOVE temp"),
        };

        var proto = RuleMapper.ToProto(options);

        Assert.Equal("red", proto.Name);
        Assert.Equal("color = 'red' AND user.quantity > 10", proto.SqlFilter.Expression);
        Assert.Equal("SET priority = 'high'; REMOVE temp", proto.SqlAction);
    }

    [Fact]
    public void FalseFilter_IsSentAsSql()
    {
        var proto = RuleMapper.ToProto(new CreateRuleOptions("none", new FalseRuleFilter()));

        Assert.Equal("1=0", proto.SqlFilter.Expression);
    }

    [Fact]
    public void CorrelationFilter_SendsOnlyTheFieldsItSets()
    {
        var filter = new CorrelationRuleFilter("order-1") { Subject = "created", ContentType = "application/json" };

        var proto = RuleMapper.ToProto(new CreateRuleOptions("c", filter)).CorrelationFilter;

        Assert.Equal("order-1", proto.CorrelationId);
        Assert.Equal("created", proto.Subject);
        Assert.Equal("application/json", proto.ContentType);
        Assert.False(proto.HasMessageId);
        Assert.False(proto.HasTo);
        Assert.False(proto.HasReplyTo);
        Assert.False(proto.HasSessionId);
        Assert.False(proto.HasReplyToSessionId);
        Assert.Empty(proto.ApplicationProperties);
    }

    [Fact]
    public void CorrelationFilter_ApplicationProperties_KeepTheirTypes()
    {
        var when = new DateTimeOffset(2026, 3, 4, 5, 6, 7, TimeSpan.Zero);
        var id = Guid.NewGuid();
        var filter = new CorrelationRuleFilter();
        filter.ApplicationProperties["color"] = "red";
        filter.ApplicationProperties["quantity"] = 10;
        filter.ApplicationProperties["big"] = 1L << 40;
        filter.ApplicationProperties["ratio"] = 0.5;
        filter.ApplicationProperties["rush"] = true;
        filter.ApplicationProperties["at"] = when;
        filter.ApplicationProperties["for"] = TimeSpan.FromMinutes(5);
        filter.ApplicationProperties["id"] = id;
        filter.ApplicationProperties["raw"] = new byte[] { 1, 2 };
        filter.ApplicationProperties["sys.Subject"] = "passed through for the farm to read";

        var properties = RuleMapper.ToProto(new CreateRuleOptions("typed", filter)).CorrelationFilter.ApplicationProperties;

        Assert.Equal("red", properties["color"].StringValue);
        Assert.Equal(10, properties["quantity"].IntValue);
        Assert.Equal(1L << 40, properties["big"].LongValue);
        Assert.Equal(0.5, properties["ratio"].DoubleValue);
        Assert.True(properties["rush"].BoolValue);
        Assert.Equal(when, properties["at"].TimestampValue.ToDateTimeOffset());
        Assert.Equal(TimeSpan.FromMinutes(5), properties["for"].DurationValue.ToTimeSpan());
        Assert.Equal(id.ToString("D"), properties["id"].GuidValue);
        Assert.Equal(new byte[] { 1, 2 }, properties["raw"].BytesValue.ToByteArray());
        Assert.Equal("passed through for the farm to read", properties["sys.Subject"].StringValue);
    }

    [Fact]
    public void CorrelationFilter_NullOrUnsupportedValue_ThrowsNamingTheProperty()
    {
        var filter = new CorrelationRuleFilter();
        filter.ApplicationProperties["where"] = new Uri("http://x");

        var error = Assert.Throws<ArgumentException>(() => RuleMapper.ToProto(new CreateRuleOptions("c", filter)));

        Assert.Contains("'where'", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void RuleInfo_MapsBack_EveryKindOfFilter()
    {
        var when = new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);
        RuleProperties Map(Proto.RuleProperties rule) => RuleMapper.FromInfo(new Proto.RuleInfo
        {
            Topic = "t",
            Subscription = "s",
            Rule = rule,
            CreatedAt = Timestamp.FromDateTimeOffset(when),
        });

        var none = Map(new Proto.RuleProperties { Name = "$Default" });
        var trueSql = Map(new Proto.RuleProperties { Name = "all", SqlFilter = new Proto.SqlFilter { Expression = " 1 = 1 " } });
        var falseSql = Map(new Proto.RuleProperties { Name = "nothing", SqlFilter = new Proto.SqlFilter { Expression = "1=0" } });
        var sql = Map(new Proto.RuleProperties { Name = "red", SqlFilter = new Proto.SqlFilter { Expression = "color = 'red'" }, SqlAction = "SET x = 1" });
        var correlation = Map(new Proto.RuleProperties
        {
            Name = "corr",
            CorrelationFilter = new Proto.CorrelationFilter
            {
                CorrelationId = "c1",
                Subject = "s1",
                ApplicationProperties =
                {
                    ["color"] = new Proto.PropertyValue { StringValue = "red" },
                    ["quantity"] = new Proto.PropertyValue { LongValue = 7 },
                },
            },
        });

        Assert.Equal(("t", "s", "$Default", when), (none.TopicName, none.SubscriptionName, none.Name, none.CreatedAt));
        Assert.IsType<TrueRuleFilter>(none.Filter);
        Assert.Null(none.Action);
        Assert.IsType<TrueRuleFilter>(trueSql.Filter);
        Assert.IsType<FalseRuleFilter>(falseSql.Filter);
        Assert.Equal("color = 'red'", Assert.IsType<SqlRuleFilter>(sql.Filter).SqlExpression);
        Assert.Equal("SET x = 1", Assert.IsType<SqlRuleAction>(sql.Action).SqlExpression);
        var filter = Assert.IsType<CorrelationRuleFilter>(correlation.Filter);
        Assert.Equal(("c1", "s1"), (filter.CorrelationId, filter.Subject));
        Assert.Null(filter.MessageId);
        Assert.Equal("red", filter.ApplicationProperties["color"]);
        Assert.Equal(7L, filter.ApplicationProperties["quantity"]);
    }

    [Fact]
    public void CorrelationFilter_RoundTrips()
    {
        var filter = new CorrelationRuleFilter
        {
            CorrelationId = "c", MessageId = "m", To = "to", ReplyTo = "r", Subject = "s", SessionId = "sid", ReplyToSessionId = "rsid", ContentType = "ct",
        };
        filter.ApplicationProperties["n"] = 3;

        var wire = RuleMapper.ToProto(new CreateRuleOptions("x", filter));
        var back = Assert.IsType<CorrelationRuleFilter>(RuleMapper.FilterFromProto(Proto.RuleProperties.Parser.ParseFrom(wire.ToByteArray())));

        Assert.Equal(
            (filter.CorrelationId, filter.MessageId, filter.To, filter.ReplyTo, filter.Subject, filter.SessionId, filter.ReplyToSessionId, filter.ContentType),
            (back.CorrelationId, back.MessageId, back.To, back.ReplyTo, back.Subject, back.SessionId, back.ReplyToSessionId, back.ContentType));
        Assert.Equal(3, back.ApplicationProperties["n"]);
    }

    [Fact]
    public void CorrelationFilter_ReadsAsSql()
    {
        var filter = new CorrelationRuleFilter("o'1") { Subject = "new" };
        filter.ApplicationProperties["quantity"] = 5;
        filter.ApplicationProperties["color"] = "red";

        Assert.Equal("sys.CorrelationId = 'o''1' AND sys.Subject = 'new' AND color = 'red' AND quantity = 5", filter.ToString());
    }

    [Fact]
    public void InvalidRuleOptions_AreRejected()
    {
        Assert.Throws<ArgumentException>(() => new CreateRuleOptions(" "));
        Assert.Throws<ArgumentException>(() => new SqlRuleFilter(""));
        Assert.Throws<ArgumentException>(() => new SqlRuleAction(" "));
        Assert.Throws<ArgumentNullException>(() => new CreateRuleOptions { Filter = null! });
    }
}
