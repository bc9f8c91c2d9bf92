namespace Farm.ContainerStore.FarmDatabase;

// Dapper targets of the farm database, shared by both dialects: each dialect's SQL aliases its
// columns to these names and hands times out as Unix milliseconds.

internal sealed class NodeRow
{
    public long Id { get; set; }
    public string Address { get; set; } = "";
    public string? MetricsAddress { get; set; }
    public string State { get; set; } = "";
    public int ProcessId { get; set; }
    public long HeartbeatAtMs { get; set; }
    public long HeartbeatAgeMs { get; set; }

    public NodeRecord ToRecord() =>
        new(Id, Address, State, ProcessId, UnixMs.ToUtc(HeartbeatAtMs), TimeSpan.FromMilliseconds(Math.Max(0, HeartbeatAgeMs))) { MetricsAddress = MetricsAddress };
}

internal sealed class ContainerRow
{
    public long Id { get; set; }
    public string ConnectionString { get; set; } = "";
    public long? OwnerNode { get; set; }
    public long Epoch { get; set; }
    public long? LeaseExpiresAtMs { get; set; }
    public long? OwnedSinceMs { get; set; }
    public long EntityCount { get; set; }

    public ContainerRecord ToRecord() =>
        new(Id, ConnectionString, OwnerNode, Epoch, UnixMs.ToUtc(LeaseExpiresAtMs), UnixMs.ToUtc(OwnedSinceMs), EntityCount);
}

internal sealed class EntityRow
{
    public long Id { get; set; }
    public string Name { get; set; } = "";
    public string Kind { get; set; } = "";
    public long ContainerId { get; set; }
    public string PropertiesJson { get; set; } = "";
    public long CreatedAtMs { get; set; }
    public long UpdatedAtMs { get; set; }
    public long? ParentId { get; set; }

    public EntityRecord ToRecord() => new(Id, Name, Kind, ContainerId, PropertiesJson, UnixMs.ToUtc(CreatedAtMs), UnixMs.ToUtc(UpdatedAtMs), ParentId);
}

internal sealed class RuleRow
{
    public long Id { get; set; }
    public long SubscriptionId { get; set; }
    public string Name { get; set; } = "";
    public string DefinitionJson { get; set; } = "";
    public long CreatedAtMs { get; set; }

    public RuleRecord ToRecord() => new(Id, SubscriptionId, Name, DefinitionJson, UnixMs.ToUtc(CreatedAtMs));
}

internal static class UnixMs
{
    public static DateTime ToUtc(long ms) => DateTime.UnixEpoch.AddMilliseconds(ms);

    public static DateTime? ToUtc(long? ms) => ms is { } value ? ToUtc(value) : null;
}

/// <summary>The farm database's statements in one dialect (each dialect's SQL file builds one).</summary>
internal sealed class FarmSql
{
    public required string RegisterNode { get; init; }
    public required string Heartbeat { get; init; }
    public required string CountNode { get; init; }
    public required string SetNodeState { get; init; }
    public required string ListNodes { get; init; }
    public required string InsertContainer { get; init; }
    public required string SetContainerConnectionString { get; init; }
    public required string ListContainers { get; init; }
    public required string GetContainer { get; init; }
    public required string TryAcquireContainer { get; init; }
    public required string RenewContainerLease { get; init; }
    public required string ReleaseContainer { get; init; }
    public required string InsertEntity { get; init; }
    public required string GetEntity { get; init; }
    public required string GetEntityName { get; init; }
    public required string ListEntities { get; init; }
    public required string ListEntitiesOfKind { get; init; }
    public required string ListEntitiesInContainer { get; init; }
    public required string UpdateEntity { get; init; }
    public required string DeleteEntity { get; init; }
    public required string InsertChildEntity { get; init; }
    public required string ListChildEntities { get; init; }
    public required string InsertRule { get; init; }
    public required string DeleteRule { get; init; }
    public required string UpdateRule { get; init; }
    public required string ListRules { get; init; }
    public required string ListRulesOfTopic { get; init; }
}
