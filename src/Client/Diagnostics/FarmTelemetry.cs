using System.Diagnostics;
using System.Diagnostics.Metrics;

namespace Farm.Client;

/// <summary>
/// The client's one ActivitySource and one Meter, both named "Farm.Client", with OpenTelemetry
/// messaging names. Everything checks for listeners first so an unobserved client pays nothing.
/// </summary>
internal static class FarmTelemetry
{
    public const string Name = "Farm.Client";

    public static readonly ActivitySource Source = new(Name);
    public static readonly Meter Meter = new(Name);

    private static readonly Counter<long> SentMessages = Meter.CreateCounter<long>("messaging.client.sent.messages", "{message}", "Messages sent.");
    private static readonly Counter<long> ConsumedMessages = Meter.CreateCounter<long>("messaging.client.consumed.messages", "{message}", "Messages received.");
    private static readonly Counter<long> Retries = Meter.CreateCounter<long>("farm.client.retries", "{retry}", "Operations retried after a transient failure.");
    /// <summary>
    /// The bucket boundaries OpenTelemetry's messaging conventions advise for these durations, in
    /// seconds (the SDK's defaults, 0 to 10,000, are meant for milliseconds).
    /// </summary>
    private static readonly IReadOnlyList<double> DurationBuckets = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

    private static readonly Histogram<double> OperationDuration = Meter.CreateHistogram<double>(
        "messaging.client.operation.duration", "s", "Duration of messaging operations.",
        tags: null, advice: new InstrumentAdvice<double> { HistogramBucketBoundaries = DurationBuckets });

    private static readonly Histogram<double> ProcessDuration = Meter.CreateHistogram<double>(
        "messaging.process.duration", "s", "Duration of a processor's message handler.",
        tags: null, advice: new InstrumentAdvice<double> { HistogramBucketBoundaries = DurationBuckets });

    /// <summary>Starts an activity for an operation, or null when nobody listens.</summary>
    public static Activity? StartOperation(string operation, string entityPath, ActivityKind kind = ActivityKind.Client)
    {
        if (!Source.HasListeners())
        {
            return null;
        }

        var activity = Source.StartActivity($"{operation} {entityPath}", kind);
        if (activity is { IsAllDataRequested: true })
        {
            activity.SetTag("messaging.system", "farm");
            activity.SetTag("messaging.operation.name", operation);
            activity.SetTag("messaging.operation.type", operation);
            activity.SetTag("messaging.destination.name", entityPath);
        }

        return activity;
    }

    public static void Failed(Activity? activity, Exception exception)
    {
        if (activity is null)
        {
            return;
        }

        activity.SetStatus(ActivityStatusCode.Error, exception.Message);
        activity.SetTag("error.type", exception is FarmException farm ? farm.Reason.ToString() : exception.GetType().Name);
    }

    public static void RecordSent(string entityPath, int count, long startTimestamp)
    {
        if (SentMessages.Enabled && count > 0)
        {
            SentMessages.Add(count, new KeyValuePair<string, object?>("messaging.destination.name", entityPath));
        }

        RecordDuration("send", entityPath, startTimestamp);
    }

    public static void RecordConsumed(string entityPath, int count)
    {
        if (ConsumedMessages.Enabled && count > 0)
        {
            ConsumedMessages.Add(count, new KeyValuePair<string, object?>("messaging.destination.name", entityPath));
        }
    }

    public static void RecordRetry(Exception? exception)
    {
        if (Retries.Enabled)
        {
            Retries.Add(1, new KeyValuePair<string, object?>("error.type", exception is FarmException farm ? farm.Reason.ToString() : exception?.GetType().Name));
        }
    }

    public static void RecordProcessed(string entityPath, long startTimestamp, Exception? failure)
    {
        if (startTimestamp != 0 && ProcessDuration.Enabled)
        {
            ProcessDuration.Record(
                Stopwatch.GetElapsedTime(startTimestamp).TotalSeconds,
                new KeyValuePair<string, object?>("messaging.system", "farm"),
                new KeyValuePair<string, object?>("messaging.destination.name", entityPath),
                new KeyValuePair<string, object?>("error.type", failure?.GetType().Name));
        }
    }

    public static long ProcessTimestamp() => ProcessDuration.Enabled ? Stopwatch.GetTimestamp() : 0;

    public static long Timestamp() => OperationDuration.Enabled ? Stopwatch.GetTimestamp() : 0;

    private static void RecordDuration(string operation, string entityPath, long startTimestamp)
    {
        if (startTimestamp != 0 && OperationDuration.Enabled)
        {
            OperationDuration.Record(
                Stopwatch.GetElapsedTime(startTimestamp).TotalSeconds,
                new KeyValuePair<string, object?>("messaging.operation.name", operation),
                new KeyValuePair<string, object?>("messaging.destination.name", entityPath));
        }
    }

    /// <summary>The application property Azure Service Bus clients carry a message's trace context in.</summary>
    public const string DiagnosticIdProperty = "Diagnostic-Id";

    /// <summary>The W3C name of the same; both are written, either is read.</summary>
    public const string TraceParentProperty = "traceparent";

    /// <summary>
    /// Stamps the trace context of <paramref name="activity"/> (the send) on each message that has
    /// none yet, so that whoever receives and processes it continues the same trace.
    /// </summary>
    public static void Inject(Activity? activity, IEnumerable<Contracts.V1.Message> messages)
    {
        if (activity is null || activity.IdFormat != ActivityIdFormat.W3C)
        {
            return;
        }

        foreach (var message in messages)
        {
            if (!message.ApplicationProperties.ContainsKey(DiagnosticIdProperty) && !message.ApplicationProperties.ContainsKey(TraceParentProperty))
            {
                var value = new Contracts.V1.PropertyValue { StringValue = activity.Id };
                message.ApplicationProperties[DiagnosticIdProperty] = value;
                message.ApplicationProperties[TraceParentProperty] = value;
            }
        }
    }

    /// <summary>
    /// Starts the "process" activity of one received message as a child of the context the sender
    /// stamped on it (<see cref="Inject"/>), or null when nobody listens.
    /// </summary>
    public static Activity? StartProcess(string entityPath, FarmReceivedMessage message)
    {
        if (!Source.HasListeners())
        {
            return null;
        }

        var carried = message.ApplicationProperties.TryGetValue(TraceParentProperty, out var traceParent) && traceParent is string w3c ? w3c
            : message.ApplicationProperties.TryGetValue(DiagnosticIdProperty, out var diagnosticId) && diagnosticId is string id ? id
            : null;
        ActivityContext.TryParse(carried, null, out var parent);
        var activity = Source.StartActivity($"process {entityPath}", ActivityKind.Consumer, parent);
        if (activity is { IsAllDataRequested: true })
        {
            activity.SetTag("messaging.system", "farm");
            activity.SetTag("messaging.operation.name", "process");
            activity.SetTag("messaging.operation.type", "process");
            activity.SetTag("messaging.destination.name", entityPath);
            activity.SetTag("messaging.message.id", message.MessageId);
        }

        return activity;
    }
}
