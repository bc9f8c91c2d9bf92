using System.Globalization;
using System.Text.RegularExpressions;

namespace Farm.Cli.EmulatorConfig;

/// <summary>
/// ISO 8601 durations as the emulator's Config.json writes them: <c>PT1H</c>, <c>PT20S</c>,
/// <c>P1DT12H</c>, <c>PT0.5S</c>, <c>P2W</c>. Years and months are refused: they have no fixed
/// length, and a message time to live should not depend on the calendar.
/// </summary>
internal static partial class IsoDuration
{
    [GeneratedRegex(@"^P(?:(?<y>\d+)Y)?(?:(?<mo>\d+)M)?(?:(?<w>\d+)W)?(?:(?<d>\d+)D)?(?:T(?:(?<h>\d+)H)?(?:(?<mi>\d+)M)?(?:(?<s>\d+(?:[.,]\d+)?)S)?)?$", RegexOptions.CultureInvariant)]
    private static partial Regex Pattern();

    /// <summary>The duration, or null with <paramref name="problem"/> saying why the text is not one.</summary>
    public static TimeSpan? TryParse(string text, out string? problem)
    {
        problem = null;
        var match = Pattern().Match(text);
        if (!match.Success || text == "P" || text.EndsWith('T'))
        {
            problem = $"'{text}' is not an ISO 8601 duration (e.g. PT1H, PT30S, P1D)";
            return null;
        }

        if (match.Groups["y"].Success || match.Groups["mo"].Success)
        {
            problem = $"'{text}': years and months have no fixed length; give days instead (e.g. P30D)";
            return null;
        }

        decimal seconds = 0;
        try
        {
            checked
            {
                seconds += Part(match, "w") * 7 * 86400;
                seconds += Part(match, "d") * 86400;
                seconds += Part(match, "h") * 3600;
                seconds += Part(match, "mi") * 60;
                seconds += Part(match, "s");
            }
        }
        catch (OverflowException)
        {
            seconds = decimal.MaxValue;
        }

        var maxSeconds = (decimal)TimeSpan.MaxValue.Ticks / TimeSpan.TicksPerSecond;
        if (seconds > maxSeconds)
        {
            problem = $"'{text}' is longer than the longest duration ({TimeSpan.MaxValue.Days} days)";
            return null;
        }

        return TimeSpan.FromTicks((long)decimal.Round(seconds * TimeSpan.TicksPerSecond));
    }

    private static decimal Part(Match match, string group)
    {
        var value = match.Groups[group];
        if (!value.Success)
        {
            return 0;
        }

        // 29 digits fit a decimal; a longer number is past any TimeSpan anyway.
        return value.Value.Length > 28
            ? throw new OverflowException()
            : decimal.Parse(value.Value.Replace(',', '.'), NumberStyles.AllowDecimalPoint, CultureInfo.InvariantCulture);
    }
}
