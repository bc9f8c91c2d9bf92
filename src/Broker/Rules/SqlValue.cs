using System.Globalization;
using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Rules;

internal enum SqlKind : byte
{
    /// <summary>SQL NULL, which is also what a missing user property evaluates to ("unknown").</summary>
    Null,
    Bool,
    Int,
    Long,
    Double,
    String,
    DateTime,
    TimeSpan,
    Guid,
    Bytes,
}

/// <summary>
/// One value during rule evaluation. Scalars live in <see cref="_bits"/> so that evaluating a
/// filter over numbers, booleans and times allocates nothing; strings, GUIDs and bytes ride in
/// <see cref="_ref"/>.
/// </summary>
internal readonly struct SqlValue
{
    private readonly long _bits;
    private readonly object? _ref;

    public SqlKind Kind { get; }

    private SqlValue(SqlKind kind, long bits, object? reference)
    {
        Kind = kind;
        _bits = bits;
        _ref = reference;
    }

    public static readonly SqlValue Null = default;
    public static readonly SqlValue True = new(SqlKind.Bool, 1, null);
    public static readonly SqlValue False = new(SqlKind.Bool, 0, null);

    public static SqlValue FromBool(bool value) => value ? True : False;
    public static SqlValue FromInt(int value) => new(SqlKind.Int, value, null);
    public static SqlValue FromLong(long value) => new(SqlKind.Long, value, null);
    public static SqlValue FromDouble(double value) => new(SqlKind.Double, BitConverter.DoubleToInt64Bits(value), null);
    public static SqlValue FromString(string? value) => value is null ? Null : new(SqlKind.String, 0, value);
    public static SqlValue FromDateTime(DateTime value) => new(SqlKind.DateTime, DateTime.SpecifyKind(value, DateTimeKind.Utc).Ticks, null);
    public static SqlValue FromTimeSpan(TimeSpan value) => new(SqlKind.TimeSpan, value.Ticks, null);
    public static SqlValue FromGuid(Guid value) => new(SqlKind.Guid, 0, value);
    public static SqlValue FromBytes(ByteString value) => new(SqlKind.Bytes, 0, value);

    /// <summary>Proto3 has no null string: an empty system string property is an unset one.</summary>
    public static SqlValue FromOptionalString(string value) => value.Length == 0 ? Null : new(SqlKind.String, 0, value);

    public bool IsNull => Kind == SqlKind.Null;
    public bool IsNumeric => Kind is SqlKind.Int or SqlKind.Long or SqlKind.Double;
    public bool IsIntegral => Kind is SqlKind.Int or SqlKind.Long;

    public bool AsBool => _bits != 0;
    public int AsInt => (int)_bits;
    public long AsLong => _bits;
    public double AsDouble => Kind == SqlKind.Double ? BitConverter.Int64BitsToDouble(_bits) : _bits;
    public string AsString => (string)_ref!;
    public DateTime AsDateTime => new(_bits, DateTimeKind.Utc);
    public TimeSpan AsTimeSpan => new(_bits);
    public Guid AsGuid => (Guid)_ref!;
    public ByteString AsBytes => (ByteString)_ref!;

    public static SqlValue FromProperty(PropertyValue? value)
    {
        if (value is null)
        {
            return Null;
        }
        return value.KindCase switch
        {
            PropertyValue.KindOneofCase.StringValue => new(SqlKind.String, 0, value.StringValue),
            PropertyValue.KindOneofCase.LongValue => FromLong(value.LongValue),
            PropertyValue.KindOneofCase.IntValue => FromInt(value.IntValue),
            PropertyValue.KindOneofCase.DoubleValue => FromDouble(value.DoubleValue),
            PropertyValue.KindOneofCase.BoolValue => FromBool(value.BoolValue),
            PropertyValue.KindOneofCase.BytesValue => FromBytes(value.BytesValue),
            PropertyValue.KindOneofCase.TimestampValue => FromDateTime(value.TimestampValue.ToDateTime()),
            PropertyValue.KindOneofCase.DurationValue => FromTimeSpan(value.DurationValue.ToTimeSpan()),
            // A malformed GUID still compares as the text the sender put there.
            PropertyValue.KindOneofCase.GuidValue => Guid.TryParse(value.GuidValue, out var guid)
                ? FromGuid(guid)
                : new(SqlKind.String, 0, value.GuidValue),
            _ => Null,
        };
    }

    /// <summary>The wire form of this value; SQL NULL becomes a property that exists with no value.</summary>
    public PropertyValue ToProperty() => Kind switch
    {
        SqlKind.Null => new PropertyValue(),
        SqlKind.Bool => new PropertyValue { BoolValue = AsBool },
        SqlKind.Int => new PropertyValue { IntValue = AsInt },
        SqlKind.Long => new PropertyValue { LongValue = AsLong },
        SqlKind.Double => new PropertyValue { DoubleValue = AsDouble },
        SqlKind.String => new PropertyValue { StringValue = AsString },
        SqlKind.DateTime => new PropertyValue { TimestampValue = Timestamp.FromDateTime(AsDateTime) },
        SqlKind.TimeSpan => new PropertyValue { DurationValue = Duration.FromTimeSpan(AsTimeSpan) },
        SqlKind.Guid => new PropertyValue { GuidValue = AsGuid.ToString("D") },
        SqlKind.Bytes => new PropertyValue { BytesValue = AsBytes },
        _ => throw new InvalidOperationException($"Unknown kind {Kind}."),
    };

    /// <summary>The value as a .NET object (tests and error messages).</summary>
    public object? ToObject() => Kind switch
    {
        SqlKind.Null => null,
        SqlKind.Bool => AsBool,
        SqlKind.Int => AsInt,
        SqlKind.Long => AsLong,
        SqlKind.Double => AsDouble,
        SqlKind.String => AsString,
        SqlKind.DateTime => AsDateTime,
        SqlKind.TimeSpan => AsTimeSpan,
        SqlKind.Guid => AsGuid,
        SqlKind.Bytes => AsBytes.ToByteArray(),
        _ => null,
    };

    /// <summary>Invariant text, as C# string concatenation and string-typed system properties need it.</summary>
    public string ToInvariantString() => Kind switch
    {
        SqlKind.Null => "",
        SqlKind.Bool => AsBool ? "True" : "False",
        SqlKind.Int => AsInt.ToString(CultureInfo.InvariantCulture),
        SqlKind.Long => AsLong.ToString(CultureInfo.InvariantCulture),
        SqlKind.Double => AsDouble.ToString("R", CultureInfo.InvariantCulture),
        SqlKind.String => AsString,
        SqlKind.DateTime => AsDateTime.ToString("O", CultureInfo.InvariantCulture),
        SqlKind.TimeSpan => AsTimeSpan.ToString("c", CultureInfo.InvariantCulture),
        SqlKind.Guid => AsGuid.ToString("D"),
        SqlKind.Bytes => Convert.ToBase64String(AsBytes.Span),
        _ => "",
    };

    public static string KindName(SqlKind kind) => kind switch
    {
        SqlKind.Null => "NULL",
        SqlKind.Bool => "boolean",
        SqlKind.Int => "int",
        SqlKind.Long => "long",
        SqlKind.Double => "double",
        SqlKind.String => "string",
        SqlKind.DateTime => "DateTime",
        SqlKind.TimeSpan => "TimeSpan",
        SqlKind.Guid => "Guid",
        SqlKind.Bytes => "bytes",
        _ => kind.ToString(),
    };

    public override string ToString() => Kind switch
    {
        SqlKind.Null => "NULL",
        SqlKind.String => "'" + AsString.Replace("'", "''", StringComparison.Ordinal) + "'",
        _ => ToInvariantString(),
    };
}
