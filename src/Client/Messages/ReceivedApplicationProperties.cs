using System.Collections;
using System.Diagnostics.CodeAnalysis;
using Google.Protobuf.Collections;
using PropertyValue = Farm.Contracts.V1.PropertyValue;

namespace Farm.Client;

/// <summary>
/// A received message's application properties, read from the wire form as they are asked for:
/// a receiver that never looks at them (or only looks one up, as tracing does) pays for no
/// dictionary per message. Enumerating them converts them all once. Read-only, safe to share
/// between threads.
/// </summary>
internal sealed class ReceivedApplicationProperties(MapField<string, PropertyValue> wire) : IReadOnlyDictionary<string, object?>
{
    /// <summary>What a message without application properties gets: one shared empty dictionary.</summary>
    public static IReadOnlyDictionary<string, object?> Empty => System.Collections.ObjectModel.ReadOnlyDictionary<string, object?>.Empty;

    private Dictionary<string, object?>? _converted;

    public int Count => wire.Count;

    public bool ContainsKey(string key) => wire.ContainsKey(key);

    public bool TryGetValue(string key, [MaybeNullWhen(false)] out object? value)
    {
        if (_converted is null && wire.TryGetValue(key, out var one) && one.KindCase != PropertyValue.KindOneofCase.BytesValue)
        {
            // An immutable value (a string, or a boxed number or time) can be converted on each ask.
            value = PropertyValues.FromProto(one);
            return true;
        }
        // Byte arrays come from the one conversion of all: each ask sees the same array, as a dictionary's would.
        return Converted.TryGetValue(key, out value);
    }

    public object? this[string key] => TryGetValue(key, out var value) ? value : throw new KeyNotFoundException($"The application property '{key}' is not set.");

    public IEnumerable<string> Keys => Converted.Keys;

    public IEnumerable<object?> Values => Converted.Values;

    public IEnumerator<KeyValuePair<string, object?>> GetEnumerator() => Converted.GetEnumerator();

    IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();

    private Dictionary<string, object?> Converted => LazyInitializer.EnsureInitialized(ref _converted, () =>
    {
        var converted = new Dictionary<string, object?>(wire.Count, StringComparer.Ordinal);
        foreach (var (key, value) in wire)
        {
            converted[key] = PropertyValues.FromProto(value);
        }
        return converted;
    });
}
