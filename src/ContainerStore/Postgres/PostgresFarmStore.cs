using Dapper;
using Farm.ContainerStore.FarmDatabase;
using Npgsql;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// The farm database on a PostgreSQL server, shared by nodes on different hosts. Each call takes a
/// pooled connection of its own; lease and heartbeat times come from the server's clock, so the
/// nodes' clocks never need to agree.
/// </summary>
internal sealed class PostgresFarmStore : IFarmStore
{
    private readonly PostgresDatabase _database;
    private int _disposed;

    private PostgresFarmStore(PostgresDatabase database) => _database = database;

    /// <summary>
    /// The farm database must exist already: it is named by the operator, and a typo in its name
    /// must not quietly start a second, empty farm.
    /// </summary>
    public static async Task<PostgresFarmStore> OpenAsync(string connectionString, CancellationToken cancellationToken)
    {
        var database = PostgresDatabase.Resolve(connectionString, "farm database");
        try
        {
            await using (var connection = await database.OpenConnectionAsync(cancellationToken).ConfigureAwait(false))
            {
                await PostgresMigrator.MigrateAsync(database, connection, PostgresMigrator.FarmSchema, cancellationToken).ConfigureAwait(false);
            }

            return new PostgresFarmStore(database);
        }
        catch
        {
            await database.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    public Task<NodeRecord> RegisterNodeAsync(long nodeId, string address, int processId, string? metricsAddress = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(address);
        return RunAsync("register a node", async connection =>
        {
            var row = await connection.QuerySingleAsync<NodeRow>(Command(
                PostgresSql.FarmDb.RegisterNode,
                new { Id = nodeId, Address = address, MetricsAddress = metricsAddress, State = NodeStates.Active, ProcessId = processId },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<bool> HeartbeatAsync(long nodeId, int processId, string address, CancellationToken cancellationToken = default) =>
        RunAsync("record a heartbeat", async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(
                PostgresSql.FarmDb.Heartbeat, new { Id = nodeId, ProcessId = processId, Address = address }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            if (rows == 1)
            {
                return true;
            }
            var known = await connection.ExecuteScalarAsync<long>(Command(PostgresSql.FarmDb.CountNode, new { Id = nodeId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return known == 1 ? false : throw UnknownNode(nodeId);
        }, cancellationToken);

    public Task SetNodeStateAsync(long nodeId, string state, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(state);
        return RunAsync("set a node's state", async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(PostgresSql.FarmDb.SetNodeState, new { Id = nodeId, State = state }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows == 1 ? true : throw UnknownNode(nodeId);
        }, cancellationToken);
    }

    public Task<IReadOnlyList<NodeRecord>> ListNodesAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<NodeRecord>>("list nodes", async connection =>
        {
            var rows = await connection.QueryAsync<NodeRow>(Command(PostgresSql.FarmDb.ListNodes, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<ContainerRecord> CreateContainerAsync(Func<long, string> connectionStringForId, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(connectionStringForId);
        return RunAsync("create a container", async connection =>
        {
            await using var transaction = await connection.BeginTransactionAsync(cancellationToken).ConfigureAwait(false);
            var id = await connection.ExecuteScalarAsync<long>(Command(PostgresSql.FarmDb.InsertContainer, transaction: transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            var row = await connection.QuerySingleAsync<ContainerRow>(Command(
                PostgresSql.FarmDb.SetContainerConnectionString,
                new { Id = id, ConnectionString = connectionStringForId(id) },
                transaction,
                cancellationToken)).ConfigureAwait(false);
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<ContainerRecord>> ListContainersAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<ContainerRecord>>("list containers", async connection =>
        {
            var rows = await connection.QueryAsync<ContainerRow>(Command(PostgresSql.FarmDb.ListContainers, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<ContainerRecord?> GetContainerAsync(long containerId, CancellationToken cancellationToken = default) =>
        RunAsync("read a container", async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<ContainerRow>(Command(PostgresSql.FarmDb.GetContainer, new { Id = containerId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);

    public Task<ContainerRecord?> TryAcquireContainerAsync(long containerId, long nodeId, TimeSpan leaseDuration, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(leaseDuration, TimeSpan.Zero);
        return RunAsync("acquire a container's lease", async connection =>
        {
            // One conditional UPDATE ... RETURNING decides and reads back: no other statement can
            // change the row between the decision and the record returned.
            var row = await connection.QuerySingleOrDefaultAsync<ContainerRow>(Command(
                PostgresSql.FarmDb.TryAcquireContainer,
                new { Id = containerId, NodeId = nodeId, LeaseMs = (long)leaseDuration.TotalMilliseconds },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public async Task<bool> RenewContainerLeaseAsync(long containerId, long nodeId, long epoch, TimeSpan leaseDuration, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(leaseDuration, TimeSpan.Zero);
        var renewed = await RunAsync("renew a container's lease", connection => connection.ExecuteAsync(Command(
            PostgresSql.FarmDb.RenewContainerLease,
            new { Id = containerId, NodeId = nodeId, Epoch = epoch, LeaseMs = (long)leaseDuration.TotalMilliseconds },
            cancellationToken: cancellationToken)), cancellationToken).ConfigureAwait(false);
        return renewed == 1;
    }

    public Task ReleaseContainerAsync(long containerId, long nodeId, CancellationToken cancellationToken = default) =>
        RunAsync("release a container's lease", connection => connection.ExecuteAsync(Command(
            PostgresSql.FarmDb.ReleaseContainer, new { Id = containerId, NodeId = nodeId }, cancellationToken: cancellationToken)), cancellationToken);

    public Task<EntityRecord> CreateEntityAsync(string name, string kind, long containerId, string propertiesJson, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentException.ThrowIfNullOrWhiteSpace(kind);
        ArgumentNullException.ThrowIfNull(propertiesJson);
        return RunAsync("create an entity", async connection =>
        {
            try
            {
                var row = await connection.QuerySingleAsync<EntityRow>(Command(
                    PostgresSql.FarmDb.InsertEntity,
                    new { Name = name, NameKey = NameKey(name), Kind = kind, ContainerId = containerId, PropertiesJson = propertiesJson },
                    cancellationToken: cancellationToken)).ConfigureAwait(false);
                return row.ToRecord();
            }
            catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.UniqueViolation)
            {
                throw new EntityAlreadyExistsException(name);
            }
            catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.ForeignKeyViolation)
            {
                throw new ArgumentException($"The container {containerId} does not exist.", nameof(containerId), e);
            }
        }, cancellationToken);
    }

    public Task<EntityRecord?> GetEntityAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync("read an entity", async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(PostgresSql.FarmDb.GetEntity, new { NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<EntityRecord>> ListEntitiesAsync(string? kind = null, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>("list entities", async connection =>
        {
            var command = kind is null
                ? Command(PostgresSql.FarmDb.ListEntities, cancellationToken: cancellationToken)
                : Command(PostgresSql.FarmDb.ListEntitiesOfKind, new { Kind = kind }, cancellationToken: cancellationToken);
            var rows = await connection.QueryAsync<EntityRow>(command).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<IReadOnlyList<EntityRecord>> ListEntitiesInContainerAsync(long containerId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>("list a container's entities", async connection =>
        {
            var rows = await connection.QueryAsync<EntityRow>(Command(PostgresSql.FarmDb.ListEntitiesInContainer, new { ContainerId = containerId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<EntityRecord?> UpdateEntityAsync(string name, string propertiesJson, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        ArgumentNullException.ThrowIfNull(propertiesJson);
        return RunAsync("update an entity", async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(
                PostgresSql.FarmDb.UpdateEntity,
                new { NameKey = NameKey(name), PropertiesJson = propertiesJson },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<bool> DeleteEntityAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync("delete an entity", async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(PostgresSql.FarmDb.DeleteEntity, new { NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
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
        return RunAsync("create a subscription", async connection =>
        {
            await using var transaction = await connection.BeginTransactionAsync(cancellationToken).ConfigureAwait(false);
            EntityRow? row;
            try
            {
                row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(
                    PostgresSql.FarmDb.InsertChildEntity,
                    new { ParentId = parentId, Name = name, NameKey = NameKey(name), Kind = kind, PropertiesJson = propertiesJson },
                    transaction,
                    cancellationToken)).ConfigureAwait(false);
            }
            catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.UniqueViolation)
            {
                throw new EntityAlreadyExistsException(name);
            }
            catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.ForeignKeyViolation)
            {
                throw UnknownParent(parentId, e);
            }

            if (row is null)
            {
                throw UnknownParent(parentId);
            }

            await connection.QuerySingleAsync<RuleRow>(Command(
                PostgresSql.FarmDb.InsertRule,
                new { SubscriptionId = row.Id, Name = firstRuleName, NameKey = NameKey(firstRuleName), DefinitionJson = firstRuleJson },
                transaction,
                cancellationToken)).ConfigureAwait(false);
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<EntityRecord>> ListChildEntitiesAsync(long parentId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>("list subscriptions", async connection =>
        {
            var rows = await connection.QueryAsync<EntityRow>(Command(PostgresSql.FarmDb.ListChildEntities, new { ParentId = parentId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<RuleRecord> CreateRuleAsync(long subscriptionId, string name, string definitionJson, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentNullException.ThrowIfNull(definitionJson);
        return RunAsync("create a rule", async connection =>
        {
            RuleRow? row;
            try
            {
                row = await connection.QuerySingleOrDefaultAsync<RuleRow>(Command(
                    PostgresSql.FarmDb.InsertRule,
                    new { SubscriptionId = subscriptionId, Name = name, NameKey = NameKey(name), DefinitionJson = definitionJson },
                    cancellationToken: cancellationToken)).ConfigureAwait(false);
            }
            catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.UniqueViolation)
            {
                var subscription = await connection.QuerySingleOrDefaultAsync<string>(Command(
                    PostgresSql.FarmDb.GetEntityName, new { Id = subscriptionId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
                throw new RuleAlreadyExistsException(subscription ?? subscriptionId.ToString(System.Globalization.CultureInfo.InvariantCulture), name);
            }
            catch (PostgresException e) when (e.SqlState == PostgresErrorCodes.ForeignKeyViolation)
            {
                throw UnknownSubscription(subscriptionId, e);
            }

            return row?.ToRecord() ?? throw UnknownSubscription(subscriptionId);
        }, cancellationToken);
    }

    public Task<bool> DeleteRuleAsync(long subscriptionId, string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync("delete a rule", async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(
                PostgresSql.FarmDb.DeleteRule, new { SubscriptionId = subscriptionId, NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows > 0;
        }, cancellationToken);
    }

    public Task<RuleRecord?> UpdateRuleAsync(long subscriptionId, string name, string definitionJson, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        ArgumentNullException.ThrowIfNull(definitionJson);
        return RunAsync("update a rule", async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<RuleRow>(Command(
                PostgresSql.FarmDb.UpdateRule,
                new { SubscriptionId = subscriptionId, NameKey = NameKey(name), DefinitionJson = definitionJson },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<RuleRecord>> ListRulesAsync(long subscriptionId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<RuleRecord>>("list rules", async connection =>
        {
            var rows = await connection.QueryAsync<RuleRow>(Command(PostgresSql.FarmDb.ListRules, new { SubscriptionId = subscriptionId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<IReadOnlyList<RuleRecord>> ListRulesOfTopicAsync(long topicId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<RuleRecord>>("list a topic's rules", async connection =>
        {
            var rows = await connection.QueryAsync<RuleRow>(Command(PostgresSql.FarmDb.ListRulesOfTopic, new { TopicId = topicId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 0)
        {
            await _database.DisposeAsync().ConfigureAwait(false);
        }
    }

    /// <summary>Entity names are unique regardless of case, as in Service Bus.</summary>
    private static string NameKey(string name) => name.ToLowerInvariant();

    private static InvalidOperationException UnknownNode(long nodeId) => new($"The node {nodeId} is not registered in the farm database.");

    private static KeyNotFoundException UnknownParent(long parentId, Exception? inner = null) => new($"The parent entity {parentId} does not exist (any more).", inner);

    private static KeyNotFoundException UnknownSubscription(long subscriptionId, Exception? inner = null) => new($"The subscription {subscriptionId} does not exist (any more).", inner);

    private static CommandDefinition Command(string sql, object? parameters = null, NpgsqlTransaction? transaction = null, CancellationToken cancellationToken = default) =>
        new(sql, parameters, transaction, cancellationToken: cancellationToken);

    /// <summary>Runs one operation on its own pooled connection; database errors name the server and database.</summary>
    private async Task<T> RunAsync<T>(string action, Func<NpgsqlConnection, Task<T>> operation, CancellationToken cancellationToken)
    {
        ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);
        await using var connection = await _database.OpenConnectionAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            return await operation(connection).ConfigureAwait(false);
        }
        catch (NpgsqlException e)
        {
            throw _database.Failure(action, e);
        }
    }

    /// <summary>
    /// timestamptz arrives as UTC, or as local time when a process opted into Npgsql's legacy
    /// timestamp behaviour; records always hold UTC.
    /// </summary>
    private static DateTime Utc(DateTime value) =>
        value.Kind == DateTimeKind.Local ? value.ToUniversalTime() : DateTime.SpecifyKind(value, DateTimeKind.Utc);

    private static DateTime? Utc(DateTime? value) => value is { } v ? Utc(v) : null;

    // Dapper targets: column names are aliased to these.
    private sealed class NodeRow
    {
        public long Id { get; set; }
        public string Address { get; set; } = "";
        public string? MetricsAddress { get; set; }
        public string State { get; set; } = "";
        public int ProcessId { get; set; }
        public DateTime HeartbeatAt { get; set; }
        public TimeSpan HeartbeatAge { get; set; }

        public NodeRecord ToRecord() =>
            new(Id, Address, State, ProcessId, Utc(HeartbeatAt), HeartbeatAge < TimeSpan.Zero ? TimeSpan.Zero : HeartbeatAge) { MetricsAddress = MetricsAddress };
    }

    private sealed class ContainerRow
    {
        public long Id { get; set; }
        public string ConnectionString { get; set; } = "";
        public long? OwnerNode { get; set; }
        public long Epoch { get; set; }
        public DateTime? LeaseExpiresAt { get; set; }
        public DateTime? OwnedSince { get; set; }
        public long EntityCount { get; set; }

        public ContainerRecord ToRecord() =>
            new(Id, ConnectionString, OwnerNode, Epoch, Utc(LeaseExpiresAt), Utc(OwnedSince), EntityCount);
    }

    private sealed class EntityRow
    {
        public long Id { get; set; }
        public string Name { get; set; } = "";
        public string Kind { get; set; } = "";
        public long ContainerId { get; set; }
        public string PropertiesJson { get; set; } = "";
        public DateTime CreatedAt { get; set; }
        public DateTime UpdatedAt { get; set; }
        public long? ParentId { get; set; }

        public EntityRecord ToRecord() => new(Id, Name, Kind, ContainerId, PropertiesJson, Utc(CreatedAt), Utc(UpdatedAt), ParentId);
    }

    private sealed class RuleRow
    {
        public long Id { get; set; }
        public long SubscriptionId { get; set; }
        public string Name { get; set; } = "";
        public string DefinitionJson { get; set; } = "";
        public DateTime CreatedAt { get; set; }

        public RuleRecord ToRecord() => new(Id, SubscriptionId, Name, DefinitionJson, Utc(CreatedAt));
    }
}
