using System.Net;
using Grpc.Net.Client;

namespace Farm.Contracts;

/// <summary>
/// The gRPC channel settings every Farm caller uses (SDK, CLI, and a gateway forwarding to an
/// owner): one place, so a frozen peer is noticed as fast from each of them.
/// </summary>
public static class FarmChannels
{
    /// <summary>Largest message either side accepts (grpc-dotnet's default is 4 MB).</summary>
    public const int MaxMessageSize = 16 * 1024 * 1024;

    /// <summary>
    /// How long a connection with calls open may stay silent before a ping is sent, and how long
    /// the ping may go unanswered. The channel's <see cref="LivenessProbe"/> leaves a frozen peer
    /// within about 2 s; the ping is the backstop (channels created without the probe, a peer whose
    /// health service answers but whose connection does not). Its timeout is long because a ping
    /// is answered only after everything the peer has not read yet on that connection, and an
    /// overloaded node can be seconds behind while it still sends: with 1.5 s, a node offered twice
    /// what it could do had its clients' connections cut by their own pings, and their reconnects
    /// made its backlog minutes. Neither may be under 1 s (SocketsHttpHandler refuses it).
    /// </summary>
    public static readonly TimeSpan KeepAlivePingDelay = TimeSpan.FromSeconds(1);

    public static readonly TimeSpan KeepAlivePingTimeout = TimeSpan.FromSeconds(10);

    public static readonly TimeSpan ConnectTimeout = TimeSpan.FromSeconds(5);

    /// <summary>A channel to one Farm endpoint (http://host:port). Share it: one per endpoint.</summary>
    /// <param name="probeLiveness">
    /// Ask the peer's health service twice a second while connected and abort the connections when
    /// it does not answer (<see cref="LivenessProbe"/>): a frozen peer is left within about 2 s. The
    /// keep-alive ping stays as the backstop.
    /// </param>
    public static GrpcChannel Create(Uri address, TimeSpan? keepAlivePingDelay = null, TimeSpan? keepAlivePingTimeout = null, bool probeLiveness = true)
    {
        ArgumentNullException.ThrowIfNull(address);
        var handler = new SocketsHttpHandler
        {
            // One HTTP/2 connection allows only as many concurrent streams as the server says;
            // beyond that, open more connections instead of queueing calls.
            EnableMultipleHttp2Connections = true,
            ConnectTimeout = ConnectTimeout,
            // Pings only while calls are open: a receive stream can sit idle for minutes, and a
            // dead broker must still be noticed.
            KeepAlivePingDelay = keepAlivePingDelay ?? KeepAlivePingDelay,
            KeepAlivePingTimeout = keepAlivePingTimeout ?? KeepAlivePingTimeout,
            KeepAlivePingPolicy = HttpKeepAlivePingPolicy.WithActiveRequests,
            PooledConnectionIdleTimeout = Timeout.InfiniteTimeSpan,
            // Farm addresses are direct; an HTTP proxy from the environment would not speak h2c.
            UseProxy = false,
            UseCookies = false,
            AllowAutoRedirect = false,
            AutomaticDecompression = DecompressionMethods.None,
        };
        var probe = probeLiveness ? new LivenessProbe(handler) : null;
        var channel = GrpcChannel.ForAddress(address, new GrpcChannelOptions
        {
            HttpHandler = (HttpMessageHandler?)probe ?? handler,
            DisposeHttpClient = true,
            MaxReceiveMessageSize = MaxMessageSize,
            MaxSendMessageSize = MaxMessageSize,
            // Every failure of a call, a cancellation too, is an RpcException with a status: a
            // broken connection can surface as a cancelled write, and callers must not mistake it
            // for their own cancellation. Callers check their own token.
        });
        probe?.Start(channel);
        return channel;
    }
}
