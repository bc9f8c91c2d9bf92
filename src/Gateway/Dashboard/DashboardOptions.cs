namespace Farm.Gateway.Dashboard;

/// <summary>
/// The dashboard's settings, from the node's command line: <c>--dashboard-remote-control</c> opens
/// the control endpoints to callers off loopback; <c>--farm-cli PATH</c> names the `farm` CLI
/// (farm.dll) that kills, pauses, resumes, stops and starts node processes, as `farm node` does.
/// </summary>
internal sealed record DashboardOptions
{
    /// <summary>Off by default: only a caller on this machine (loopback) may change the farm through the page.</summary>
    public bool RemoteControl { get; init; }

    /// <summary>farm.dll of the CLI that started this farm; null when the node was started some other way.</summary>
    public string? FarmCli { get; init; }

    /// <summary>How often the live view is rebuilt while someone watches.</summary>
    public TimeSpan RefreshInterval { get; init; } = TimeSpan.FromSeconds(1);
}
