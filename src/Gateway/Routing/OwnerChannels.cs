using System.Collections.Concurrent;
using Farm.Contracts.Rpc;

namespace Farm.Gateway.Routing;

/// <summary>One gRPC channel per broker address this gateway forwards to, kept for the process's life.</summary>
internal sealed class OwnerChannels : IDisposable
{
    /// <summary>
    /// Marks a call as addressed to this broker itself: it answers NOT_OWNER instead of forwarding.
    /// Gateways set it on calls they forward (so a call never bounces between two nodes with
    /// different views of who owns what), and redirect-mode clients on calls to the owner.
    /// </summary>
    public const string DirectHeader = "farm-direct";

    public static readonly IReadOnlyDictionary<string, string> DirectHeaders = new Dictionary<string, string> { [DirectHeader] = "1" };

    private readonly ConcurrentDictionary<string, RpcChannel> _channels = new(StringComparer.OrdinalIgnoreCase);

    public RpcChannel Get(string address) => _channels.GetOrAdd(address, a => new RpcChannel(new Uri(a)));

    public void Dispose()
    {
        foreach (var channel in _channels.Values)
        {
            channel.Dispose();
        }
        _channels.Clear();
    }
}
