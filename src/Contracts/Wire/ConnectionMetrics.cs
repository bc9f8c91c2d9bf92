using System.Diagnostics.Metrics;

namespace Farm.Contracts;

/// <summary>
/// The channels' own metrics, under the SDK's meter name ("Farm.Client"), so an application that
/// collects the client's metrics gets them too; a node collects it for its forwarding channels.
/// </summary>
public static class ConnectionMetrics
{
    public const string MeterName = "Farm.Client";

    public static readonly Meter Meter = new(MeterName);
}
