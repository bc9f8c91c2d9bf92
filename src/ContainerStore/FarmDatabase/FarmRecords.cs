namespace Farm.ContainerStore.FarmDatabase;

/// <summary>A broker node as the farm database knows it. Times are the database's clock.</summary>
public sealed record NodeRecord(long Id, string Address, string State, int ProcessId, DateTime HeartbeatAt, TimeSpan HeartbeatAge);

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

/// <summary>An entity (queue, later topic/subscription) and the container it lives in.</summary>
public sealed record EntityRecord(
    long Id,
    string Name,
    string Kind,
    long ContainerId,
    string PropertiesJson,
    DateTime CreatedAt,
    DateTime UpdatedAt);

public static class EntityKinds
{
    public const string Queue = "queue";
}

public sealed class EntityAlreadyExistsException(string name)
    : Exception($"The entity '{name}' already exists.")
{
    public string Name { get; } = name;
}
