namespace Farm.Cli.Hosting;

/// <summary>A node serves its dashboard at the root of the HTTP address its Prometheus endpoint (/metrics) is on.</summary>
public static class DashboardUrl
{
    public static string Of(string metricsUrl) =>
        metricsUrl.EndsWith("/metrics", StringComparison.Ordinal) ? metricsUrl[..^"metrics".Length] : metricsUrl;
}
