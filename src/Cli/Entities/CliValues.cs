using System.CommandLine;
using System.Globalization;
using System.Text;
using System.Text.Encodings.Web;
using System.Text.Json;
using System.Text.Json.Nodes;

namespace Farm.Cli.Entities;

/// <summary>Parsing and printing shared by the entity and messaging commands.</summary>
internal static class CliValues
{
    /// <summary>The --json option of the entity commands' show, list, create and update.</summary>
    public static Option<bool> JsonOption() => new("--json") { Description = "Print JSON (stable snake_case names) instead of a table" };

    // Relaxed escaping keeps quotes and non-ASCII text readable; the output is never embedded in HTML.
    private static readonly JsonSerializerOptions JsonLine = new() { WriteIndented = false, Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping };
    private static readonly JsonSerializerOptions JsonIndented = new() { WriteIndented = true, Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping };

    /// <summary>
    /// A positive duration: 500ms, 30s, 5m, 1h, 1d (fractions allowed: 1.5h) or hh:mm:ss /
    /// d.hh:mm:ss. With <paramref name="allowInfinite"/>, "infinite" (or "max") means never.
    /// </summary>
    public static TimeSpan ParseDuration(string option, string text, bool allowInfinite = false)
    {
        var value = text.Trim();
        if (allowInfinite && (value.Equals("infinite", StringComparison.OrdinalIgnoreCase) || value.Equals("max", StringComparison.OrdinalIgnoreCase)))
        {
            return TimeSpan.MaxValue;
        }

        TimeSpan? parsed = null;
        if (value.Contains(':', StringComparison.Ordinal))
        {
            if (TimeSpan.TryParse(value, CultureInfo.InvariantCulture, out var span))
            {
                parsed = span;
            }
        }
        else
        {
            var (number, unit) = SplitUnit(value);
            if (double.TryParse(number, NumberStyles.Float, CultureInfo.InvariantCulture, out var amount) && double.IsFinite(amount))
            {
                var milliseconds = unit switch
                {
                    "ms" => amount,
                    "s" => amount * 1_000,
                    "m" => amount * 60_000,
                    "h" => amount * 3_600_000,
                    "d" => amount * 86_400_000,
                    _ => double.NaN,
                };
                if (!double.IsNaN(milliseconds) && Math.Abs(milliseconds) < TimeSpan.MaxValue.TotalMilliseconds / 2)
                {
                    parsed = TimeSpan.FromMilliseconds(milliseconds);
                }
            }
        }

        if (parsed is null)
        {
            var extra = allowInfinite ? ", or 'infinite'" : string.Empty;
            throw new CliException(ExitCodes.BadInput, $"{option} '{text}' is not a duration; use e.g. 500ms, 30s, 5m, 1h, 1d or hh:mm:ss{extra}.");
        }

        if (parsed.Value <= TimeSpan.Zero)
        {
            throw new CliException(ExitCodes.BadInput, $"{option} must be positive, not '{text}'.");
        }

        return parsed.Value;
    }

    /// <summary>Compact: the largest whole unit (30s, 5m, 1d), else hh:mm:ss; "infinite" for TimeSpan.MaxValue.</summary>
    public static string FormatDuration(TimeSpan value)
    {
        if (value == TimeSpan.MaxValue || value.TotalDays >= 3650000)
        {
            return "infinite";
        }

        if (value.Ticks % TimeSpan.TicksPerMillisecond != 0 || value.TotalMilliseconds < 1000)
        {
            return value.TotalMilliseconds.ToString("0.###", CultureInfo.InvariantCulture) + "ms";
        }

        foreach (var (unit, size) in new[] { ("d", TimeSpan.FromDays(1)), ("h", TimeSpan.FromHours(1)), ("m", TimeSpan.FromMinutes(1)), ("s", TimeSpan.FromSeconds(1)) })
        {
            if (value.Ticks % size.Ticks == 0)
            {
                return (value.Ticks / size.Ticks).ToString(CultureInfo.InvariantCulture) + unit;
            }
        }

        return value.ToString("c", CultureInfo.InvariantCulture);
    }

    /// <summary>Seconds as a JSON number; null for infinite (stable for scripts).</summary>
    public static JsonNode? DurationSeconds(TimeSpan value)
        => value == TimeSpan.MaxValue || value.TotalDays >= 3650000 ? null : JsonValue.Create(value.TotalSeconds);

    public static string Timestamp(DateTimeOffset? value)
        => value is { } v && v != default ? v.UtcDateTime.ToString("yyyy-MM-dd'T'HH:mm:ss.fff'Z'", CultureInfo.InvariantCulture) : "-";

    public static JsonNode? TimestampJson(DateTimeOffset? value)
        => value is { } v && v != default ? JsonValue.Create(v.UtcDateTime.ToString("yyyy-MM-dd'T'HH:mm:ss.fffffff'Z'", CultureInfo.InvariantCulture)) : null;

    public static string ToJsonLine(JsonNode node) => node.ToJsonString(JsonLine);

    public static string ToJsonIndented(JsonNode node) => node.ToJsonString(JsonIndented);

    public static string Table(string[] header, IEnumerable<string[]> rows)
    {
        var all = new List<string[]> { header };
        all.AddRange(rows);
        var widths = header.Select((_, column) => all.Max(row => row[column].Length)).ToArray();
        var text = new StringBuilder();
        foreach (var row in all)
        {
            text.AppendLine(string.Join("  ", row.Select((cell, column) => cell.PadRight(widths[column]))).TrimEnd());
        }

        return text.ToString();
    }

    public static string Number(long value) => value.ToString(CultureInfo.InvariantCulture);

    public static string Bool(bool value) => value ? "true" : "false";

    /// <summary>Whether the option was given on the command line (not just defaulted).</summary>
    public static bool IsGiven(ParseResult parseResult, Option option) => parseResult.GetResult(option) is { Implicit: false };

    private static (string Number, string Unit) SplitUnit(string value)
    {
        var i = value.Length;
        while (i > 0 && char.IsLetter(value[i - 1]))
        {
            i--;
        }

        return (value[..i].Trim(), value[i..].ToLowerInvariant());
    }
}
