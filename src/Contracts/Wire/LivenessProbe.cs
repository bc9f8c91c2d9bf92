using System.Collections.Concurrent;
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
/// (even an error) means the peer lives. One that does not come within <see cref="Timeout"/> aborts
/// every connection of the channel, so the calls on them fail at once as broken connections and
/// go elsewhere (the SDK's failover, a gateway's hold for the next owner). Sends are safe to repeat
/// (send records) and receivers reopen, so a busy peer mistaken for frozen costs a reconnect.
/// </summary>
internal sealed class LivenessProbe : DelegatingHandler
{
    /// <summary>How often a live peer is asked.</summary>
    public static readonly TimeSpan Interval = TimeSpan.FromMilliseconds(500);

    /// <summary>How long an answer may take: a node saturated for longer is taken for frozen.</summary>
    public static readonly TimeSpan Timeout = TimeSpan.FromSeconds(1.5);

    private static readonly Method<byte[], byte[]> HealthCheck = new(
        MethodType.Unary, "grpc.health.v1.Health", "Check",
        Marshallers.Create(static bytes => bytes, static bytes => bytes),
        Marshallers.Create(static bytes => bytes, static bytes => bytes));

    private readonly ConcurrentDictionary<Socket, byte> _sockets = new();
    private readonly CancellationTokenSource _stop = new();
    private int _aborts;

    public LivenessProbe(SocketsHttpHandler inner) : base(inner) => inner.ConnectCallback = ConnectAsync;

    /// <summary>How many times the probe found the peer silent and aborted its connections.</summary>
    public int Aborts => Volatile.Read(ref _aborts);

    /// <summary>Starts asking the peer behind <paramref name="channel"/> (the channel this handler serves).</summary>
    public void Start(GrpcChannel channel) => _ = ProbeAsync(channel.CreateCallInvoker(), _stop.Token);

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
        _sockets[socket] = 0;
        return new TrackedStream(socket, this);
    }

    private async Task ProbeAsync(CallInvoker invoker, CancellationToken stopping)
    {
        using var timer = new PeriodicTimer(Interval);
        try
        {
            while (await timer.WaitForNextTickAsync(stopping).ConfigureAwait(false))
            {
                if (_sockets.IsEmpty)
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
                    AbortConnections();
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

    private void AbortConnections()
    {
        Interlocked.Increment(ref _aborts);
        foreach (var socket in _sockets.Keys)
        {
            _sockets.TryRemove(socket, out _);
            try
            {
                socket.Shutdown(SocketShutdown.Both);
            }
            catch (SocketException)
            {
                // Already closed.
            }
            catch (ObjectDisposedException)
            {
                // Already closed.
            }
            socket.Dispose();
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

    /// <summary>The connection's stream; forgets its socket when the handler closes it.</summary>
    private sealed class TrackedStream(Socket socket, LivenessProbe owner) : NetworkStream(socket, ownsSocket: true)
    {
        protected override void Dispose(bool disposing)
        {
            owner._sockets.TryRemove(Socket, out _);
            base.Dispose(disposing);
        }
    }
}
