namespace Farm.ContainerStore.FarmDatabase;

/// <summary>A broker node as the farm database knows it. Times are the database's clock.</summary>
public sealed record NodeRecord(long Id, string Address, string State, int ProcessId, DateTime HeartbeatAt, TimeSpan HeartbeatAge)
{
    /// <summary>The node's Prometheus scrape URL (http://host:port/metrics), or null when it serves none.</summary>
    public string? MetricsAddress { get; init; }

    /// <summary>Where the node listens for AMQP 1.0 (amqp://host:port), or null when it does not.</summary>
    public string? AmqpAddress { get; init; }
}

public static class NodeStates
{
    public const string Active = "active";
    public const string Draining = "draining";
    public const string Stopped = "stopped";

    /// <summary>
    /// A live node proved the registered process gone (its process lock or database session is free)
    /// and released its containers: not live, whatever its last heartbeat says, so every survivor
    /// counts its share without it at once. A heartbeat from that process (a session that dropped
    /// while it lived) makes it active again; registering does too.
    /// </summary>
    public const string Crashed = "crashed";
}

/// <summary>
/// A message container. <see cref="Epoch"/> rises with every change of owner; the same number is
/// written into the container database as its fence.
/// </summary>
public sealed record ContainerRecord(
    long Id,
    string ConnectionString,
    long? OwnerNode,
    long Epoch,
    DateTime? LeaseExpiresAt,
    DateTime? OwnedSince,
    long EntityCount)
{
    /// <summary>The named database server its database is on; null: the farm database's own server.</summary>
    public string? Server { get; init; }
}

/// <summary>A database server containers may be placed on, and how many are.</summary>
public sealed record ServerRecord(string Name, string ConnectionString, long ContainerCount);

/// <summary>
/// One change of a container's owner: a take that raised its <see cref="Epoch"/> to this value,
/// from <see cref="FromNode"/> (0: none, or unknown) to <see cref="ToNode"/>. <see cref="Kind"/> is
/// one of <see cref="OwnershipChangeKinds"/>; <see cref="Unowned"/> is how long the container had no
/// serving owner before the take (null when unknown, as for a new container). <see cref="At"/> is the
/// take's time; both by the database's clock.
/// </summary>
public sealed record OwnershipChangeRecord(
    long ContainerId,
    long Epoch,
    long FromNode,
    long ToNode,
    string Kind,
    TimeSpan? Unowned,
    DateTime At);

/// <summary>What kind of change of owner a take was (<see cref="OwnershipChangeRecord.Kind"/>).</summary>
public static class OwnershipChangeKinds
{
    /// <summary>The container's first owner: it was never owned before.</summary>
    public const string First = "first";

    /// <summary>The previous owner released it on purpose (a move, a drain, rebalancing, a shutdown); unowned since the release.</summary>
    public const string Planned = "planned";

    /// <summary>
    /// Taken from another node that stopped serving without letting go (crashed, paused, cut off):
    /// its lease had run out, or a later process of that node found and released what it left.
    /// Unowned since the old owner was last known alive (its last heartbeat).
    /// </summary>
    public const string Failover = "failover";

    /// <summary>The node that held it took it back (a restart of the node, or a re-take after it lost the container); unowned as for the other kinds.</summary>
    public const string Restart = "restart";
}

/// <summary>
/// An entity (queue, topic or subscription) and the container it lives in. A subscription's
/// <see cref="ParentId"/> is its topic's id, its <see cref="Name"/> the path "topic/Subscriptions/sub",
/// and its container always the topic's.
/// </summary>
public sealed record EntityRecord(
    long Id,
    string Name,
    string Kind,
    long ContainerId,
    string PropertiesJson,
    DateTime CreatedAt,
    DateTime UpdatedAt,
    long? ParentId = null);

public static class EntityKinds
{
    public const string Queue = "queue";
    public const string Topic = "topic";
    public const string Subscription = "subscription";
}

/// <summary>
/// A rule of a subscription. <see cref="DefinitionJson"/> is the wire RuleProperties in protobuf
/// JSON form; the broker parses it (filter and action) when it loads the subscription.
/// </summary>
public sealed record RuleRecord(
    long Id,
    long SubscriptionId,
    string Name,
    string DefinitionJson,
    DateTime CreatedAt);

/// <summary>The subscription already has a rule of that name (case-insensitive).</summary>
public sealed class RuleAlreadyExistsException(string subscription, string name)
    : Exception($"The subscription '{subscription}' already has a rule named '{name}'.")
{
    public string Subscription { get; } = subscription;
    public string Name { get; } = name;
}

/// <summary>
/// What a shared access policy allows a client signing with its keys, as in Azure Service Bus:
/// Listen (receive), Send, Manage (administer; always comes with Send and Listen).
/// </summary>
[Flags]
public enum AccessRights
{
    None = 0,
    Listen = 1,
    Send = 2,
    Manage = 4,
}

/// <summary>
/// A shared access policy of the farm: a name (the SharedAccessKeyName of a connection string) and
/// two keys (base64 of 32 random bytes, as Azure's), either of which signs SharedAccessSignature
/// tokens. Two keys let a client move to a renewed key while the other one still works.
/// </summary>
public sealed record AccessPolicyRecord(
    string Name,
    AccessRights Rights,
    string PrimaryKey,
    string SecondaryKey,
    DateTimeOffset CreatedAt,
    DateTimeOffset UpdatedAt);

/// <summary>The policy every farm starts with, and how keys are made.</summary>
public static class AccessPolicies
{
    /// <summary>Azure's name for a namespace's first policy; a farm creates it when its database is first opened.</summary>
    public const string RootPolicyName = "RootManageSharedAccessKey";

    /// <summary>Every right: what <see cref="RootPolicyName"/> has.</summary>
    public const AccessRights AllRights = AccessRights.Manage | AccessRights.Send | AccessRights.Listen;

    /// <summary>A new key: 32 random bytes from the operating system's generator, base64 (44 characters), as Azure's keys are.</summary>
    public static string NewKey() => Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));

    /// <summary>
    /// The rights as stored: Manage always with Send and Listen (Azure requires both for it).
    /// Throws for none, or for bits that name no right.
    /// </summary>
    public static AccessRights Normalize(AccessRights rights)
    {
        if (rights == AccessRights.None || (rights & ~AllRights) != 0)
        {
            throw new ArgumentOutOfRangeException(nameof(rights), rights, "A policy needs at least one of Manage, Send and Listen, and nothing else.");
        }
        return rights.HasFlag(AccessRights.Manage) ? AllRights : rights;
    }
}

/// <summary>
/// Deleting the policy would leave the farm with no policy that has Manage, so nobody could
/// administer it over AMQP any more: the delete is refused.
/// </summary>
public sealed class LastManageAccessPolicyException(string name)
    : Exception($"The policy '{name}' is the farm's last one with Manage rights; create another with Manage before deleting it, so the farm never locks itself out.")
{
    public string Name { get; } = name;
}

public sealed class EntityAlreadyExistsException(string name)
    : Exception($"The entity '{name}' already exists.")
{
    public string Name { get; } = name;
}
