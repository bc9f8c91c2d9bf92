using Farm.Broker.Telemetry;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;

namespace Farm.Gateway.Hosting;

/// <summary>
/// OpenTelemetry for a node: the broker's meter, ASP.NET Core's server metrics and spans (gRPC
/// calls, with the trace context callers send) and the .NET runtime's metrics; a Prometheus scrape
/// endpoint at <see cref="MetricsPath"/>, and OTLP export of metrics and spans when the standard
/// OTEL_EXPORTER_OTLP_ENDPOINT variable is set (without it the node makes no spans).
/// </summary>
internal static class NodeTelemetry
{
    public const string MetricsPath = "/metrics";

    /// <summary>The node's own spans (beyond ASP.NET Core's one per gRPC call): a forward to the owner.</summary>
    public const string SourceName = "Farm.Node";

    public static readonly System.Diagnostics.ActivitySource Source = new(SourceName);

    public static IServiceCollection AddNodeTelemetry(this IServiceCollection services, long nodeId)
    {
        var otlp = !string.IsNullOrWhiteSpace(Environment.GetEnvironmentVariable("OTEL_EXPORTER_OTLP_ENDPOINT"));
        var builder = services.AddOpenTelemetry();
        builder
            .ConfigureResource(resource => resource.AddService("farm-node", serviceInstanceId: $"node-{nodeId}"))
            .WithMetrics(metrics =>
            {
                metrics.AddMeter(BrokerMetrics.MeterName, Farm.Contracts.ConnectionMetrics.MeterName)
                    .AddAspNetCoreInstrumentation()
                    .AddRuntimeInstrumentation()
                    .AddPrometheusExporter();
                if (otlp)
                {
                    metrics.AddOtlpExporter();
                }
            });
        if (otlp)
        {
            // Spans only when something takes them: with no exporter, a listener would still make
            // and tag an Activity per gRPC call (about 2% of a node's CPU at many small calls).
            builder.WithTracing(tracing => tracing.AddSource(SourceName)
                .AddAspNetCoreInstrumentation(aspNet =>
                    // Scrapes and health probes are not worth a span each.
                    aspNet.Filter = http => !http.Request.Path.StartsWithSegments(MetricsPath) && !http.Request.Path.StartsWithSegments("/healthz"))
                .AddOtlpExporter());
        }

        return services;
    }

    public static void MapNodeTelemetry(this IEndpointRouteBuilder endpoints) =>
        endpoints.MapPrometheusScrapingEndpoint(MetricsPath);
}
