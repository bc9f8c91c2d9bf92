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
