using System.Net;
using System.Net.Sockets;

namespace Farm.Testing;

/// <summary>
/// A loopback address no connection can be set up to, as a killed container's published port or a
/// host gone from the network: a listener that never accepts, whose accept queue is already full
/// (backlog 0 holds one connection, made here), so Linux drops every further SYN and a connect waits
/// until its own timeout. (Linked into each test project: tests/Shared.)
/// </summary>
public sealed class BlackHoleEndpoint : IDisposable
{
    private readonly Socket _listener = new(SocketType.Stream, ProtocolType.Tcp);
    private readonly Socket _filler = new(SocketType.Stream, ProtocolType.Tcp);

    private BlackHoleEndpoint()
    {
    }

    public Uri Address => new($"http://127.0.0.1:{((IPEndPoint)_listener.LocalEndPoint!).Port}");

    public static async Task<BlackHoleEndpoint> OpenAsync()
    {
        var hole = new BlackHoleEndpoint();
        hole._listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        hole._listener.Listen(0);
        // Completes at once: the kernel queues it for an accept that never comes, and the queue is full.
        await hole._filler.ConnectAsync(hole._listener.LocalEndPoint!);
        return hole;
    }

    public void Dispose()
    {
        _filler.Dispose();
        _listener.Dispose();
    }
}
