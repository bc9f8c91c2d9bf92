using System.Net;
using System.Net.Sockets;

namespace Farm.Testing;

/// <summary>
/// A port for a server a test starts that cannot bind port 0 itself (PostgreSQL, Prometheus).
/// Picked below the kernel's ephemeral range: a port the OS hands out for port 0, released and
/// bound by the server a moment later, can meanwhile go to any outgoing connection of a test
/// running beside it. Below the range only an explicit bind can take it (`farm up` picks its
/// ports the same way). (Linked into each test project: tests/Shared.)
/// </summary>
public static class FreePorts
{
    private const int Lowest = 10000;

    public static int Pick()
    {
        var below = EphemeralLow();
        for (var attempt = 0; attempt < 1000 && below - Lowest > 100; attempt++)
        {
            var candidate = Random.Shared.Next(Lowest, below);
            if (IsFree(candidate))
            {
                return candidate;
            }
        }
        // No room below the range: the OS's pick, with the race above.
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    private static bool IsFree(int port)
    {
        try
        {
            using var listener = new TcpListener(IPAddress.Loopback, port);
            listener.Start();
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    private static int EphemeralLow()
    {
        try
        {
            var range = File.ReadAllText("/proc/sys/net/ipv4/ip_local_port_range").Split((char[])['\t', ' ', '\n'], StringSplitOptions.RemoveEmptyEntries);
            return int.Parse(range[0], System.Globalization.CultureInfo.InvariantCulture);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException)
        {
            return 32768; // Linux's default
        }
    }
}
