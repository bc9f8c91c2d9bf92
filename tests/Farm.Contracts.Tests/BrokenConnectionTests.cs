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
    /// A loopback HTTP/2 peer that says hello (its SETTINGS, and the ack of the client's) and then
    /// reads everything and answers nothing, as a process stopped with SIGSTOP would after its kernel
    /// took the bytes: calls stay open, pings go unanswered.
    /// </summary>
    private sealed class FrozenHttp2Peer : IAsyncDisposable
    {
        private const byte SettingsFrame = 0x4;
        private const byte PingFrame = 0x6;
        private readonly TcpListener _listener;
        private readonly CancellationTokenSource _stop = new();
        private readonly Task _serving;
        private volatile bool _sawPing;

        private FrozenHttp2Peer()
        {
            _listener = new TcpListener(IPAddress.Loopback, 0);
            _listener.Start();
            _serving = ServeAsync();
        }

        public static FrozenHttp2Peer Start() => new();

        public Uri Address => new($"http://127.0.0.1:{((IPEndPoint)_listener.LocalEndpoint).Port}");

        public bool SawPing => _sawPing;

        private async Task ServeAsync()
        {
            using var socket = await _listener.AcceptSocketAsync(_stop.Token);
            await using var stream = new NetworkStream(socket, ownsSocket: false);
            var preface = new byte[24];
            await stream.ReadExactlyAsync(preface, _stop.Token);
            await stream.WriteAsync(Frame(SettingsFrame, flags: 0), _stop.Token);
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
                    await stream.WriteAsync(Frame(SettingsFrame, flags: 0x1), _stop.Token);
                }
                else if (header[3] == PingFrame)
                {
                    _sawPing = true;
                }
            }
        }

        private static byte[] Frame(byte type, byte flags) => [0, 0, 0, type, flags, 0, 0, 0, 0];

        public async ValueTask DisposeAsync()
        {
            await _stop.CancelAsync();
            _listener.Stop();
            try
            {
                await _serving;
            }
            catch (Exception e) when (e is OperationCanceledException or IOException or SocketException or EndOfStreamException)
            {
                // The client hung up or the test ended: the peer's job is done.
            }
            _stop.Dispose();
        }
    }
}
