namespace Farm.ContainerStore.FarmDatabase;

// Dapper targets of the farm database, shared by both dialects: each dialect's SQL aliases its
// columns to these names and hands times out as Unix milliseconds.

internal sealed class NodeRow
{
    public long Id { get; set; }
    public string Address { get; set; } = "";
    public string? MetricsAddress { get; set; }
    public string? AmqpAddress { get; set; }
    public string State { get; set; } = "";
    public int ProcessId { get; set; }
    public long HeartbeatAtMs { get; set; }
    public long HeartbeatAgeMs { get; set; }

    public NodeRecord ToRecord() =>
        new(Id, Address, State, ProcessId, UnixMs.ToUtc(HeartbeatAtMs), TimeSpan.FromMilliseconds(Math.Max(0, HeartbeatAgeMs))) { MetricsAddress = MetricsAddress, AmqpAddress = AmqpAddress };
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
    public string? Server { get; set; }

    public ContainerRecord ToRecord() =>
        new(Id, ConnectionString, OwnerNode, Epoch, UnixMs.ToUtc(LeaseExpiresAtMs), UnixMs.ToUtc(OwnedSinceMs), EntityCount) { Server = Server };
}

internal sealed class AccessPolicyRow
{
    public string Name { get; set; } = "";
    public long Rights { get; set; }
    public string PrimaryKey { get; set; } = "";
    public string SecondaryKey { get; set; } = "";
    public long CreatedAtMs { get; set; }
    public long UpdatedAtMs { get; set; }

    public AccessPolicyRecord ToRecord() => new(
        Name, (AccessRights)Rights, PrimaryKey, SecondaryKey,
        DateTimeOffset.FromUnixTimeMilliseconds(CreatedAtMs), DateTimeOffset.FromUnixTimeMilliseconds(UpdatedAtMs));
}

internal sealed class ServerRow
{
    public string Name { get; set; } = "";
    public string ConnectionString { get; set; } = "";
    public long ContainerCount { get; set; }

    public ServerRecord ToRecord() => new(Name, ConnectionString, ContainerCount);
}

/// <summary>A container as a take found it, read in the take's transaction before the take's UPDATE.</summary>
internal sealed class ContainerBeforeTakeRow
{
    public long? OwnerNode { get; set; }
    public long Epoch { get; set; }
    public long? LeaseExpiresAtMs { get; set; }

    /// <summary>The owner's last heartbeat; null without an owner, or when its node row is gone.</summary>
    public long? OwnerHeartbeatAtMs { get; set; }

    public long? ReleasedBy { get; set; }
    public long? ReleasedAtMs { get; set; }
    public bool ReleasedAbandoned { get; set; }

    /// <summary>
    /// The change a successful take by <paramref name="nodeId"/> makes; null when the node held the
    /// container already (a renewal: neither the owner nor the epoch changes). UnownedSinceMs is when
    /// the container last had a serving owner, null when unknown.
    /// </summary>
    public (string Kind, long FromNode, long? UnownedSinceMs)? ChangeTo(long nodeId)
    {
        if (OwnerNode is { } owner)
        {
            if (owner == nodeId)
            {
                return null;
            }
            // Another node's lease ran out (the take succeeded). That node was last known alive at
            // its last heartbeat; if its lease ran out before that (it heartbeats but could not
            // renew), it stopped serving by then.
            var since = OwnerHeartbeatAtMs is { } heartbeat && LeaseExpiresAtMs is { } expiry
                ? Math.Min(heartbeat, expiry)
                : OwnerHeartbeatAtMs ?? LeaseExpiresAtMs;
            return (OwnershipChangeKinds.Failover, owner, since);
        }
        if (ReleasedBy is { } releasedBy)
        {
            var kind = releasedBy == nodeId ? OwnershipChangeKinds.Restart
                : ReleasedAbandoned ? OwnershipChangeKinds.Failover
                : OwnershipChangeKinds.Planned;
            return (kind, releasedBy, ReleasedAtMs);
        }
        // Unowned, and no release recorded: never owned, or released by a build older than schema
        // version 4, which kept no record of who released it or when (a release is always on purpose).
        return Epoch == 0 ? (OwnershipChangeKinds.First, 0, null) : (OwnershipChangeKinds.Planned, 0, null);
    }
}

internal sealed class OwnershipChangeRow
{
    public long ContainerId { get; set; }
    public long Epoch { get; set; }
    public long FromNode { get; set; }
    public long ToNode { get; set; }
    public string Kind { get; set; } = "";
    public long? UnownedMs { get; set; }
    public long AtMs { get; set; }

    public OwnershipChangeRecord ToRecord() =>
        new(ContainerId, Epoch, FromNode, ToNode, Kind, UnownedMs is { } ms ? TimeSpan.FromMilliseconds(ms) : null, UnixMs.ToUtc(AtMs));
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

    /// <summary>A time as Unix milliseconds (a local time is converted; an unspecified one is taken as UTC, as the farm's times are).</summary>
    public static long? FromUtc(DateTime? time) => time is { } t
        ? (long)Math.Floor(((t.Kind == DateTimeKind.Local ? t.ToUniversalTime() : t) - DateTime.UnixEpoch).TotalMilliseconds)
        : null;
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
    public string MarkNodeCrashed { get; private set; } = "";
    public string ListNodes { get; private set; } = "";
    public string InsertContainer { get; private set; } = "";
    public string SetContainerConnectionString { get; private set; } = "";
    public string ListContainers { get; private set; } = "";
    public string GetContainer { get; private set; } = "";
    public string InsertServer { get; private set; } = "";
    public string ListServers { get; private set; } = "";
    public string DeleteServer { get; private set; } = "";
    public string TryAcquireContainer { get; private set; } = "";
    public string RenewContainerLease { get; private set; } = "";
    public string ReleaseContainer { get; private set; } = "";
    public string ReleaseAbandonedContainer { get; private set; } = "";
    public string ReadContainerBeforeTake { get; private set; } = "";
    public string RecordOwnershipChange { get; private set; } = "";
    public string ListOwnershipChanges { get; private set; } = "";
    public string InsertEntity { get; private set; } = "";
    public string GetEntity { get; private set; } = "";
    public string GetEntitiesById { get; private set; } = "";
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
    public string InsertRootAccessPolicy { get; private set; } = "";
    public string InsertAccessPolicy { get; private set; } = "";
    public string ListAccessPolicies { get; private set; } = "";
    public string GetAccessPolicy { get; private set; } = "";
    public string LockAccessPolicies { get; private set; } = "";
    public string DeleteAccessPolicy { get; private set; } = "";
    public string UpdateAccessPolicyKeys { get; private set; } = "";
}
