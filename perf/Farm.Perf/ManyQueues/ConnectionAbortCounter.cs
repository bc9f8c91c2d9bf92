using System.Diagnostics.Metrics;
using Farm.Contracts;

namespace Farm.Perf.ManyQueues;

/// <summary>
/// Counts the connections this process's Farm clients had cut by their liveness probe
/// (farm.client.connection.aborts): each one a node taken for frozen, and every delivery in flight
/// on it left to wait out its lock.
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
        _listener.SetMeasurementEventCallback<long>((_, value, _, _) => Interlocked.Add(ref _aborts, value));
        _listener.Start();
    }

    public long Aborts => Interlocked.Read(ref _aborts);

    public void Dispose() => _listener.Dispose();
}
