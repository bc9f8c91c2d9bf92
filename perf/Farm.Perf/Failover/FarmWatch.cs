using Farm.Client;

namespace Farm.Perf.Failover;

/// <summary>
/// Reads the farm's status (nodes, container owners) from one node's gateway at a time, skipping
/// nodes that are down, with no SDK retries: a status poll must not back off for seconds while a
/// node is dead. One administration client per node.
/// </summary>
internal sealed class FarmWatch(LocalFarm farm) : IDisposable
{
    /// <summary>A node whose heartbeat is older than this counts as dead (the node's own NodeTimeout).</summary>
    public static readonly TimeSpan NodeTimeout = TimeSpan.FromSeconds(3);

    private static readonly FarmClientOptions NoRetries = new()
    {
        RetryOptions = new FarmRetryOptions { MaxRetries = 0, TryTimeout = TimeSpan.FromSeconds(5) },
    };

    private readonly Dictionary<long, FarmAdministrationClient> _clients = [];

    /// <summary>The status as seen through the first of <paramref name="nodes"/> that answers; null when none does.</summary>
    public async Task<FarmStatusProperties?> TryGetStatusAsync(IEnumerable<long> nodes, CancellationToken cancellationToken)
    {
        foreach (var node in nodes)
        {
            try
            {
                return await ClientFor(node).GetFarmStatusAsync(cancellationToken).ConfigureAwait(false);
            }
            catch (FarmException)
            {
                // That node is down or busy: ask the next one.
            }
        }

        return null;
    }

    /// <summary>The status from any node; throws when no node answers.</summary>
    public async Task<FarmStatusProperties> GetStatusAsync(CancellationToken cancellationToken)
        => await TryGetStatusAsync(farm.NodeIds, cancellationToken).ConfigureAwait(false)
           ?? throw new InvalidOperationException("no node answered a status call");

    /// <summary>
    /// Balanced: all <paramref name="nodes"/> live (active, fresh heartbeat) and each owning
    /// <paramref name="perNode"/> containers; so no container is orphaned or between owners.
    /// </summary>
    public static bool IsBalanced(FarmStatusProperties status, IReadOnlyCollection<long> nodes, int perNode)
    {
        var live = status.Nodes.Where(IsLive).Select(n => n.Id).ToHashSet();
        return nodes.All(live.Contains)
            && nodes.All(n => status.Containers.Count(c => c.OwnerNode == n) == perNode)
            && status.Containers.All(c => c.OwnerNode is { } owner && live.Contains(owner));
    }

    public static bool IsLive(FarmNodeProperties node) => node.State == "active" && node.HeartbeatAge < NodeTimeout;

    /// <summary>"1:[1,4] 2:[2,5] 3:[3,6]": who owns what.</summary>
    public static string Describe(FarmStatusProperties status)
        => string.Join(' ', status.Containers.GroupBy(c => c.OwnerNode ?? 0).OrderBy(g => g.Key)
            .Select(g => $"{(g.Key == 0 ? "none" : g.Key.ToString(System.Globalization.CultureInfo.InvariantCulture))}:[{string.Join(',', g.Select(c => c.Id).Order())}]"));

    public void Dispose()
    {
        foreach (var client in _clients.Values)
        {
            client.Dispose();
        }
    }

    private FarmAdministrationClient ClientFor(long node)
    {
        if (!_clients.TryGetValue(node, out var client))
        {
            _clients[node] = client = new FarmAdministrationClient(farm.ConnectionString(redirect: false, only: [node]), NoRetries);
        }

        return client;
    }
}
