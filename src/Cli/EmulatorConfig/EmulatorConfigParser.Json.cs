using System.Globalization;
using System.Text.Json;

namespace Farm.Cli.EmulatorConfig;

// Reading JSON values with their paths: every problem names where it is.
internal sealed partial class EmulatorConfigParser
{
    /// <summary>Warns about each property of <paramref name="element"/> that is not one of <paramref name="known"/>.</summary>
    private void Known(JsonElement element, string? path, params string[] known)
    {
        foreach (var property in element.EnumerateObject())
        {
            if (!known.Contains(property.Name, StringComparer.OrdinalIgnoreCase))
            {
                _warnings.Add($"{Child(path, property.Name)}: not a setting Farm knows; ignored");
            }
        }
    }

    /// <summary>The entity's "Properties" object (absent: none given); warns about the ones Farm does not know.</summary>
    private (JsonElement? Properties, string Path) PropertiesOf(JsonElement entity, string path, string[] known)
    {
        var propertiesPath = path + ".Properties";
        if (Optional(entity, "Properties") is not { } properties)
        {
            return (null, propertiesPath);
        }

        Expect(properties, JsonValueKind.Object, propertiesPath);
        Known(properties, propertiesPath, known);
        return (properties, propertiesPath);
    }

    /// <summary>The elements of the array <paramref name="name"/> with their paths; absent or null: none.</summary>
    private static IEnumerable<(JsonElement Element, string Path)> Items(JsonElement parent, string path, string name)
    {
        if (Optional(parent, name) is not { } array)
        {
            return [];
        }

        var arrayPath = Child(path, name);
        Expect(array, JsonValueKind.Array, arrayPath);
        return array.EnumerateArray().Select((element, i) => (element, Index(arrayPath, i))).ToList();
    }

    /// <summary>The property <paramref name="name"/> (any case); null when absent or JSON null.</summary>
    private static JsonElement? Optional(JsonElement? parent, string name)
    {
        if (parent is not { ValueKind: JsonValueKind.Object } obj)
        {
            return null;
        }

        foreach (var property in obj.EnumerateObject())
        {
            if (string.Equals(property.Name, name, StringComparison.OrdinalIgnoreCase))
            {
                return property.Value.ValueKind == JsonValueKind.Null ? null : property.Value;
            }
        }

        return null;
    }

    private static JsonElement Required(JsonElement parent, string? path, string name, JsonValueKind kind)
    {
        var value = Optional(parent, name) ?? throw new EmulatorConfigException(Child(path, name), $"is required ({Article(kind)})");
        Expect(value, kind, Child(path, name));
        return value;
    }

    private static string RequiredString(JsonElement parent, string path, string name)
    {
        var value = Required(parent, path, name, JsonValueKind.String).GetString()!;
        return string.IsNullOrWhiteSpace(value) ? throw new EmulatorConfigException(Child(path, name), "must not be empty") : value;
    }

    private static string? OptionalString(JsonElement? parent, string path, string name)
    {
        if (Optional(parent, name) is not { } value)
        {
            return null;
        }

        Expect(value, JsonValueKind.String, Child(path, name));
        return value.GetString();
    }

    private static bool? OptionalBool(JsonElement? parent, string path, string name) => Optional(parent, name) switch
    {
        null => null,
        { ValueKind: JsonValueKind.True } => true,
        { ValueKind: JsonValueKind.False } => false,
        { } other => throw new EmulatorConfigException(Child(path, name), $"must be true or false, not {Describe(other)}"),
    };

    /// <summary>An ISO 8601 duration of more than zero; null when absent.</summary>
    private static TimeSpan? PositiveDuration(JsonElement? parent, string path, string name)
    {
        var text = OptionalString(parent, path, name);
        if (text is null)
        {
            return null;
        }

        var duration = IsoDuration.TryParse(text, out var problem) ?? throw new EmulatorConfigException(Child(path, name), problem!);
        return duration > TimeSpan.Zero ? duration : throw new EmulatorConfigException(Child(path, name), $"'{text}' must be more than zero");
    }

    /// <summary>The text of a duration property, quoted, for messages.</summary>
    private static string Text(JsonElement? parent, string name) => $"'{Optional(parent, name)?.GetString()}'";

    private static void Expect(JsonElement value, JsonValueKind kind, string path)
    {
        if (value.ValueKind != kind)
        {
            throw new EmulatorConfigException(path, $"must be {Article(kind)}, not {Describe(value)}");
        }
    }

    private static string Child(string? path, string name) => path is null ? name : path + "." + name;

    private static string Index(string path, int index) => string.Create(CultureInfo.InvariantCulture, $"{path}[{index}]");

    private static string Article(JsonValueKind kind) => kind switch
    {
        JsonValueKind.Object => "an object",
        JsonValueKind.Array => "an array",
        JsonValueKind.String => "a string",
        JsonValueKind.Number => "a number",
        _ => kind.ToString().ToLowerInvariant(),
    };

    /// <summary>A JSON value for a message: strings quoted, others by kind and text.</summary>
    private static string Describe(JsonElement value) => value.ValueKind switch
    {
        JsonValueKind.String => $"the string '{value.GetString()}'",
        JsonValueKind.Number => $"the number {value.GetRawText()}",
        JsonValueKind.True or JsonValueKind.False => value.GetRawText(),
        JsonValueKind.Null => "null",
        _ => Article(value.ValueKind),
    };
}
