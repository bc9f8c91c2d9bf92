using Farm.Contracts.V1;

namespace Farm.Client.Tests;

public class PropertyValueTests
{
    public static TheoryData<object> SupportedValues() => new()
    {
        "text",
        42,
        42L,
        3.5,
        true,
        new byte[] { 1, 2, 3 },
        new DateTimeOffset(2024, 5, 6, 7, 8, 9, TimeSpan.Zero),
        TimeSpan.FromMilliseconds(1500),
        Guid.Parse("6f9619ff-8b86-d011-b42d-00cf4fc964ff"),
    };

    [Theory]
    [MemberData(nameof(SupportedValues))]
    public void Value_RoundTripsWithItsType(object value)
    {
        var back = PropertyValues.FromProto(PropertyValues.ToProto("p", value));

        Assert.Equal(value.GetType(), back!.GetType());
        Assert.Equal(value, back);
    }

    [Fact]
    public void Int_And_Long_MapToDistinctWireKinds()
    {
        Assert.Equal(PropertyValue.KindOneofCase.IntValue, PropertyValues.ToProto("p", 1).KindCase);
        Assert.Equal(PropertyValue.KindOneofCase.LongValue, PropertyValues.ToProto("p", 1L).KindCase);
    }

    [Fact]
    public void DateTimeOffset_WithOffset_KeepsTheInstant()
    {
        var local = new DateTimeOffset(2024, 1, 1, 12, 0, 0, TimeSpan.FromHours(2));

        var back = (DateTimeOffset)PropertyValues.FromProto(PropertyValues.ToProto("p", local))!;

        Assert.Equal(local.UtcDateTime, back.UtcDateTime);
    }

    [Fact]
    public void UnsupportedType_ThrowsNamingTheProperty()
    {
        var error = Assert.Throws<ArgumentException>(() => PropertyValues.ToProto("customer", new Uri("http://x")));

        Assert.Contains("'customer'", error.Message, StringComparison.Ordinal);
        Assert.Contains("Uri", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void NullValue_ThrowsNamingTheProperty()
    {
        var error = Assert.Throws<ArgumentException>(() => PropertyValues.ToProto("empty", null));

        Assert.Contains("'empty'", error.Message, StringComparison.Ordinal);
    }
}

public class ReceivedApplicationPropertiesTests
{
    private static FarmReceivedMessage Received(params (string Key, object Value)[] properties)
    {
        var message = new Message();
        foreach (var (key, value) in properties)
        {
            message.ApplicationProperties[key] = PropertyValues.ToProto(key, value);
        }
        return MessageMapper.FromProto(new ReceivedMessage { Message = message, SequenceNumber = 1 }, "q", settleable: false);
    }

    [Fact]
    public void LookUps_SeeEveryValueWithItsType()
    {
        var at = new DateTimeOffset(2026, 11, 27, 23, 0, 0, TimeSpan.Zero);
        var properties = Received(("name", "text"), ("count", 7), ("big", 7L), ("at", at), ("blob", new byte[] { 1, 2 })).ApplicationProperties;

        Assert.Equal(5, properties.Count);
        Assert.True(properties.ContainsKey("count"));
        Assert.False(properties.ContainsKey("missing"));
        Assert.False(properties.TryGetValue("missing", out _));
        Assert.Equal("text", properties["name"]);
        Assert.Equal(7, Assert.IsType<int>(properties["count"]));
        Assert.Equal(7L, Assert.IsType<long>(properties["big"]));
        Assert.Equal(at, properties["at"]);
        Assert.Equal(new byte[] { 1, 2 }, properties["blob"]);
        Assert.Throws<KeyNotFoundException>(() => properties["missing"]);
    }

    [Fact]
    public void Enumeration_GivesTheSamePairsAsLookUps()
    {
        var properties = Received(("a", "x"), ("b", 2)).ApplicationProperties;

        Assert.Equal(["a", "b"], properties.Keys.Order());
        Assert.Equal(new Dictionary<string, object?> { ["a"] = "x", ["b"] = 2 }, properties.ToDictionary());
        Assert.Equal("x", properties["a"]);
    }

    [Fact]
    public void ByteArrays_AreTheSameArrayOnEveryLookUp_AsADictionarysWouldBe()
    {
        var properties = Received(("blob", new byte[] { 9 })).ApplicationProperties;

        var first = (byte[])properties["blob"]!;
        first[0] = 10;

        Assert.Same(first, properties["blob"]);
        Assert.Equal(new byte[] { 10 }, properties.Single().Value);
    }

    [Fact]
    public void NoProperties_IsEmptyAndCannotBeChanged()
    {
        var properties = Received().ApplicationProperties;

        Assert.Empty(properties);
        Assert.IsNotType<Dictionary<string, object?>>(properties);
        // A copy for resending carries them over like any other.
        Assert.Empty(new FarmMessage(Received()).ApplicationProperties);
        Assert.Equal(3, new FarmMessage(Received(("n", 3))).ApplicationProperties["n"]);
    }
}
