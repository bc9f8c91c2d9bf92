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

/// <summary>
/// The farm database's statements in one dialect. Each is read from the dialect's constant of the
/// same name (<c>SqliteSql.FarmDb</c>, <c>PostgresSql.FarmDb</c>), so the SQL stays in its file and the
/// list is written once; a dialect missing one fails at start, naming it.
/// </summary>
internal sealed class FarmSql
{
    public FarmSql(Type statements)
    {
        foreach (var property in typeof(FarmSql).GetProperties())
        {
            var constant = statements.GetField(property.Name, System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.Static)?.GetRawConstantValue() as string
                ?? throw new InvalidOperationException($"{statements.FullName} has no statement {property.Name}.");
            property.SetValue(this, constant);
        }
    }

    public string RegisterNode { get; private set; } = "";
    public string Heartbeat { get; private set; } = "";
    public string CountNode { get; private set; } = "";
    public string SetNodeState { get; private set; } = "";
    public string ListNodes { get; private set; } = "";
    public string InsertContainer { get; private set; } = "";
    public string SetContainerConnectionString { get; private set; } = "";
    public string ListContainers { get; private set; } = "";
    public string GetContainer { get; private set; } = "";
    public string TryAcquireContainer { get; private set; } = "";
    public string RenewContainerLease { get; private set; } = "";
    public string ReleaseContainer { get; private set; } = "";
    public string InsertEntity { get; private set; } = "";
    public string GetEntity { get; private set; } = "";
    public string GetEntityName { get; private set; } = "";
    public string ListEntities { get; private set; } = "";
    public string ListEntitiesOfKind { get; private set; } = "";
    public string ListEntitiesInContainer { get; private set; } = "";
    public string UpdateEntity { get; private set; } = "";
    public string DeleteEntity { get; private set; } = "";
    public string InsertChildEntity { get; private set; } = "";
    public string ListChildEntities { get; private set; } = "";
    public string InsertRule { get; private set; } = "";
    public string DeleteRule { get; private set; } = "";
    public string UpdateRule { get; private set; } = "";
    public string ListRules { get; private set; } = "";
    public string ListRulesOfTopic { get; private set; } = "";
}
