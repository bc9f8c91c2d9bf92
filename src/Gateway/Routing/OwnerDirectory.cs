using System.Collections.Concurrent;
using Farm.Broker.Node;

namespace Farm.Gateway.Routing;

/// <summary>Where an entity lives, as this node knows it now.</summary>
/// <param name="ContainerId">The container the entity (or, for a subscription, its topic) is in.</param>
/// <param name="ServedHere">This node owns and serves that container.</param>
/// <param name="OwnerAddress">The live owner's address (this node's own when served here); null while the container is between owners.</param>
/// <param name="Epoch">The container's epoch as this node last saw it.</param>
internal readonly record struct EntityLocation(string Name, long ContainerId, bool ServedHere, string? OwnerAddress, long Epoch);

/// <summary>What routing needs to know: which node serves an entity.</summary>
internal interface IOwnerDirectory
{
    /// <summary>This node's own address.</summary>
    string Address { get; }

    /// <summary>Where <paramref name="entityName"/> lives; MESSAGING_ENTITY_NOT_FOUND when it does not exist.</summary>
    /// <param name="fresh">Unless served here, ask the farm database who owns the container now (a held call trying again), instead of what the last ownership pass saw.</param>
    Task<EntityLocation> LocateAsync(string entityName, CancellationToken cancellationToken, bool fresh = false);

    /// <summary>Forgets what is cached about an entity (deleted, or re-created elsewhere).</summary>
    void Forget(string entityName);

    /// <summary>
    /// Whether a send to <paramref name="entityPath"/> would run on this node's broker at once and
    /// wait for nothing but its commit (see <see cref="BrokerNode.IsLoadedSendTarget"/>); false when unsure.
    /// </summary>
    bool IsLoadedSendTargetHere(string entityPath);
}

/// <summary>
/// The gateway's owner directory: entity → container from the broker's entity index (the farm
/// database's records cached by name, so routing costs no query per call; learned in one read for
/// a container the node takes; forgotten when the owner says the entity is gone), container →
/// owner from the broker's <see cref="IOwnershipView"/>, which its ownership pass refreshes every
/// heartbeat, and which a held call refreshes for its container when it tries again (at most once
/// per <see cref="RefreshInterval"/> per container, however many calls are held).
/// </summary>
internal sealed class OwnerDirectory(BrokerNode node, TimeProvider time) : IOwnerDirectory
{
    /// <summary>How often one container's owner may be read from the farm database for held calls.</summary>
    public static readonly TimeSpan RefreshInterval = TimeSpan.FromMilliseconds(50);

    /// <summary>Container id → the last refresh of its owner (shared by every call held for it) and when it started.</summary>
    private readonly ConcurrentDictionary<long, (Task Refresh, long StartedAt)> _refreshes = new();

    private IOwnershipView Ownership => node;

    public string Address => Ownership.Address;

    public async Task<EntityLocation> LocateAsync(string entityName, CancellationToken cancellationToken, bool fresh = false)
    {
        var entity = await node.FindEntityAsync(entityName, cancellationToken).ConfigureAwait(false);
        if (fresh && !Ownership.ServesContainer(entity.ContainerId))
        {
            await RefreshAsync(entity.ContainerId, cancellationToken).ConfigureAwait(false);
        }
        var servedHere = Ownership.ServesContainer(entity.ContainerId);
        return new EntityLocation(entity.Name, entity.ContainerId, servedHere,
            servedHere ? Ownership.Address : Ownership.OwnerAddressOf(entity.ContainerId), Ownership.EpochOf(entity.ContainerId));
    }

    private Task RefreshAsync(long containerId, CancellationToken cancellationToken)
    {
        var now = time.GetTimestamp();
        var refresh = _refreshes.AddOrUpdate(containerId,
            _ => (Ownership.RefreshOwnerAsync(containerId, CancellationToken.None), now),
            (_, last) => last.Refresh.IsCompleted && time.GetElapsedTime(last.StartedAt, now) >= RefreshInterval
                ? (Ownership.RefreshOwnerAsync(containerId, CancellationToken.None), now)
                : last).Refresh;
        // A farm database that does not answer leaves the last pass's view: the hold tries again.
        return refresh.WaitAsync(cancellationToken).ContinueWith(static _ => { }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
    }

    /// <summary>Forgets the entity, and for a topic its subscriptions.</summary>
    public void Forget(string entityName) => node.ForgetEntity(entityName, withSubscriptions: true);

    public bool IsLoadedSendTargetHere(string entityPath) => node.IsLoadedSendTarget(entityPath);
}
