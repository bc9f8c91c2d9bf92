using System.Collections.Concurrent;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Net.Client;

namespace Farm.Gateway.Routing;

/// <summary>The generated clients of one broker this gateway calls, over one channel.</summary>
internal sealed record OwnerClients(GrpcChannel Channel, Messaging.MessagingClient Messaging, Contracts.V1.Management.ManagementClient Management, NodeControl.NodeControlClient NodeControl);

/// <summary>One gRPC channel per broker address this gateway forwards to, kept for the process's life.</summary>
internal sealed class OwnerChannels : IDisposable
{
    private readonly ConcurrentDictionary<string, OwnerClients> _clients = new(StringComparer.OrdinalIgnoreCase);

    public OwnerClients Get(string address) => _clients.GetOrAdd(address, static a =>
    {
        var channel = FarmChannels.Create(new Uri(a));
        return new OwnerClients(channel, new Messaging.MessagingClient(channel), new Contracts.V1.Management.ManagementClient(channel), new NodeControl.NodeControlClient(channel));
    });

    public void Dispose()
    {
        foreach (var clients in _clients.Values)
        {
            clients.Channel.Dispose();
        }
        _clients.Clear();
    }
}
