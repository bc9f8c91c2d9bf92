using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using PropertyValue = Farm.Contracts.V1.PropertyValue;

namespace Farm.Client;

/// <summary>Application property values to and from farm.v1.PropertyValue.</summary>
internal static class PropertyValues
{
    public static PropertyValue ToProto(string name, object? value) => value switch
    {
        string s => new PropertyValue { StringValue = s },
        int i => new PropertyValue { IntValue = i },
        long l => new PropertyValue { LongValue = l },
        double d => new PropertyValue { DoubleValue = d },
        bool b => new PropertyValue { BoolValue = b },
        byte[] bytes => new PropertyValue { BytesValue = ByteString.CopyFrom(bytes) },
        DateTimeOffset dto => new PropertyValue { TimestampValue = Timestamp.FromDateTimeOffset(dto) },
        DateTime dt => new PropertyValue { TimestampValue = Timestamp.FromDateTime(dt.Kind == DateTimeKind.Utc ? dt : dt.ToUniversalTime()) },
        TimeSpan ts => new PropertyValue { DurationValue = Duration.FromTimeSpan(ts) },
        Guid g => new PropertyValue { GuidValue = g.ToString("D") },
        // Narrow integral and float types widen losslessly; Azure accepts them too.
        short or byte or sbyte or ushort => new PropertyValue { IntValue = Convert.ToInt32(value, System.Globalization.CultureInfo.InvariantCulture) },
        uint u => new PropertyValue { LongValue = u },
        float f => new PropertyValue { DoubleValue = f },
        null => throw new ArgumentException($"Application property '{name}' is null; null values are not supported.", nameof(value)),
        _ => throw new ArgumentException(
            $"Application property '{name}' has unsupported type {value.GetType().Name}; use string, int, long, double, bool, byte[], DateTimeOffset, TimeSpan or Guid.",
            nameof(value)),
    };

    public static object? FromProto(PropertyValue value) => value.KindCase switch
    {
        PropertyValue.KindOneofCase.StringValue => value.StringValue,
        PropertyValue.KindOneofCase.IntValue => value.IntValue,
        PropertyValue.KindOneofCase.LongValue => value.LongValue,
        PropertyValue.KindOneofCase.DoubleValue => value.DoubleValue,
        PropertyValue.KindOneofCase.BoolValue => value.BoolValue,
        PropertyValue.KindOneofCase.BytesValue => value.BytesValue.ToByteArray(),
        PropertyValue.KindOneofCase.TimestampValue => value.TimestampValue.ToDateTimeOffset(),
        PropertyValue.KindOneofCase.DurationValue => value.DurationValue.ToTimeSpan(),
        PropertyValue.KindOneofCase.GuidValue => Guid.TryParse(value.GuidValue, out var g) ? g : value.GuidValue,
        _ => null,
    };

    public static void CopyTo(IEnumerable<KeyValuePair<string, object?>>? source, Google.Protobuf.Collections.MapField<string, PropertyValue> target)
    {
        if (source is null)
        {
            return;
        }

        foreach (var (key, value) in source)
        {
            if (string.IsNullOrEmpty(key))
            {
                throw new ArgumentException("Application property names must not be empty.", nameof(source));
            }

            target[key] = ToProto(key, value);
        }
    }
}
