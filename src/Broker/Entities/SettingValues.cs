using Google.Protobuf.WellKnownTypes;

namespace Farm.Broker.Entities;

/// <summary>Conversions shared by the settings records of queues, topics and subscriptions.</summary>
internal static class SettingValues
{
    public static TimeSpan ToTimeSpan(Duration d, string name)
    {
        if (d.Seconds < 0 || d.Nanos < 0)
        {
            throw FarmErrors.Invalid($"{name} must be positive; got {d.Seconds}s.");
        }
        if (d.Seconds > QueueSettings.InfiniteTimeToLive.TotalSeconds)
        {
            return QueueSettings.InfiniteTimeToLive;
        }
        return d.ToTimeSpan();
    }

    public static string? NullIfEmpty(string s) => string.IsNullOrEmpty(s) ? null : s;
}
