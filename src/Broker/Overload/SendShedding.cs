using System.Globalization;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Overload;

/// <summary>
/// Load shedding: while this process is more than <see cref="BrokerOptions.ShedSendsAfter"/> behind its
/// work (<see cref="ThreadPoolLag"/>), new sends are refused with SERVICE_BUSY before anything is
/// stored (the SDK backs off and tries again). Only sends: receives and completes take work off the
/// node. Without it an overloaded node queues ever more work until its answers, health checks and
/// HTTP/2 handshakes come so late that its clients take its connections for dead and cut them, and
/// every cut costs a reconnect and a retry on top.
/// </summary>
public sealed partial class SendShedding
{
    private readonly Func<TimeSpan> _lag;
    private readonly ILogger _logger;
    private long _shed;
    // Sends refused when shedding last began: the log says how many one episode refused.
    private long _shedAtStart;
    private int _shedding;

    /// <param name="threshold">Zero or less: never shed.</param>
    /// <param name="lag">The node's lag; <see cref="ThreadPoolLag.Shared"/>'s when null.</param>
    public SendShedding(TimeSpan threshold, ILogger logger, Func<TimeSpan>? lag = null)
    {
        Threshold = threshold;
        _logger = logger;
        _lag = lag ?? (() => ThreadPoolLag.Shared.Current);
    }

    public TimeSpan Threshold { get; }

    /// <summary>How far behind its work the node is now.</summary>
    public TimeSpan Lag => _lag();

    /// <summary>Sends refused so far.</summary>
    public long Shed => Interlocked.Read(ref _shed);

    /// <summary>Throws the overload's SERVICE_BUSY when a send to <paramref name="entity"/> should be refused now.</summary>
    public void ThrowIfBehind(string entity)
    {
        if (Threshold <= TimeSpan.Zero)
        {
            return;
        }
        var lag = _lag();
        if (lag < Threshold)
        {
            if (Volatile.Read(ref _shedding) == 1 && Interlocked.Exchange(ref _shedding, 0) == 1)
            {
                LogCaughtUp(_logger, lag.TotalMilliseconds, Shed - Interlocked.Read(ref _shedAtStart));
            }
            return;
        }
        var shed = Interlocked.Increment(ref _shed);
        if (Volatile.Read(ref _shedding) == 0 && Interlocked.Exchange(ref _shedding, 1) == 0)
        {
            Interlocked.Exchange(ref _shedAtStart, shed - 1);
            LogShedding(_logger, lag.TotalMilliseconds, Threshold.TotalMilliseconds);
        }
        throw FarmErrors.Overloaded(string.Create(CultureInfo.InvariantCulture,
            $"The node is {lag.TotalMilliseconds:0} ms behind its work (it refuses sends past {Threshold.TotalMilliseconds:0} ms); the send to '{entity}' was not stored, try again after a pause."));
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "This node is {LagMs:0} ms behind its work (more than {ThresholdMs:0} ms): it refuses new sends with SERVICE_BUSY until it catches up")]
    private static partial void LogShedding(ILogger logger, double lagMs, double thresholdMs);

    [LoggerMessage(Level = LogLevel.Information, Message = "This node caught up with its work ({LagMs:0} ms behind): it takes sends again; it refused {Refused} meanwhile")]
    private static partial void LogCaughtUp(ILogger logger, double lagMs, long refused);
}
