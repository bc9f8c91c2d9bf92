using System.Diagnostics.Metrics;
using Farm.Contracts;

namespace Farm.Perf.ManyQueues;

/// <summary>
/// Counts the connections this process's Farm clients had cut by their liveness probe
/// (farm.client.connection.aborts): each one a node taken for frozen, and every delivery in flight
/// on it left to wait out its lock. Each is printed with its time.
/// </summary>
internal sealed class ConnectionAbortCounter : IDisposable
{
    private const string InstrumentName = "farm.client.connection.aborts";
    private readonly MeterListener _listener = new();
    private long _aborts;

    public ConnectionAbortCounter()
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == ConnectionMetrics.MeterName && instrument.Name == InstrumentName)
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((_, value, tags, _) =>
        {
            Interlocked.Add(ref _aborts, value);
            // Timed, to be matched with the node's GC pauses and logs.
            var peer = tags.Length > 0 ? tags[0].Value : "?";
            Console.Error.WriteLine($"perf: {DateTime.UtcNow:HH:mm:ss.fff} the SDK's liveness probe cut a connection to {peer}: no answer to its health check, nothing on any connection for 1.5 s");
        });
        _listener.Start();
    }

    public long Aborts => Interlocked.Read(ref _aborts);

    public void Dispose() => _listener.Dispose();
}
