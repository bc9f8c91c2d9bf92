using System.Diagnostics;
using System.Diagnostics.Metrics;
using OpenTelemetry;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;

namespace Farm.Cli;

/// <summary>
/// The CLI's one ActivitySource and one Meter ("Farm.Cli"): a span per command, around the SDK's own
/// ("Farm.Client") spans, and a count of commands by outcome. Exported over OTLP only when the
/// standard OTEL_EXPORTER_OTLP_ENDPOINT variable is set; otherwise nothing listens and nothing is paid.
/// </summary>
internal static class CliTelemetry
{
    public const string Name = "Farm.Cli";

    private static readonly ActivitySource Source = new(Name);
    private static readonly Meter Meter = new(Name);
    private static readonly Counter<long> Commands = Meter.CreateCounter<long>("farm.cli.commands", "{command}", "farm commands run, by command and exit code.");

    /// <summary>Starts the OTLP pipeline when the environment asks for one; dispose it to flush before exit.</summary>
    public static IDisposable? StartExport()
    {
        if (string.IsNullOrWhiteSpace(Environment.GetEnvironmentVariable("OTEL_EXPORTER_OTLP_ENDPOINT")))
        {
            return null;
        }
        var resource = ResourceBuilder.CreateDefault().AddService("farm-cli");
        var tracing = Sdk.CreateTracerProviderBuilder().SetResourceBuilder(resource).AddSource(Name, "Farm.Client").AddOtlpExporter().Build();
        var metrics = Sdk.CreateMeterProviderBuilder().SetResourceBuilder(resource).AddMeter(Name, "Farm.Client").AddOtlpExporter().Build();
        return new Pipelines(tracing, metrics);
    }

    public static Activity? StartCommand(string command) => Source.StartActivity($"farm {command}");

    public static void Finished(Activity? activity, string command, int exitCode)
    {
        activity?.SetTag("farm.cli.exit_code", exitCode);
        if (exitCode != 0)
        {
            activity?.SetStatus(ActivityStatusCode.Error);
        }
        if (Commands.Enabled)
        {
            Commands.Add(1, new TagList { { "farm.cli.command", command }, { "farm.cli.exit_code", exitCode } });
        }
    }

    private sealed class Pipelines(TracerProvider? tracing, MeterProvider? metrics) : IDisposable
    {
        public void Dispose()
        {
            tracing?.Dispose();
            metrics?.Dispose();
        }
    }
}
