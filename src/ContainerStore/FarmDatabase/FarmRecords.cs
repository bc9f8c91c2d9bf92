namespace Farm.ContainerStore.FarmDatabase;

/// <summary>A broker node as the farm database knows it. Times are the database's clock.</summary>
public sealed record NodeRecord(long Id, string Address, string State, int ProcessId, DateTime HeartbeatAt, TimeSpan HeartbeatAge)
{
    /// <summary>The node's Prometheus scrape URL (http://host:port/metrics), or null when it serves none.</summary>
    public string? MetricsAddress { get; init; }
}

public static class NodeStates
{
    public const string Active = "active";
    public const string Draining = "draining";
    public const string Stopped = "stopped";
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
    long EntityCount);

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

public sealed class EntityAlreadyExistsException(string name)
    : Exception($"The entity '{name}' already exists.")
{
    public string Name { get; } = name;
}
