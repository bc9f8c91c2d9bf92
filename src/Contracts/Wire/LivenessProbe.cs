using System.Collections.Concurrent;
using System.Diagnostics.Metrics;
using System.Net.Http;
using System.Net.Sockets;
using Grpc.Core;
using Grpc.Net.Client;

namespace Farm.Contracts;

/// <summary>
/// Finds a frozen peer (SIGSTOP, a hung host) within about two seconds, where HTTP/2 keep-alive
/// cannot: SocketsHttpHandler sends its ping at least 1 s after the last frame, waits at least 1 s,
/// and checks once a second, so a caller on a frozen gateway sat there for 2.5-4.5 s, as long as the
/// survivors take 3 s to take the frozen node's containers over. While the channel has connections,
/// this asks the peer's gRPC health service every <see cref="Interval"/>; an answer of any kind
/// (even an error) means the peer lives. When none comes within <see cref="Timeout"/> and every
/// connection of the channel has also been silent that long (no byte read, none waiting in the
/// socket), they are all aborted, so the calls on them fail at once as broken connections and go
/// elsewhere (the SDK's failover, a gateway's hold for the next owner). While any connection still
/// brings bytes, none is cut: an overloaded node answers its health check late but is not frozen,
/// and cutting its clients off would only add their reconnects to its load (15,000 receivers
/// reopening at once turned an overloaded node's backlog into minutes) and strand what it had just
/// sent on the connections it cut.
/// </summary>
internal sealed class LivenessProbe : DelegatingHandler
{
    /// <summary>How often a live peer is asked.</summary>
    public static readonly TimeSpan Interval = TimeSpan.FromMilliseconds(500);

    /// <summary>How long an answer may take, and how long a connection must have been silent to be cut then.</summary>
    public static readonly TimeSpan Timeout = TimeSpan.FromSeconds(1.5);

    private static readonly Counter<long> AbortCount = ConnectionMetrics.Meter.CreateCounter<long>(
        "farm.client.connection.aborts", "{connection}", "Connections aborted because their peer did not answer a health check and sent nothing for 1.5 s (taken for frozen).");

    private static readonly Method<byte[], byte[]> HealthCheck = new(
        MethodType.Unary, "grpc.health.v1.Health", "Check",
        Marshallers.Create(static bytes => bytes, static bytes => bytes),
        Marshallers.Create(static bytes => bytes, static bytes => bytes));

    private readonly ConcurrentDictionary<TrackedStream, byte> _connections = new();
    private readonly CancellationTokenSource _stop = new();

    /// <summary>The peer's address, as the abort metric names it.</summary>
    private string _target = "";

    public LivenessProbe(SocketsHttpHandler inner) : base(inner) => inner.ConnectCallback = ConnectAsync;

    /// <summary>Starts asking the peer behind <paramref name="channel"/> (the channel this handler serves).</summary>
    public void Start(GrpcChannel channel)
    {
        _target = channel.Target;
        _ = ProbeAsync(channel.CreateCallInvoker(), _stop.Token);
    }

    private async ValueTask<Stream> ConnectAsync(SocketsHttpConnectionContext context, CancellationToken cancellationToken)
    {
        var socket = new Socket(SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try
        {
            await socket.ConnectAsync(context.DnsEndPoint, cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
        var stream = new TrackedStream(socket, this);
        _connections[stream] = 0;
        return stream;
    }

    private async Task ProbeAsync(CallInvoker invoker, CancellationToken stopping)
    {
        using var timer = new PeriodicTimer(Interval);
        try
        {
            while (await timer.WaitForNextTickAsync(stopping).ConfigureAwait(false))
            {
                if (_connections.IsEmpty)
                {
                    // Not connected: nothing to watch, and a probe would connect an idle channel.
                    continue;
                }
                try
                {
                    using var call = invoker.AsyncUnaryCall(HealthCheck, null, new CallOptions(deadline: DateTime.UtcNow + Timeout, cancellationToken: stopping), []);
                    await call.ResponseAsync.ConfigureAwait(false);
                }
                catch (RpcException e) when (e.StatusCode == StatusCode.DeadlineExceeded && !stopping.IsCancellationRequested)
                {
                    AbortSilentConnections();
                }
                catch (RpcException)
                {
                    // Answered with an error, or could not connect: not a frozen connection.
                }
            }
        }
        catch (OperationCanceledException) when (stopping.IsCancellationRequested)
        {
            // The channel was disposed.
        }
    }

    /// <summary>
    /// Aborts the channel's connections when none of them brought anything for <see cref="Timeout"/>.
    /// One that still brings bytes shows the peer lives (overloaded, not frozen), and then none is
    /// cut: an idle receive stream's connection looks silent while the node is busy elsewhere, and
    /// cutting it stranded the deliveries the node had just written to it, still on their way, under
    /// locks that then ran their full duration (perf/README, session 36).
    /// </summary>
    private void AbortSilentConnections()
    {
        var silentSince = Environment.TickCount64 - (long)Timeout.TotalMilliseconds;
        var connections = _connections.Keys;
        foreach (var connection in connections)
        {
            if (!connection.SilentSince(silentSince))
            {
                return;
            }
        }
        foreach (var connection in connections)
        {
            _connections.TryRemove(connection, out _);
            AbortCount.Add(1, new KeyValuePair<string, object?>("server.address", _target));
            connection.Abort();
        }
    }

    protected override void Dispose(bool disposing)
    {
        if (disposing)
        {
            // Not disposed: the probe loop may still be reading its token.
            _stop.Cancel();
        }
        base.Dispose(disposing);
    }

    /// <summary>The connection's stream: notes when it last read a byte; forgets itself when the handler closes it.</summary>
    private sealed class TrackedStream(Socket socket, LivenessProbe owner) : NetworkStream(socket, ownsSocket: true)
    {
        // Nothing read yet: a connection the peer never said a word on is no sign that it lives (the
        // kernel of a stopped process still accepts connections).
        private long _lastRead = long.MinValue;

        /// <summary>Whether nothing was read since <paramref name="ticks"/> (Environment.TickCount64) and nothing waits to be.</summary>
        public bool SilentSince(long ticks)
        {
            if (Volatile.Read(ref _lastRead) >= ticks)
            {
                return false;
            }
            try
            {
                // Bytes in the socket that this process has not got round to reading (it is the busy one).
                return Socket.Available == 0;
            }
            catch (Exception e) when (e is SocketException or ObjectDisposedException)
            {
                return true;
            }
        }

        public void Abort()
        {
            try
            {
                Socket.Shutdown(SocketShutdown.Both);
            }
            catch (Exception e) when (e is SocketException or ObjectDisposedException)
            {
                // Already closed.
            }
            Socket.Dispose();
        }

        [System.Runtime.CompilerServices.AsyncMethodBuilder(typeof(System.Runtime.CompilerServices.PoolingAsyncValueTaskMethodBuilder<>))]
        public override async ValueTask<int> ReadAsync(Memory<byte> buffer, CancellationToken cancellationToken = default)
        {
            var read = await base.ReadAsync(buffer, cancellationToken).ConfigureAwait(false);
            if (read > 0)
            {
                Volatile.Write(ref _lastRead, Environment.TickCount64);
            }
            return read;
        }

        public override Task<int> ReadAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken) =>
            ReadAsync(buffer.AsMemory(offset, count), cancellationToken).AsTask();

        public override int Read(Span<byte> buffer)
        {
            var read = base.Read(buffer);
            if (read > 0)
            {
                Volatile.Write(ref _lastRead, Environment.TickCount64);
            }
            return read;
        }

        public override int Read(byte[] buffer, int offset, int count) => Read(buffer.AsSpan(offset, count));

        protected override void Dispose(bool disposing)
        {
            owner._connections.TryRemove(this, out _);
            base.Dispose(disposing);
        }
    }
}
