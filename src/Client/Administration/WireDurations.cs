using Google.Protobuf.WellKnownTypes;

namespace Farm.Client;

/// <summary>Entity durations to and from google.protobuf.Duration.</summary>
internal static class WireDurations
{
    /// <summary>protobuf's largest Duration (10,000 years) stands for TimeSpan.MaxValue, "never".</summary>
    private const long MaxDurationSeconds = 315_576_000_000;

    public static Duration ToDuration(TimeSpan value)
        => value.TotalSeconds >= MaxDurationSeconds ? new Duration { Seconds = MaxDurationSeconds } : Duration.FromTimeSpan(value);

    public static TimeSpan? Positive(Duration? value)
    {
        if (value is null)
        {
            return null;
        }

        if (value.Seconds >= MaxDurationSeconds)
        {
            return TimeSpan.MaxValue;
        }

        var span = value.ToTimeSpan();
        return span > TimeSpan.Zero ? span : null;
    }
}
