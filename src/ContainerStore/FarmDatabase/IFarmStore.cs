namespace Farm.ContainerStore.FarmDatabase;

/// <summary>
/// The farm database: nodes and heartbeats, containers and their leases, entities. Lease and
/// heartbeat times use the database's clock, never a node's.
/// </summary>
public interface IFarmStore : IAsyncDisposable
{
    /// <summary>
    /// Registers a node (or re-registers a known id) as active, heartbeat now, with where it serves
    /// metrics and where it listens for AMQP (each null when it does not).
    /// </summary>
    Task<NodeRecord> RegisterNodeAsync(long nodeId, string address, int processId, string? metricsAddress = null, string? amqpAddress = null, CancellationToken cancellationToken = default);

    /// <summary>
    /// Records a heartbeat of the process that registered the node (<paramref name="processId"/> at
    /// <paramref name="address"/>). False when another process has registered that node id since:
    /// the caller is no longer that node and must stop. Throws for an unknown node id.
    /// </summary>
    Task<bool> HeartbeatAsync(long nodeId, int processId, string address, CancellationToken cancellationToken = default);

    /// <summary>
    /// <see cref="HeartbeatAsync"/> blocking the calling thread, never waiting on the thread pool:
    /// for a node's lease-renewal thread, which must go on while the pool is seconds behind. Gives
    /// up after about <paramref name="timeout"/> (a command timeout; at least a second).
    /// </summary>
    bool Heartbeat(long nodeId, int processId, string address, TimeSpan timeout);

    Task SetNodeStateAsync(long nodeId, string state, CancellationToken cancellationToken = default);

    /// <summary>
    /// Marks node <paramref name="nodeId"/> <see cref="NodeStates.Crashed"/> while process
    /// <paramref name="processId"/> is the one registered and the node is active; false otherwise
    /// (another process registered since, or it is draining or stopped).
    /// </summary>
    Task<bool> MarkNodeCrashedAsync(long nodeId, int processId, CancellationToken cancellationToken = default);

    Task<IReadOnlyList<NodeRecord>> ListNodesAsync(CancellationToken cancellationToken = default);

    /// <summary>Creates a container record; the connection string is derived by the provider from the id.</summary>
    Task<ContainerRecord> CreateContainerAsync(Func<long, string> connectionStringForId, CancellationToken cancellationToken = default) =>
        CreateContainerAsync(connectionStringForId, server: null, cancellationToken);

    /// <summary>Creates a container record on the named database <paramref name="server"/> (null: the farm database's).</summary>
    Task<ContainerRecord> CreateContainerAsync(Func<long, string> connectionStringForId, string? server, CancellationToken cancellationToken = default);

    /// <summary>Registers a database server by name; null when the name is taken.</summary>
    Task<ServerRecord?> AddServerAsync(string name, string connectionString, CancellationToken cancellationToken = default);

    Task<IReadOnlyList<ServerRecord>> ListServersAsync(CancellationToken cancellationToken = default);

    /// <summary>Forgets a server no container is on; false when there is no such server or a container is on it.</summary>
    Task<bool> RemoveServerAsync(string name, CancellationToken cancellationToken = default);

    Task<IReadOnlyList<ContainerRecord>> ListContainersAsync(CancellationToken cancellationToken = default);

    Task<ContainerRecord?> GetContainerAsync(long containerId, CancellationToken cancellationToken = default);

    /// <summary>
    /// Takes or renews the lease of a container for a node: succeeds when the container is
    /// unowned, its lease has expired (database clock), or the node already owns it. The epoch
    /// rises by one whenever the owner changes, and a take that changes the owner records the
    /// change (<see cref="ListOwnershipChangesAsync"/>) in the same transaction. Returns the
    /// updated record, or null when another node holds a live lease.
    /// </summary>
    Task<ContainerRecord?> TryAcquireContainerAsync(long containerId, long nodeId, TimeSpan leaseDuration, CancellationToken cancellationToken = default);

    /// <summary>
    /// Releases a node's lease on a container (graceful hand-over); the epoch stays. A take by
    /// another node is then a planned move, by the same node a restart.
    /// </summary>
    Task ReleaseContainerAsync(long containerId, long nodeId, CancellationToken cancellationToken = default);

    /// <summary>
    /// Releases what an earlier process of the node left owned when it stopped without letting go
    /// (it crashed or was killed), as the node's next process starts; the epoch stays. A take by
    /// another node is then a failover, by the same node a restart, and either counts the container
    /// unowned since <paramref name="lastAliveAt"/>: that process's last heartbeat (database clock),
    /// or null when unknown.
    /// </summary>
    Task ReleaseAbandonedContainerAsync(long containerId, long nodeId, DateTime? lastAliveAt, CancellationToken cancellationToken = default);

    /// <summary>
    /// The newest changes of the containers' owners, newest first, at most <paramref name="limit"/>
    /// (at least 1); the farm database keeps the newest 1,000.
    /// </summary>
    Task<IReadOnlyList<OwnershipChangeRecord>> ListOwnershipChangesAsync(int limit, CancellationToken cancellationToken = default);

    /// <summary>
    /// Extends a lease the node holds at <paramref name="epoch"/>; false when the container has
    /// another owner or epoch since (taken over, or released). Unlike <see cref="TryAcquireContainerAsync"/>
    /// it never takes a container, so a renewal racing a release cannot take it back.
    /// </summary>
    Task<bool> RenewContainerLeaseAsync(long containerId, long nodeId, long epoch, TimeSpan leaseDuration, CancellationToken cancellationToken = default);

    /// <summary><see cref="RenewContainerLeaseAsync"/> blocking the calling thread, never waiting on the thread pool (see <see cref="Heartbeat"/>); gives up after about a lease.</summary>
    bool RenewContainerLease(long containerId, long nodeId, long epoch, TimeSpan leaseDuration);

    /// <summary>Creates an entity; throws <see cref="EntityAlreadyExistsException"/> when the name (case-insensitive) is taken.</summary>
    Task<EntityRecord> CreateEntityAsync(string name, string kind, long containerId, string propertiesJson, CancellationToken cancellationToken = default);

    /// <summary>Looks an entity up by name, case-insensitive.</summary>
    Task<EntityRecord?> GetEntityAsync(string name, CancellationToken cancellationToken = default);

    /// <summary>The entities with these ids that exist, in one read (in no particular order).</summary>
    Task<IReadOnlyList<EntityRecord>> GetEntitiesByIdAsync(IReadOnlyCollection<long> ids, CancellationToken cancellationToken = default);

    Task<IReadOnlyList<EntityRecord>> ListEntitiesAsync(string? kind = null, CancellationToken cancellationToken = default);

    Task<IReadOnlyList<EntityRecord>> ListEntitiesInContainerAsync(long containerId, CancellationToken cancellationToken = default);

    /// <summary>Replaces an entity's properties; returns the updated record, or null when it does not exist.</summary>
    Task<EntityRecord?> UpdateEntityAsync(string name, string propertiesJson, CancellationToken cancellationToken = default);

    /// <summary>
    /// Deletes an entity record, and with it (same transaction) its children (a topic's
    /// subscriptions) and their rules; false when it did not exist.
    /// </summary>
    Task<bool> DeleteEntityAsync(string name, CancellationToken cancellationToken = default);

    /// <summary>
    /// Creates a child entity (a subscription under its topic) in the parent's container, together
    /// with its first rule in one transaction. Throws <see cref="EntityAlreadyExistsException"/>
    /// when the name is taken and <see cref="KeyNotFoundException"/> when the parent is gone.
    /// </summary>
    Task<EntityRecord> CreateChildEntityAsync(long parentId, string name, string kind, string propertiesJson, string firstRuleName, string firstRuleJson, CancellationToken cancellationToken = default);

    /// <summary>A parent's children (a topic's subscriptions), by name.</summary>
    Task<IReadOnlyList<EntityRecord>> ListChildEntitiesAsync(long parentId, CancellationToken cancellationToken = default);

    /// <summary>Adds a rule; throws <see cref="RuleAlreadyExistsException"/> when the name (case-insensitive) is taken
    /// and <see cref="KeyNotFoundException"/> when the subscription is gone.</summary>
    Task<RuleRecord> CreateRuleAsync(long subscriptionId, string name, string definitionJson, CancellationToken cancellationToken = default);

    /// <summary>Deletes a rule by name (case-insensitive); false when there was none.</summary>
    Task<bool> DeleteRuleAsync(long subscriptionId, string name, CancellationToken cancellationToken = default);

    /// <summary>
    /// Replaces a rule's definition in one statement (its name, id and creation time stay), so the
    /// subscription never matches with neither the old nor the new rule; null when there is no such rule.
    /// </summary>
    Task<RuleRecord?> UpdateRuleAsync(long subscriptionId, string name, string definitionJson, CancellationToken cancellationToken = default);

    /// <summary>A subscription's rules in the order they were created.</summary>
    Task<IReadOnlyList<RuleRecord>> ListRulesAsync(long subscriptionId, CancellationToken cancellationToken = default);

    /// <summary>The rules of all of a topic's subscriptions (one query, for loading a topic), in creation order.</summary>
    Task<IReadOnlyList<RuleRecord>> ListRulesOfTopicAsync(long topicId, CancellationToken cancellationToken = default);

    /// <summary>
    /// The farm's shared access policies, by name (bytewise). Every farm has at least one with
    /// Manage: opening the farm database creates <see cref="AccessPolicies.RootPolicyName"/> when it has none.
    /// </summary>
    Task<IReadOnlyList<AccessPolicyRecord>> ListAccessPoliciesAsync(CancellationToken cancellationToken = default);

    /// <summary>A policy by name (exact, case-sensitive); null when there is none.</summary>
    Task<AccessPolicyRecord?> GetAccessPolicyAsync(string name, CancellationToken cancellationToken = default);

    /// <summary>
    /// Creates a policy with the keys given (rights normalised: Manage brings Send and Listen);
    /// null when the name is taken.
    /// </summary>
    Task<AccessPolicyRecord?> CreateAccessPolicyAsync(string name, AccessRights rights, string primaryKey, string secondaryKey, CancellationToken cancellationToken = default);

    /// <summary>
    /// Deletes a policy; false when there is none. Throws <see cref="LastManageAccessPolicyException"/>
    /// (and deletes nothing) when it is the last policy with Manage.
    /// </summary>
    Task<bool> DeleteAccessPolicyAsync(string name, CancellationToken cancellationToken = default);

    /// <summary>Replaces a policy's two keys (its rights stay); null when there is no such policy.</summary>
    Task<AccessPolicyRecord?> UpdateAccessPolicyKeysAsync(string name, string primaryKey, string secondaryKey, CancellationToken cancellationToken = default);

    /// <summary>
    /// A lock on node <paramref name="nodeId"/>'s id held by the database server for one session
    /// (<see cref="INodeSessionLock"/>), not yet taken; null where the database cannot tell a
    /// session's end (SQLite, where every node shares one machine and uses a lock file instead).
    /// </summary>
    INodeSessionLock? CreateNodeSessionLock(long nodeId);
}
