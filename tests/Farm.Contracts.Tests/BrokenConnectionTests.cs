using System.Net;
using System.Net.Sockets;
using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Contracts.Tests;

/// <summary>
/// How a frozen peer's failure reaches a caller: Grpc.Net.Client reports the keep-alive ping that
/// went unanswered as Internal, and <see cref="BrokenConnections"/> must read it as the broken
/// connection it is, while an Internal error a handler raised stays what it is.
/// </summary>
public sealed class BrokenConnectionTests
{
    [Fact]
    public async Task ACallToAPeerThatStopsAnswering_FailsAsABrokenConnection_ReadAsUnavailable()
    {
        await using var peer = FrozenHttp2Peer.Start();
        using var channel = FarmChannels.Create(peer.Address, keepAlivePingDelay: TimeSpan.FromSeconds(1), keepAlivePingTimeout: TimeSpan.FromSeconds(1), probeLiveness: false);
        var client = new Messaging.MessagingClient(channel);

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            client.PeekAsync(new PeekRequest { Entity = "q", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(30)).ResponseAsync);

        // Today this is Internal ("Error starting gRPC call. HttpRequestException: The HTTP/2 server
        // didn't respond to a ping request ..."), the very failure a full run once showed.
        Assert.True(error.IsBrokenConnection(), $"not read as a broken connection: {error.StatusCode} {error.Status.Detail}");
        Assert.Equal(StatusCode.Unavailable, error.AsUnavailableWhenBroken().StatusCode);
        Assert.True(peer.SawPing, "the call failed before the keep-alive ping went out");
    }

    [Fact]
    public async Task ACallToAPeerThatStopsAnswering_IsCutByTheLivenessProbe_LongBeforeAnyKeepAlivePing()
    {
        // Keep-alive five minutes out: only the probe's unanswered health check can end the call
        // before its deadline, and it must end as a broken connection, so callers go elsewhere.
        await using var peer = FrozenHttp2Peer.Start();
        using var channel = FarmChannels.Create(peer.Address, keepAlivePingDelay: TimeSpan.FromMinutes(5), keepAlivePingTimeout: TimeSpan.FromMinutes(5));
        var client = new Messaging.MessagingClient(channel);

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            client.PeekAsync(new PeekRequest { Entity = "q", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(60)).ResponseAsync);

        Assert.True(error.IsBrokenConnection(), $"not read as a broken connection: {error.StatusCode} {error.Status.Detail}");
        Assert.False(peer.SawPing, "a keep-alive ping went out: the probe did not cut the connection");
    }

    /// <summary>
    /// An overloaded peer answers its health check late but keeps sending: the probe must not take
    /// it for frozen (cutting an overloaded node's clients off only adds their reconnects to its
    /// load). Once it falls silent as well, the probe cuts it as before.
    /// </summary>
    [Fact]
    public async Task APeerThatAnswersNoHealthCheck_ButKeepsSending_IsNotCut_UntilItFallsSilent()
    {
        await using var peer = FrozenHttp2Peer.Start(chatter: true);
        using var channel = FarmChannels.Create(peer.Address, keepAlivePingDelay: TimeSpan.FromMinutes(5), keepAlivePingTimeout: TimeSpan.FromMinutes(5));
        var client = new Messaging.MessagingClient(channel);

        var late = await Assert.ThrowsAsync<RpcException>(() =>
            client.PeekAsync(new PeekRequest { Entity = "q", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(5)).ResponseAsync);

        Assert.Equal(StatusCode.DeadlineExceeded, late.StatusCode);
        // The peek and at least two health checks that went unanswered for their 1.5 s each.
        Assert.True(peer.CallsSeen >= 3, $"the peer saw {peer.CallsSeen} calls: the probe did not ask it");

        peer.FallSilent();
        var cut = await Assert.ThrowsAsync<RpcException>(() =>
            client.PeekAsync(new PeekRequest { Entity = "q", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(60)).ResponseAsync);

        Assert.True(cut.IsBrokenConnection(), $"not read as a broken connection: {cut.StatusCode} {cut.Status.Detail}");
    }

    /// <summary>
    /// A connection that carries only a quiet call (an idle receive stream) looks silent while the
    /// peer is busy on another: it is not cut while any connection to that peer still brings bytes,
    /// since the peer is then overloaded, not frozen, and what it just wrote to the quiet connection
    /// may still be on its way. Once the whole peer falls silent, every connection is cut.
    /// </summary>
    [Fact]
    public async Task AQuietConnection_IsNotCut_WhileAnotherConnectionToThePeerBringsBytes_UntilThePeerFallsSilent()
    {
        await using var peer = FrozenHttp2Peer.Start(chatter: true, oneCallPerConnection: true);
        using var channel = FarmChannels.Create(peer.Address, keepAlivePingDelay: TimeSpan.FromMinutes(5), keepAlivePingTimeout: TimeSpan.FromMinutes(5));
        var client = new Messaging.MessagingClient(channel);

        // The first call takes the first connection, the one that chatters; the second gets a quiet one.
        var busy = client.PeekAsync(new PeekRequest { Entity = "busy", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(60)).ResponseAsync;
        await peer.FirstCall.WaitAsync(TimeSpan.FromSeconds(30));
        var quiet = await Assert.ThrowsAsync<RpcException>(() =>
            client.PeekAsync(new PeekRequest { Entity = "quiet", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(5)).ResponseAsync);

        Assert.Equal(StatusCode.DeadlineExceeded, quiet.StatusCode);
        Assert.True(peer.ConnectionsSeen >= 2, $"the client opened {peer.ConnectionsSeen} connection(s): the quiet call shared the busy one");
        // Both calls and at least two health checks that went unanswered for their 1.5 s each.
        Assert.True(peer.CallsSeen >= 4, $"the peer saw {peer.CallsSeen} calls: the probe did not ask it");
        Assert.False(busy.IsCompleted, "the busy call ended while its connection brought bytes");

        peer.FallSilent();
        var cut = await Assert.ThrowsAsync<RpcException>(() => busy);

        Assert.True(cut.IsBrokenConnection(), $"not read as a broken connection: {cut.StatusCode} {cut.Status.Detail}");
    }

    [Fact]
    public async Task ARefusedConnection_IsDescribedInTheTransportsWords_NotExceptionNames()
    {
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        using var channel = FarmChannels.Create(new Uri($"http://127.0.0.1:{port}"));
        var client = new Messaging.MessagingClient(channel);

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            client.PeekAsync(new PeekRequest { Entity = "q", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(30)).ResponseAsync);

        var words = error.TransportFailure();
        Assert.NotNull(words);
        Assert.Contains("refused", words, StringComparison.OrdinalIgnoreCase);
        Assert.DoesNotContain("Exception", words, StringComparison.Ordinal);
        Assert.Null(new RpcException(new Status(StatusCode.Internal, "a bug in the handler")).TransportFailure());
    }

    /// <summary>
    /// A connection that cannot be set up (a killed container's published port, a host gone from the
    /// network) ends at the handler's ConnectTimeout, which Grpc.Net.Client reports as Cancelled: it
    /// must read as the unreachable peer it is, so the SDK goes to its next endpoint, not as the
    /// caller's own cancellation or an error to give up on. A clean-clone run of the compose farm
    /// once failed on exactly this: a survivor's address list still named the killed node.
    /// </summary>
    [Fact]
    public async Task AConnectionThatCannotBeSetUp_IsABrokenConnection_ReadAsUnavailable_InTheTransportsWords()
    {
        using var hole = await Farm.Testing.BlackHoleEndpoint.OpenAsync();
        using var channel = FarmChannels.Create(hole.Address);
        var client = new Messaging.MessagingClient(channel);

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            client.PeekAsync(new PeekRequest { Entity = "q", MaxMessages = 1 }, deadline: DateTime.UtcNow.AddSeconds(60)).ResponseAsync);

        Assert.Equal(StatusCode.Cancelled, error.StatusCode);
        Assert.True(error.IsConnectTimeout(), $"not read as a connect timeout: {error.StatusCode} {error.Status.DebugException}");
        Assert.True(error.IsBrokenConnection());
        Assert.Equal(StatusCode.Unavailable, error.AsUnavailableWhenBroken().StatusCode);
        Assert.Contains("ConnectTimeout", error.TransportFailure());
    }

    [Fact]
    public async Task TheCallersOwnCancellation_IsNotABrokenConnection()
    {
        using var hole = await Farm.Testing.BlackHoleEndpoint.OpenAsync();
        using var channel = FarmChannels.Create(hole.Address);
        var client = new Messaging.MessagingClient(channel);
        using var cancel = new CancellationTokenSource();

        var call = client.PeekAsync(new PeekRequest { Entity = "q", MaxMessages = 1 }, cancellationToken: cancel.Token).ResponseAsync;
        await cancel.CancelAsync();
        var error = await Assert.ThrowsAsync<RpcException>(() => call);

        Assert.Equal(StatusCode.Cancelled, error.StatusCode);
        Assert.False(error.IsConnectTimeout());
        Assert.False(error.IsBrokenConnection());
        Assert.Same(error, error.AsUnavailableWhenBroken());
        Assert.Null(error.TransportFailure());
    }

    [Fact]
    public void AnInternalErrorAHandlerRaised_IsNotABrokenConnection()
    {
        var raised = new RpcException(new Status(StatusCode.Internal, "a bug in the handler"));
        var withFarmError = new RpcException(new Status(StatusCode.Internal, "x", new HttpRequestException("y")), new Metadata { { FarmMetadata.ErrorTrailer, "SERVICE_BUSY" } });

        Assert.False(raised.IsBrokenConnection());
        Assert.Same(raised, raised.AsUnavailableWhenBroken());
        Assert.False(withFarmError.IsBrokenConnection());
        Assert.Equal(StatusCode.Internal, withFarmError.AsUnavailableWhenBroken().StatusCode);
    }

    /// <summary>
    /// A loopback HTTP/2 peer that says hello on each connection (its SETTINGS, and the ack of the
    /// client's) and then reads everything and answers nothing, as a process stopped with SIGSTOP
    /// would after its kernel took the bytes: calls stay open, pings go unanswered. With
    /// <c>chatter</c> it sends a PING of its own every 100 ms on its first connection until
    /// <see cref="FallSilent"/>: bytes keep coming, as from an overloaded node that still answers
    /// other calls but not these. With <c>oneCallPerConnection</c> its SETTINGS allow one stream
    /// at a time, so the client opens a connection per concurrent call.
    /// </summary>
    private sealed class FrozenHttp2Peer : IAsyncDisposable
    {
        private const byte HeadersFrame = 0x1;
        private const byte SettingsFrame = 0x4;
        private const byte PingFrame = 0x6;
        private const byte MaxConcurrentStreams = 0x3;
        private readonly TcpListener _listener;
        private readonly CancellationTokenSource _stop = new();
        private readonly CancellationTokenSource _silent = new();
        private readonly bool _chatter;
        private readonly bool _oneCallPerConnection;
        private readonly List<Task> _connections = [];
        private readonly Task _accepting;
        private readonly TaskCompletionSource _firstCall = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private volatile bool _sawPing;
        private int _calls;

        private FrozenHttp2Peer(bool chatter, bool oneCallPerConnection)
        {
            _chatter = chatter;
            _oneCallPerConnection = oneCallPerConnection;
            _listener = new TcpListener(IPAddress.Loopback, 0);
            _listener.Start();
            _accepting = AcceptAsync();
        }

        public static FrozenHttp2Peer Start(bool chatter = false, bool oneCallPerConnection = false) => new(chatter, oneCallPerConnection);

        /// <summary>Calls the client opened (HEADERS frames seen).</summary>
        public int CallsSeen => Volatile.Read(ref _calls);

        /// <summary>Completes when the first call reaches the peer.</summary>
        public Task FirstCall => _firstCall.Task;

        /// <summary>Connections the client opened.</summary>
        public int ConnectionsSeen
        {
            get
            {
                lock (_connections)
                {
                    return _connections.Count;
                }
            }
        }

        /// <summary>Stops the chatter: from now on nothing at all comes from the peer.</summary>
        public void FallSilent() => _silent.Cancel();

        public Uri Address => new($"http://127.0.0.1:{((IPEndPoint)_listener.LocalEndpoint).Port}");

        public bool SawPing => _sawPing;

        private async Task AcceptAsync()
        {
            while (!_stop.IsCancellationRequested)
            {
                var socket = await _listener.AcceptSocketAsync(_stop.Token);
                lock (_connections)
                {
                    _connections.Add(ServeAsync(socket, chatter: _chatter && _connections.Count == 0));
                }
            }
        }

        private async Task ServeAsync(Socket socket, bool chatter)
        {
            using var owned = socket;
            await using var stream = new NetworkStream(socket, ownsSocket: false);
            using var writing = new SemaphoreSlim(1, 1);
            var preface = new byte[24];
            await stream.ReadExactlyAsync(preface, _stop.Token);
            await WriteAsync(stream, writing, _oneCallPerConnection ? OneStreamSettings() : Frame(SettingsFrame, flags: 0));
            var chattering = chatter ? ChatterAsync(stream, writing) : Task.CompletedTask;
            var header = new byte[9];
            var acked = false;
            while (!_stop.IsCancellationRequested)
            {
                await stream.ReadExactlyAsync(header, _stop.Token);
                var length = (header[0] << 16) | (header[1] << 8) | header[2];
                await stream.ReadExactlyAsync(new byte[length], _stop.Token);
                if (header[3] == SettingsFrame && (header[4] & 0x1) == 0 && !acked)
                {
                    acked = true;
                    await WriteAsync(stream, writing, Frame(SettingsFrame, flags: 0x1));
                }
                else if (header[3] == PingFrame)
                {
                    _sawPing = true;
                }
                else if (header[3] == HeadersFrame)
                {
                    Interlocked.Increment(ref _calls);
                    _firstCall.TrySetResult();
                }
            }
            await chattering;
        }

        private async Task ChatterAsync(NetworkStream stream, SemaphoreSlim writing)
        {
            using var silent = CancellationTokenSource.CreateLinkedTokenSource(_stop.Token, _silent.Token);
            using var timer = new PeriodicTimer(TimeSpan.FromMilliseconds(100));
            try
            {
                while (await timer.WaitForNextTickAsync(silent.Token))
                {
                    // A PING of the peer's own (8 bytes of payload): the client reads it and acks it.
                    byte[] ping = [0, 0, 8, PingFrame, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
                    await WriteAsync(stream, writing, ping);
                }
            }
            catch (OperationCanceledException)
            {
                // Fallen silent, or the test ended.
            }
        }

        private async Task WriteAsync(NetworkStream stream, SemaphoreSlim writing, byte[] frame)
        {
            await writing.WaitAsync(_stop.Token);
            try
            {
                await stream.WriteAsync(frame, _stop.Token);
            }
            finally
            {
                writing.Release();
            }
        }

        private static byte[] Frame(byte type, byte flags) => [0, 0, 0, type, flags, 0, 0, 0, 0];

        /// <summary>SETTINGS with SETTINGS_MAX_CONCURRENT_STREAMS = 1.</summary>
        private static byte[] OneStreamSettings() => [0, 0, 6, SettingsFrame, 0, 0, 0, 0, 0, 0, MaxConcurrentStreams, 0, 0, 0, 1];

        public async ValueTask DisposeAsync()
        {
            await _stop.CancelAsync();
            _listener.Stop();
            Task[] served;
            lock (_connections)
            {
                served = [_accepting, .. _connections];
            }
            foreach (var task in served)
            {
                try
                {
                    await task;
                }
                catch (Exception e) when (e is OperationCanceledException or IOException or SocketException or EndOfStreamException)
                {
                    // The client hung up or the test ended: the peer's job is done.
                }
            }
            _stop.Dispose();
            _silent.Dispose();
        }
    }
}
