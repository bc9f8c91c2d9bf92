namespace Farm.Broker.Node;

/// <summary>Where an entity lives, as this node knows it now.</summary>
/// <param name="ContainerId">The container the entity (or, for a subscription, its topic) is in.</param>
/// <param name="ServedHere">This node owns and serves that container.</param>
/// <param name="OwnerAddress">The live owner's address (this node's own when served here); null while the container is between owners.</param>
/// <param name="Epoch">The container's epoch as this node last saw it.</param>
public readonly record struct EntityLocation(string Name, long ContainerId, bool ServedHere, string? OwnerAddress, long Epoch);

/// <summary>
/// What a gateway needs of the broker to route a call: which node serves an entity. It reads the
/// farm database's ownership as of the node's last ownership pass (no query per call).
/// </summary>
public interface IOwnerDirectory
{
    /// <summary>This node's own address.</summary>
    string Address { get; }

    /// <summary>Where <paramref name="entityName"/> lives; MESSAGING_ENTITY_NOT_FOUND when it does not exist.</summary>
    Task<EntityLocation> LocateAsync(string entityName, CancellationToken cancellationToken);

    /// <summary>Forgets what is cached about an entity (deleted, or re-created elsewhere).</summary>
    void Forget(string entityName);
}
