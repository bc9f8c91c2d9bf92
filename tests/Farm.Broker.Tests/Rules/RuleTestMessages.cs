using Farm.Broker.Rules;
using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Tests.Rules;

/// <summary>Builds messages with typed application properties for rule tests.</summary>
internal static class RuleTestMessages
{
    public static readonly DateTimeOffset EnqueuedTime = new(2024, 1, 2, 3, 4, 5, TimeSpan.Zero);

    /// <summary>A message with the given application properties; a null value is a property without a value.</summary>
    public static Message Message(params (string Name, object? Value)[] properties)
    {
        var message = new Message { Body = ByteString.CopyFromUtf8("body") };
        foreach (var (name, value) in properties)
        {
            message.ApplicationProperties[name] = Property(value);
        }
        return message;
    }

    public static RuleMessage With(params (string Name, object? Value)[] properties) =>
        new(Message(properties), 42, EnqueuedTime);

    public static RuleMessage Of(Message message, long sequenceNumber = 42) => new(message, sequenceNumber, EnqueuedTime);

    public static PropertyValue Property(object? value) => value switch
    {
        null => new PropertyValue(),
        string s => new PropertyValue { StringValue = s },
        long l => new PropertyValue { LongValue = l },
        int i => new PropertyValue { IntValue = i },
        double d => new PropertyValue { DoubleValue = d },
        bool b => new PropertyValue { BoolValue = b },
        byte[] bytes => new PropertyValue { BytesValue = ByteString.CopyFrom(bytes) },
        DateTime t => new PropertyValue { TimestampValue = Timestamp.FromDateTime(DateTime.SpecifyKind(t, DateTimeKind.Utc)) },
        TimeSpan t => new PropertyValue { DurationValue = Duration.FromTimeSpan(t) },
        Guid g => new PropertyValue { GuidValue = g.ToString() },
        _ => throw new ArgumentException($"No property type for {value.GetType()}."),
    };

    /// <summary>The standard message of the filter tests.</summary>
    public static RuleMessage Order() => With(
        ("color", "red"),
        ("quantity", 10),
        ("count", 7L),
        ("price", 2.5),
        ("vip", true),
        ("empty", null),
        ("zero", 0),
        ("name with space", "spaced"),
        ("HR-EmployeeID", "e-17"),
        ("placed", new DateTime(2024, 1, 1, 0, 0, 0, DateTimeKind.Utc)),
        ("wait", TimeSpan.FromMinutes(5)),
        ("id", Guid.Parse("6f9619ff-8b86-d011-b42d-00cf4fc964ff")),
        ("blob", new byte[] { 1, 2, 3 }),
        ("pattern", "r%"),
        ("twoChars", "ab"),
        ("propName", "color"),
        ("badSys", "sys.Nope"));

    /// <summary>A message with every system property a sender can set.</summary>
    public static RuleMessage WithSystemProperties() => new(
        new Message
        {
            MessageId = "m1",
            CorrelationId = "c1",
            SessionId = "s1",
            Subject = "shipping",
            ContentType = "application/json",
            To = "dest",
            ReplyTo = "replies",
            ReplyToSessionId = "rs",
            TimeToLive = Duration.FromTimeSpan(TimeSpan.FromMinutes(1)),
            ApplicationProperties = { ["Label"] = new PropertyValue { StringValue = "user-label" } },
        },
        42,
        EnqueuedTime)
    {
        DeliveryCount = 3,
    };

    public static bool? Evaluate(string filter, RuleMessage message) => SqlFilter.Parse(filter).Evaluate(message);

    public static object? Value(Message message, string name) => message.ApplicationProperties[name].KindCase switch
    {
        PropertyValue.KindOneofCase.None => null,
        PropertyValue.KindOneofCase.StringValue => message.ApplicationProperties[name].StringValue,
        PropertyValue.KindOneofCase.LongValue => message.ApplicationProperties[name].LongValue,
        PropertyValue.KindOneofCase.IntValue => message.ApplicationProperties[name].IntValue,
        PropertyValue.KindOneofCase.DoubleValue => message.ApplicationProperties[name].DoubleValue,
        PropertyValue.KindOneofCase.BoolValue => message.ApplicationProperties[name].BoolValue,
        PropertyValue.KindOneofCase.GuidValue => message.ApplicationProperties[name].GuidValue,
        PropertyValue.KindOneofCase.DurationValue => message.ApplicationProperties[name].DurationValue.ToTimeSpan(),
        PropertyValue.KindOneofCase.TimestampValue => message.ApplicationProperties[name].TimestampValue.ToDateTime(),
        var kind => throw new ArgumentException($"Unexpected kind {kind}."),
    };
}
