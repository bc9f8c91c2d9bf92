using Dapper;
using Farm.ContainerStore.FarmDatabase;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// The farm database in one SQLite file. Each call takes a pooled connection of its own, so
/// nodes, gateways and the CLI in one process can use it concurrently; lease times come from
/// SQLite's clock.
/// </summary>
internal sealed class SqliteFarmStore : IFarmStore
{
    private const int SqliteConstraintUnique = 2067;
    private const int SqliteConstraintForeignKey = 787;

    private readonly SqliteDatabaseFile _file;
    private int _disposed;

    private SqliteFarmStore(SqliteDatabaseFile file) => _file = file;

    public static async Task<SqliteFarmStore> OpenAsync(string connectionString, CancellationToken cancellationToken)
    {
        var file = SqliteDatabaseFile.Resolve(connectionString, "farm database");
        await using (var connection = await file.OpenAsync(create: true, cancellationToken).ConfigureAwait(false))
        {
            file.EnableWal(connection);
            await SqliteMigrator.MigrateAsync(file, connection, SqliteMigrator.FarmSchema, cancellationToken).ConfigureAwait(false);
        }

        return new SqliteFarmStore(file);
    }

    public Task<NodeRecord> RegisterNodeAsync(long nodeId, string address, int processId, string? metricsAddress = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(address);
        return RunAsync(async connection =>
        {
            var row = await connection.QuerySingleAsync<NodeRow>(Command(
                SqliteSql.FarmDb.RegisterNode,
                new { Id = nodeId, Address = address, MetricsAddress = metricsAddress, State = NodeStates.Active, ProcessId = processId },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<bool> HeartbeatAsync(long nodeId, int processId, string address, CancellationToken cancellationToken = default) =>
        RunAsync(async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(
                SqliteSql.FarmDb.Heartbeat, new { Id = nodeId, ProcessId = processId, Address = address }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            if (rows == 1)
            {
                return true;
            }
            var known = await connection.ExecuteScalarAsync<long>(Command(SqliteSql.FarmDb.CountNode, new { Id = nodeId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return known == 1 ? false : throw UnknownNode(nodeId);
        }, cancellationToken);

    public Task SetNodeStateAsync(long nodeId, string state, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(state);
        return RunAsync(async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(SqliteSql.FarmDb.SetNodeState, new { Id = nodeId, State = state }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows == 1 ? true : throw UnknownNode(nodeId);
        }, cancellationToken);
    }

    public Task<IReadOnlyList<NodeRecord>> ListNodesAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<NodeRecord>>(async connection =>
        {
            var rows = await connection.QueryAsync<NodeRow>(Command(SqliteSql.FarmDb.ListNodes, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<ContainerRecord> CreateContainerAsync(Func<long, string> connectionStringForId, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(connectionStringForId);
        return RunAsync(async connection =>
        {
            using var transaction = connection.BeginTransaction(deferred: false);
            var id = await connection.ExecuteScalarAsync<long>(Command(SqliteSql.FarmDb.InsertContainer, transaction: transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            await connection.ExecuteAsync(Command(
                SqliteSql.FarmDb.SetContainerConnectionString,
                new { Id = id, ConnectionString = connectionStringForId(id) },
                transaction,
                cancellationToken)).ConfigureAwait(false);
            var row = await connection.QuerySingleAsync<ContainerRow>(Command(SqliteSql.FarmDb.GetContainer, new { Id = id }, transaction, cancellationToken)).ConfigureAwait(false);
            transaction.Commit();
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<ContainerRecord>> ListContainersAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<ContainerRecord>>(async connection =>
        {
            var rows = await connection.QueryAsync<ContainerRow>(Command(SqliteSql.FarmDb.ListContainers, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<ContainerRecord?> GetContainerAsync(long containerId, CancellationToken cancellationToken = default) =>
        RunAsync(async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<ContainerRow>(Command(SqliteSql.FarmDb.GetContainer, new { Id = containerId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);

    public Task<ContainerRecord?> TryAcquireContainerAsync(long containerId, long nodeId, TimeSpan leaseDuration, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(leaseDuration, TimeSpan.Zero);
        return RunAsync(async connection =>
        {
            // The conditional UPDATE alone decides; the transaction only makes the row read back
            // the one this call wrote.
            using var transaction = connection.BeginTransaction(deferred: false);
            var taken = await connection.ExecuteAsync(Command(
                SqliteSql.FarmDb.TryAcquireContainer,
                new { Id = containerId, NodeId = nodeId, LeaseMs = (long)leaseDuration.TotalMilliseconds },
                transaction,
                cancellationToken)).ConfigureAwait(false);
            if (taken == 0)
            {
                transaction.Rollback();
                return null;
            }

            var row = await connection.QuerySingleAsync<ContainerRow>(Command(SqliteSql.FarmDb.GetContainer, new { Id = containerId }, transaction, cancellationToken)).ConfigureAwait(false);
            transaction.Commit();
            return row.ToRecord();
        }, cancellationToken);
    }

    public async Task<bool> RenewContainerLeaseAsync(long containerId, long nodeId, long epoch, TimeSpan leaseDuration, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(leaseDuration, TimeSpan.Zero);
        var renewed = await RunAsync(connection => connection.ExecuteAsync(Command(
            SqliteSql.FarmDb.RenewContainerLease,
            new { Id = containerId, NodeId = nodeId, Epoch = epoch, LeaseMs = (long)leaseDuration.TotalMilliseconds },
            cancellationToken: cancellationToken)), cancellationToken).ConfigureAwait(false);
        return renewed == 1;
    }

    public Task ReleaseContainerAsync(long containerId, long nodeId, CancellationToken cancellationToken = default) =>
        RunAsync(connection => connection.ExecuteAsync(Command(SqliteSql.FarmDb.ReleaseContainer, new { Id = containerId, NodeId = nodeId }, cancellationToken: cancellationToken)), cancellationToken);

    public Task<EntityRecord> CreateEntityAsync(string name, string kind, long containerId, string propertiesJson, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentException.ThrowIfNullOrWhiteSpace(kind);
        ArgumentNullException.ThrowIfNull(propertiesJson);
        return RunAsync(async connection =>
        {
            try
            {
                var row = await connection.QuerySingleAsync<EntityRow>(Command(
                    SqliteSql.FarmDb.InsertEntity,
                    new { Name = name, NameKey = NameKey(name), Kind = kind, ContainerId = containerId, PropertiesJson = propertiesJson },
                    cancellationToken: cancellationToken)).ConfigureAwait(false);
                return row.ToRecord();
            }
            catch (SqliteException e) when (e.SqliteExtendedErrorCode == SqliteConstraintUnique)
            {
                throw new EntityAlreadyExistsException(name);
            }
            catch (SqliteException e) when (e.SqliteExtendedErrorCode == SqliteConstraintForeignKey)
            {
                throw new ArgumentException($"The container {containerId} does not exist.", nameof(containerId), e);
            }
        }, cancellationToken);
    }

    public Task<EntityRecord?> GetEntityAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync(async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(SqliteSql.FarmDb.GetEntity, new { NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<EntityRecord>> ListEntitiesAsync(string? kind = null, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>(async connection =>
        {
            var command = kind is null
                ? Command(SqliteSql.FarmDb.ListEntities, cancellationToken: cancellationToken)
                : Command(SqliteSql.FarmDb.ListEntitiesOfKind, new { Kind = kind }, cancellationToken: cancellationToken);
            var rows = await connection.QueryAsync<EntityRow>(command).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<IReadOnlyList<EntityRecord>> ListEntitiesInContainerAsync(long containerId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>(async connection =>
        {
            var rows = await connection.QueryAsync<EntityRow>(Command(SqliteSql.FarmDb.ListEntitiesInContainer, new { ContainerId = containerId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<EntityRecord?> UpdateEntityAsync(string name, string propertiesJson, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        ArgumentNullException.ThrowIfNull(propertiesJson);
        return RunAsync(async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(
                SqliteSql.FarmDb.UpdateEntity,
                new { NameKey = NameKey(name), PropertiesJson = propertiesJson },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<bool> DeleteEntityAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync(async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(SqliteSql.FarmDb.DeleteEntity, new { NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows > 0;
        }, cancellationToken);
    }

    public Task<EntityRecord> CreateChildEntityAsync(long parentId, string name, string kind, string propertiesJson, string firstRuleName, string firstRuleJson, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentException.ThrowIfNullOrWhiteSpace(kind);
        ArgumentNullException.ThrowIfNull(propertiesJson);
        ArgumentException.ThrowIfNullOrWhiteSpace(firstRuleName);
        ArgumentNullException.ThrowIfNull(firstRuleJson);
        return RunAsync(async connection =>
        {
            // BEGIN IMMEDIATE: the parent read by the insert cannot be deleted before the commit.
            using var transaction = connection.BeginTransaction(deferred: false);
            EntityRow? row;
            try
            {
                row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(
                    SqliteSql.FarmDb.InsertChildEntity,
                    new { ParentId = parentId, Name = name, NameKey = NameKey(name), Kind = kind, PropertiesJson = propertiesJson },
                    transaction,
                    cancellationToken)).ConfigureAwait(false);
            }
            catch (SqliteException e) when (e.SqliteExtendedErrorCode == SqliteConstraintUnique)
            {
                throw new EntityAlreadyExistsException(name);
            }

            if (row is null)
            {
                throw UnknownParent(parentId);
            }

            await connection.QuerySingleAsync<RuleRow>(Command(
                SqliteSql.FarmDb.InsertRule,
                new { SubscriptionId = row.Id, Name = firstRuleName, NameKey = NameKey(firstRuleName), DefinitionJson = firstRuleJson },
                transaction,
                cancellationToken)).ConfigureAwait(false);
            transaction.Commit();
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<EntityRecord>> ListChildEntitiesAsync(long parentId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>(async connection =>
        {
            var rows = await connection.QueryAsync<EntityRow>(Command(SqliteSql.FarmDb.ListChildEntities, new { ParentId = parentId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<RuleRecord> CreateRuleAsync(long subscriptionId, string name, string definitionJson, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentNullException.ThrowIfNull(definitionJson);
        return RunAsync(async connection =>
        {
            RuleRow? row;
            try
            {
                row = await connection.QuerySingleOrDefaultAsync<RuleRow>(Command(
                    SqliteSql.FarmDb.InsertRule,
                    new { SubscriptionId = subscriptionId, Name = name, NameKey = NameKey(name), DefinitionJson = definitionJson },
                    cancellationToken: cancellationToken)).ConfigureAwait(false);
            }
            catch (SqliteException e) when (e.SqliteExtendedErrorCode == SqliteConstraintUnique)
            {
                var subscription = await connection.QuerySingleOrDefaultAsync<string>(Command(
                    SqliteSql.FarmDb.GetEntityName, new { Id = subscriptionId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
                throw new RuleAlreadyExistsException(subscription ?? subscriptionId.ToString(System.Globalization.CultureInfo.InvariantCulture), name);
            }

            return row?.ToRecord() ?? throw UnknownSubscription(subscriptionId);
        }, cancellationToken);
    }

    public Task<bool> DeleteRuleAsync(long subscriptionId, string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync(async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(
                SqliteSql.FarmDb.DeleteRule, new { SubscriptionId = subscriptionId, NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows > 0;
        }, cancellationToken);
    }

    public Task<RuleRecord?> UpdateRuleAsync(long subscriptionId, string name, string definitionJson, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        ArgumentNullException.ThrowIfNull(definitionJson);
        return RunAsync(async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<RuleRow>(Command(
                SqliteSql.FarmDb.UpdateRule,
                new { SubscriptionId = subscriptionId, NameKey = NameKey(name), DefinitionJson = definitionJson },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<RuleRecord>> ListRulesAsync(long subscriptionId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<RuleRecord>>(async connection =>
        {
            var rows = await connection.QueryAsync<RuleRow>(Command(SqliteSql.FarmDb.ListRules, new { SubscriptionId = subscriptionId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<IReadOnlyList<RuleRecord>> ListRulesOfTopicAsync(long topicId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<RuleRecord>>(async connection =>
        {
            var rows = await connection.QueryAsync<RuleRow>(Command(SqliteSql.FarmDb.ListRulesOfTopic, new { TopicId = topicId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 0)
        {
            _file.ClearPools();
        }

        return ValueTask.CompletedTask;
    }

    /// <summary>Entity names are unique regardless of case, as in Service Bus.</summary>
    private static string NameKey(string name) => name.ToLowerInvariant();

    private static InvalidOperationException UnknownNode(long nodeId) => new($"The node {nodeId} is not registered in the farm database.");

    private static KeyNotFoundException UnknownParent(long parentId) => new($"The parent entity {parentId} does not exist (any more).");

    private static KeyNotFoundException UnknownSubscription(long subscriptionId) => new($"The subscription {subscriptionId} does not exist (any more).");

    private static CommandDefinition Command(string sql, object? parameters = null, SqliteTransaction? transaction = null, CancellationToken cancellationToken = default) =>
        new(sql, parameters, transaction, cancellationToken: cancellationToken);

    /// <summary>Runs one operation on its own pooled connection; unreachable-file errors name the path.</summary>
    private async Task<T> RunAsync<T>(Func<SqliteConnection, Task<T>> operation, CancellationToken cancellationToken)
    {
        ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);

        // A pooled connection keeps working on a deleted file's orphaned inode; refuse instead.
        if (!File.Exists(_file.Path))
        {
            throw new StoreUnavailableException($"The farm database '{_file.Path}' was deleted or moved while open.");
        }

        await using var connection = await _file.OpenAsync(create: false, cancellationToken).ConfigureAwait(false);
        try
        {
            return await operation(connection).ConfigureAwait(false);
        }
        catch (SqliteException e) when (SqliteDatabaseFile.IsUnavailable(e))
        {
            throw _file.Unavailable("use", e);
        }
    }

    private static DateTime FromUnixMs(long ms) => DateTime.UnixEpoch.AddMilliseconds(ms);

    private static DateTime? FromUnixMs(long? ms) => ms is { } value ? FromUnixMs(value) : null;

    // Dapper targets: column names are aliased to these, and times stay Unix ms until mapped.
    private sealed class NodeRow
    {
        public long Id { get; set; }
        public string Address { get; set; } = "";
        public string? MetricsAddress { get; set; }
        public string State { get; set; } = "";
        public int ProcessId { get; set; }
        public long HeartbeatAtMs { get; set; }
        public long HeartbeatAgeMs { get; set; }

        public NodeRecord ToRecord() =>
            new(Id, Address, State, ProcessId, FromUnixMs(HeartbeatAtMs), TimeSpan.FromMilliseconds(Math.Max(0, HeartbeatAgeMs))) { MetricsAddress = MetricsAddress };
    }

    private sealed class ContainerRow
    {
        public long Id { get; set; }
        public string ConnectionString { get; set; } = "";
        public long? OwnerNode { get; set; }
        public long Epoch { get; set; }
        public long? LeaseExpiresAtMs { get; set; }
        public long? OwnedSinceMs { get; set; }
        public long EntityCount { get; set; }

        public ContainerRecord ToRecord() =>
            new(Id, ConnectionString, OwnerNode, Epoch, FromUnixMs(LeaseExpiresAtMs), FromUnixMs(OwnedSinceMs), EntityCount);
    }

    private sealed class EntityRow
    {
        public long Id { get; set; }
        public string Name { get; set; } = "";
        public string Kind { get; set; } = "";
        public long ContainerId { get; set; }
        public string PropertiesJson { get; set; } = "";
        public long CreatedAtMs { get; set; }
        public long UpdatedAtMs { get; set; }
        public long? ParentId { get; set; }

        public EntityRecord ToRecord() => new(Id, Name, Kind, ContainerId, PropertiesJson, FromUnixMs(CreatedAtMs), FromUnixMs(UpdatedAtMs), ParentId);
    }

    private sealed class RuleRow
    {
        public long Id { get; set; }
        public long SubscriptionId { get; set; }
        public string Name { get; set; } = "";
        public string DefinitionJson { get; set; } = "";
        public long CreatedAtMs { get; set; }

        public RuleRecord ToRecord() => new(Id, SubscriptionId, Name, DefinitionJson, FromUnixMs(CreatedAtMs));
    }
}
