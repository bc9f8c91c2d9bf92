namespace Farm.Broker.Node;

/// <summary>
/// Who owns which container, as this node's last ownership pass (every heartbeat) saw the farm
/// database: what a gateway needs, beside the entity's container, to route a call.
/// </summary>
public interface IOwnershipView
{
    /// <summary>This node's own address.</summary>
    string Address { get; }

    /// <summary>True while this node owns and serves the container.</summary>
    bool ServesContainer(long containerId);

    /// <summary>The address of the live node that owns the container; null while it is between owners.</summary>
    string? OwnerAddressOf(long containerId);

    /// <summary>The container's epoch as this node last saw it (its own when it serves it).</summary>
    long EpochOf(long containerId);

    /// <summary>
    /// Reads the container's owner from the farm database now, not at the next ownership pass: for
    /// calls held while it is between owners, which should go to the new owner the moment it took it.
    /// </summary>
    Task RefreshOwnerAsync(long containerId, CancellationToken cancellationToken);
}
