using System.Net;
using Microsoft.AspNetCore.Server.Kestrel.Core;

namespace Farm.Broker.Rpc;

public static class RpcKestrel
{
    /// <summary>
    /// Listens for gRPC on <paramref name="address"/>:<paramref name="port"/> (0: any free port) over
    /// HTTP/2 cleartext with prior knowledge, the way gRPC clients connect to an http:// address.
    /// Also sets Kestrel's server-wide HTTP/2 limits for gRPC traffic.
    /// </summary>
    public static void ListenGrpc(this KestrelServerOptions options, IPAddress address, int port)
    {
        ArgumentNullException.ThrowIfNull(options);

        var http2 = options.Limits.Http2;
        // Every open receive stream holds an HTTP/2 stream; the default of 100 per connection
        // would make a client with many receivers queue or open connection after connection.
        http2.MaxStreamsPerConnection = 1000;
        // The 64-128 KB defaults cap one stream at a window per round trip; batches of messages
        // need more in flight to fill the link.
        http2.InitialConnectionWindowSize = 8 * 1024 * 1024;
        http2.InitialStreamWindowSize = 4 * 1024 * 1024;
        // Notice dead clients on idle receive streams, so their credit and locks are released.
        http2.KeepAlivePingDelay = TimeSpan.FromSeconds(30);
        http2.KeepAlivePingTimeout = TimeSpan.FromSeconds(20);

        options.Listen(address, port, listen => listen.Protocols = HttpProtocols.Http2);
    }
}
