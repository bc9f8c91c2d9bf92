using System.Globalization;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Overload;

/// <summary>
/// Load shedding: while this process is more than <see cref="BrokerOptions.ShedSendsAfter"/> behind its
/// work (<see cref="ThreadPoolLag"/>), new sends are refused with SERVICE_BUSY before anything is
/// stored (the SDK backs off and tries again), and so are new receive links. Receives, completes
/// and the links already open are served: they take work off the node. Without it an overloaded node queues ever more work until its answers, health checks and
/// HTTP/2 handshakes come so late that its clients take its connections for dead and cut them, and
/// every cut costs a reconnect and a retry on top.
/// </summary>
public sealed partial class SendShedding
{
    private readonly Func<TimeSpan> _lag;
    private readonly ILogger _logger;
    private long _shed;
    private long _receiveLinksShed;
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

    /// <summary>Receive links (Receive calls, links of receive sessions) refused so far.</summary>
    public long ReceiveLinksShed => Interlocked.Read(ref _receiveLinksShed);

    /// <summary>Throws the overload's SERVICE_BUSY when a send to <paramref name="entity"/> should be refused now.</summary>
    public void ThrowIfBehind(string entity) => ThrowIfBehind(ref _shed, entity, receiveLink: false);

    /// <summary>
    /// The same for a new receive link on <paramref name="entity"/>: opening one is work (the entity
    /// looked up or loaded, a proxy to its owner); fifteen thousand receivers opening at once put
    /// three nodes on 2 cores seconds behind before a message was sent. Links already open are
    /// served; their receivers take work off the node.
    /// </summary>
    public void ThrowIfBehindForReceiveLink(string entity) => ThrowIfBehind(ref _receiveLinksShed, entity, receiveLink: true);

    private void ThrowIfBehind(ref long refusedCount, string entity, bool receiveLink)
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
                LogCaughtUp(_logger, lag.TotalMilliseconds, Shed + ReceiveLinksShed - Interlocked.Read(ref _shedAtStart));
            }
            return;
        }
        Interlocked.Increment(ref refusedCount);
        if (Volatile.Read(ref _shedding) == 0 && Interlocked.Exchange(ref _shedding, 1) == 0)
        {
            Interlocked.Exchange(ref _shedAtStart, Shed + ReceiveLinksShed - 1);
            LogShedding(_logger, lag.TotalMilliseconds, Threshold.TotalMilliseconds);
        }
        var refused = receiveLink ? $"the receive link on '{entity}' was not opened" : $"the send to '{entity}' was not stored";
        throw FarmErrors.Overloaded(string.Create(CultureInfo.InvariantCulture,
            $"The node is {lag.TotalMilliseconds:0} ms behind its work (it refuses sends and new receive links past {Threshold.TotalMilliseconds:0} ms); {refused}, try again after a pause."));
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "This node is {LagMs:0} ms behind its work (more than {ThresholdMs:0} ms): it refuses new sends and receive links with SERVICE_BUSY until it catches up")]
    private static partial void LogShedding(ILogger logger, double lagMs, double thresholdMs);

    [LoggerMessage(Level = LogLevel.Information, Message = "This node caught up with its work ({LagMs:0} ms behind): it takes sends and receive links again; it refused {Refused} meanwhile")]
    private static partial void LogCaughtUp(ILogger logger, double lagMs, long refused);
}
