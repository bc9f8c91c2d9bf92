using System.Data.Common;
using Dapper;

namespace Farm.ContainerStore.FarmDatabase;

/// <summary>
/// The farm database operations, once for both dialects: the same statements (each dialect's
/// <see cref="FarmSql"/>, kept in its own SQL file), the same rows (<see cref="NodeRow"/> and the
/// others), the same checks. A dialect says how it opens and guards a connection, how it begins a
/// write transaction, how it recognises constraint violations, and how it runs a take's UPDATE.
/// </summary>
internal abstract class FarmStore(FarmSql sql) : IFarmStore
{
    /// <summary>How many changes of owner the farm database keeps, the newest.</summary>
    public const int OwnershipChangesKept = 1_000;

    protected FarmSql Sql { get; } = sql;

    /// <summary>Runs one operation on its own pooled connection, translating the dialect's failures; <paramref name="action"/> names it in errors.</summary>
    protected abstract Task<T> RunAsync<T>(string action, Func<DbConnection, Task<T>> operation, CancellationToken cancellationToken);

    /// <summary>
    /// The blocking form of <see cref="RunAsync{T}"/>, for a thread that must not wait on the thread
    /// pool (lease renewals). By default the async form waited on, which never leaves the calling
    /// thread where the dialect's calls complete inline (SQLite); a dialect whose I/O completes on
    /// the pool (PostgreSQL) overrides it with blocking calls.
    /// </summary>
    protected virtual T Run<T>(string action, Func<DbConnection, T> operation) =>
        RunAsync(action, connection => Task.FromResult(operation(connection)), CancellationToken.None).GetAwaiter().GetResult();

    /// <summary>The command timeout of the blocking renewals: a renewal slower than a lease is of no use, and one stuck must not hold the renewal thread.</summary>
    private static int RenewalTimeoutSeconds(TimeSpan leaseDuration) => Math.Max(1, (int)Math.Ceiling(leaseDuration.TotalSeconds));

    /// <summary>A transaction that holds the write lock from its first statement.</summary>
    protected abstract ValueTask<DbTransaction> BeginWriteAsync(DbConnection connection, CancellationToken cancellationToken);

    protected abstract bool IsUniqueViolation(DbException e);

    protected abstract bool IsForeignKeyViolation(DbException e);

    /// <summary>
    /// The take's lease decision (<c>TryAcquireContainer</c>), in the take's transaction: the row it
    /// left, or null when another node holds a live lease.
    /// </summary>
    protected abstract Task<ContainerRow?> TakeContainerAsync(DbConnection connection, DbTransaction transaction, object parameters, CancellationToken cancellationToken);

    /// <summary>Null unless the dialect's server can tell a session's end (see <see cref="INodeSessionLock"/>).</summary>
    public virtual INodeSessionLock? CreateNodeSessionLock(long nodeId) => null;

    public abstract ValueTask DisposeAsync();

    public Task<NodeRecord> RegisterNodeAsync(long nodeId, string address, int processId, string? metricsAddress = null, string? amqpAddress = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(address);
        return RunAsync("register a node", async connection =>
        {
            var row = await connection.QuerySingleAsync<NodeRow>(Command(
                Sql.RegisterNode,
                new { Id = nodeId, Address = address, MetricsAddress = metricsAddress, AmqpAddress = amqpAddress, State = NodeStates.Active, ProcessId = processId },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<bool> HeartbeatAsync(long nodeId, int processId, string address, CancellationToken cancellationToken = default) =>
        RunAsync("record a heartbeat", async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(
                Sql.Heartbeat, new { Id = nodeId, ProcessId = processId, Address = address }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            if (rows == 1)
            {
                return true;
            }
            var known = await connection.ExecuteScalarAsync<long>(Command(Sql.CountNode, new { Id = nodeId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return known == 1 ? false : throw UnknownNode(nodeId);
        }, cancellationToken);

    public bool Heartbeat(long nodeId, int processId, string address, TimeSpan timeout) =>
        Run("record a heartbeat", connection =>
        {
            var seconds = RenewalTimeoutSeconds(timeout);
            if (connection.Execute(new CommandDefinition(Sql.Heartbeat, new { Id = nodeId, ProcessId = processId, Address = address }, commandTimeout: seconds)) == 1)
            {
                return true;
            }
            var known = connection.ExecuteScalar<long>(new CommandDefinition(Sql.CountNode, new { Id = nodeId }, commandTimeout: seconds));
            return known == 1 ? false : throw UnknownNode(nodeId);
        });

    public Task SetNodeStateAsync(long nodeId, string state, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(state);
        return RunAsync("set a node's state", async connection =>
        {
            var rows = await connection.ExecuteAsync(Command(Sql.SetNodeState, new { Id = nodeId, State = state }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows == 1 ? true : throw UnknownNode(nodeId);
        }, cancellationToken);
    }

    public Task<bool> MarkNodeCrashedAsync(long nodeId, int processId, CancellationToken cancellationToken = default) =>
        RunAsync("mark a node crashed", async connection =>
            await connection.ExecuteAsync(Command(Sql.MarkNodeCrashed, new { Id = nodeId, ProcessId = processId, Crashed = NodeStates.Crashed, Active = NodeStates.Active }, cancellationToken: cancellationToken)).ConfigureAwait(false) == 1,
            cancellationToken);

    public Task<IReadOnlyList<NodeRecord>> ListNodesAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<NodeRecord>>("list nodes", async connection =>
        {
            var rows = await connection.QueryAsync<NodeRow>(Command(Sql.ListNodes, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<ContainerRecord> CreateContainerAsync(Func<long, string> connectionStringForId, string? server, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(connectionStringForId);
        return RunAsync("create a container", async connection =>
        {
            // The connection string names the container by its id, known only after the insert.
            await using var transaction = await BeginWriteAsync(connection, cancellationToken).ConfigureAwait(false);
            var id = await connection.ExecuteScalarAsync<long>(Command(Sql.InsertContainer, transaction: transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            await connection.ExecuteAsync(Command(
                Sql.SetContainerConnectionString,
                new { Id = id, ConnectionString = connectionStringForId(id), Server = server },
                transaction,
                cancellationToken)).ConfigureAwait(false);
            var row = await connection.QuerySingleAsync<ContainerRow>(Command(Sql.GetContainer, new { Id = id }, transaction, cancellationToken)).ConfigureAwait(false);
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return row.ToRecord();
        }, cancellationToken);
    }

    public Task<ServerRecord?> AddServerAsync(string name, string connectionString, CancellationToken cancellationToken = default) =>
        RunAsync("add a database server", async connection =>
        {
            var added = await connection.ExecuteAsync(Command(Sql.InsertServer, new { Name = name, ConnectionString = connectionString }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return added == 0 ? null : new ServerRecord(name, connectionString, 0);
        }, cancellationToken);

    public Task<IReadOnlyList<ServerRecord>> ListServersAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<ServerRecord>>("list database servers", async connection =>
            (await connection.QueryAsync<ServerRow>(Command(Sql.ListServers, cancellationToken: cancellationToken)).ConfigureAwait(false))
                .Select(r => r.ToRecord()).ToList(), cancellationToken);

    public Task<bool> RemoveServerAsync(string name, CancellationToken cancellationToken = default) =>
        RunAsync("remove a database server", async connection =>
            await connection.ExecuteAsync(Command(Sql.DeleteServer, new { Name = name }, cancellationToken: cancellationToken)).ConfigureAwait(false) > 0,
            cancellationToken);

    public Task<IReadOnlyList<ContainerRecord>> ListContainersAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<ContainerRecord>>("list containers", async connection =>
        {
            var rows = await connection.QueryAsync<ContainerRow>(Command(Sql.ListContainers, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<ContainerRecord?> GetContainerAsync(long containerId, CancellationToken cancellationToken = default) =>
        RunAsync("read a container", async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<ContainerRow>(Command(Sql.GetContainer, new { Id = containerId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);

    public async Task<bool> RenewContainerLeaseAsync(long containerId, long nodeId, long epoch, TimeSpan leaseDuration, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(leaseDuration, TimeSpan.Zero);
        var renewed = await RunAsync("renew a container's lease", connection => connection.ExecuteAsync(Command(
            Sql.RenewContainerLease,
            new { Id = containerId, NodeId = nodeId, Epoch = epoch, LeaseMs = (long)leaseDuration.TotalMilliseconds },
            cancellationToken: cancellationToken)), cancellationToken).ConfigureAwait(false);
        return renewed == 1;
    }

    public bool RenewContainerLease(long containerId, long nodeId, long epoch, TimeSpan leaseDuration)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(leaseDuration, TimeSpan.Zero);
        return Run("renew a container's lease", connection => connection.Execute(new CommandDefinition(
            Sql.RenewContainerLease,
            new { Id = containerId, NodeId = nodeId, Epoch = epoch, LeaseMs = (long)leaseDuration.TotalMilliseconds },
            commandTimeout: RenewalTimeoutSeconds(leaseDuration)))) == 1;
    }

    public Task<ContainerRecord?> TryAcquireContainerAsync(long containerId, long nodeId, TimeSpan leaseDuration, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThanOrEqual(leaseDuration, TimeSpan.Zero);
        return RunAsync("acquire a container's lease", async connection =>
        {
            // The conditional UPDATE alone decides. The transaction keeps what was read before it
            // true until the commit, and commits the change it records with the take, or neither.
            await using var transaction = await BeginWriteAsync(connection, cancellationToken).ConfigureAwait(false);
            var before = await connection.QuerySingleOrDefaultAsync<ContainerBeforeTakeRow>(Command(
                Sql.ReadContainerBeforeTake, new { Id = containerId }, transaction, cancellationToken)).ConfigureAwait(false);
            var row = before is null ? null : await TakeContainerAsync(
                connection,
                transaction,
                new { Id = containerId, NodeId = nodeId, LeaseMs = (long)leaseDuration.TotalMilliseconds },
                cancellationToken).ConfigureAwait(false);
            if (row is null)
            {
                await transaction.RollbackAsync(cancellationToken).ConfigureAwait(false);
                return null;
            }

            if (before!.ChangeTo(nodeId) is { } change)
            {
                await connection.ExecuteAsync(Command(
                    Sql.RecordOwnershipChange,
                    new
                    {
                        ContainerId = containerId, row.Epoch, change.FromNode, ToNode = nodeId, change.Kind,
                        change.UnownedSinceMs, Keep = OwnershipChangesKept,
                    },
                    transaction,
                    cancellationToken)).ConfigureAwait(false);
            }
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return (ContainerRecord?)row.ToRecord();
        }, cancellationToken);
    }

    public Task ReleaseContainerAsync(long containerId, long nodeId, CancellationToken cancellationToken = default) =>
        RunAsync("release a container's lease", connection => connection.ExecuteAsync(Command(
            Sql.ReleaseContainer, new { Id = containerId, NodeId = nodeId }, cancellationToken: cancellationToken)), cancellationToken);

    public Task ReleaseAbandonedContainerAsync(long containerId, long nodeId, DateTime? lastAliveAt, CancellationToken cancellationToken = default) =>
        RunAsync("release a container's lease", connection => connection.ExecuteAsync(Command(
            Sql.ReleaseAbandonedContainer,
            new { Id = containerId, NodeId = nodeId, LastAliveMs = UnixMs.FromUtc(lastAliveAt) },
            cancellationToken: cancellationToken)), cancellationToken);

    public Task<IReadOnlyList<OwnershipChangeRecord>> ListOwnershipChangesAsync(int limit, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(limit);
        return RunAsync<IReadOnlyList<OwnershipChangeRecord>>("list changes of owner", async connection =>
        {
            var rows = await connection.QueryAsync<OwnershipChangeRow>(Command(Sql.ListOwnershipChanges, new { Limit = limit }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);
    }

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
                    Sql.InsertEntity,
                    new { Name = name, NameKey = NameKey(name), Kind = kind, ContainerId = containerId, PropertiesJson = propertiesJson },
                    cancellationToken: cancellationToken)).ConfigureAwait(false);
                return row.ToRecord();
            }
            catch (DbException e) when (IsUniqueViolation(e))
            {
                throw new EntityAlreadyExistsException(name);
            }
            catch (DbException e) when (IsForeignKeyViolation(e))
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
            var row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(Sql.GetEntity, new { NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<EntityRecord>> GetEntitiesByIdAsync(IReadOnlyCollection<long> ids, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(ids);
        return RunAsync<IReadOnlyList<EntityRecord>>("read entities", async connection =>
        {
            var rows = await connection.QueryAsync<EntityRow>(Command(Sql.GetEntitiesById, new { Ids = "[" + string.Join(",", ids) + "]" }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<EntityRecord>> ListEntitiesAsync(string? kind = null, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>("list entities", async connection =>
        {
            var command = kind is null
                ? Command(Sql.ListEntities, cancellationToken: cancellationToken)
                : Command(Sql.ListEntitiesOfKind, new { Kind = kind }, cancellationToken: cancellationToken);
            var rows = await connection.QueryAsync<EntityRow>(command).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<IReadOnlyList<EntityRecord>> ListEntitiesInContainerAsync(long containerId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityRecord>>("list a container's entities", async connection =>
        {
            var rows = await connection.QueryAsync<EntityRow>(Command(Sql.ListEntitiesInContainer, new { ContainerId = containerId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<EntityRecord?> UpdateEntityAsync(string name, string propertiesJson, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        ArgumentNullException.ThrowIfNull(propertiesJson);
        return RunAsync("update an entity", async connection =>
        {
            var row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(
                Sql.UpdateEntity,
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
            var rows = await connection.ExecuteAsync(Command(Sql.DeleteEntity, new { NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
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
            // One transaction with the write lock: the parent the insert reads cannot be deleted before the commit.
            await using var transaction = await BeginWriteAsync(connection, cancellationToken).ConfigureAwait(false);
            EntityRow? row;
            try
            {
                row = await connection.QuerySingleOrDefaultAsync<EntityRow>(Command(
                    Sql.InsertChildEntity,
                    new { ParentId = parentId, Name = name, NameKey = NameKey(name), Kind = kind, PropertiesJson = propertiesJson },
                    transaction,
                    cancellationToken)).ConfigureAwait(false);
            }
            catch (DbException e) when (IsUniqueViolation(e))
            {
                throw new EntityAlreadyExistsException(name);
            }
            catch (DbException e) when (IsForeignKeyViolation(e))
            {
                throw UnknownParent(parentId, e);
            }

            if (row is null)
            {
                throw UnknownParent(parentId);
            }

            await connection.QuerySingleAsync<RuleRow>(Command(
                Sql.InsertRule,
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
            var rows = await connection.QueryAsync<EntityRow>(Command(Sql.ListChildEntities, new { ParentId = parentId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
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
                    Sql.InsertRule,
                    new { SubscriptionId = subscriptionId, Name = name, NameKey = NameKey(name), DefinitionJson = definitionJson },
                    cancellationToken: cancellationToken)).ConfigureAwait(false);
            }
            catch (DbException e) when (IsUniqueViolation(e))
            {
                var subscription = await connection.QuerySingleOrDefaultAsync<string>(Command(
                    Sql.GetEntityName, new { Id = subscriptionId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
                throw new RuleAlreadyExistsException(subscription ?? subscriptionId.ToString(System.Globalization.CultureInfo.InvariantCulture), name);
            }
            catch (DbException e) when (IsForeignKeyViolation(e))
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
                Sql.DeleteRule, new { SubscriptionId = subscriptionId, NameKey = NameKey(name) }, cancellationToken: cancellationToken)).ConfigureAwait(false);
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
                Sql.UpdateRule,
                new { SubscriptionId = subscriptionId, NameKey = NameKey(name), DefinitionJson = definitionJson },
                cancellationToken: cancellationToken)).ConfigureAwait(false);
            return row?.ToRecord();
        }, cancellationToken);
    }

    public Task<IReadOnlyList<RuleRecord>> ListRulesAsync(long subscriptionId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<RuleRecord>>("list rules", async connection =>
        {
            var rows = await connection.QueryAsync<RuleRow>(Command(Sql.ListRules, new { SubscriptionId = subscriptionId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    public Task<IReadOnlyList<RuleRecord>> ListRulesOfTopicAsync(long topicId, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<RuleRecord>>("list a topic's rules", async connection =>
        {
            var rows = await connection.QueryAsync<RuleRow>(Command(Sql.ListRulesOfTopic, new { TopicId = topicId }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            return rows.Select(r => r.ToRecord()).ToList();
        }, cancellationToken);

    /// <summary>
    /// Gives a farm with no policy that has Manage its <see cref="AccessPolicies.RootPolicyName"/>,
    /// with new keys; each dialect's open runs it right after migrating, so every farm has one from
    /// its first start on, whichever process opened it first. Idempotent: a farm with a Manage policy
    /// (the root one or another) is left alone, and an existing root policy's keys are never
    /// replaced, also when two processes open a new farm at once.
    /// </summary>
    protected Task EnsureManageAccessPolicyAsync(CancellationToken cancellationToken) =>
        RunAsync("create the root access policy", connection => connection.ExecuteAsync(Command(
            Sql.InsertRootAccessPolicy,
            new
            {
                Name = AccessPolicies.RootPolicyName,
                Rights = (int)AccessPolicies.AllRights,
                Manage = (int)AccessRights.Manage,
                PrimaryKey = AccessPolicies.NewKey(),
                SecondaryKey = AccessPolicies.NewKey(),
            },
            cancellationToken: cancellationToken)), cancellationToken);

    public Task<IReadOnlyList<AccessPolicyRecord>> ListAccessPoliciesAsync(CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<AccessPolicyRecord>>("list access policies", async connection =>
            (await connection.QueryAsync<AccessPolicyRow>(Command(Sql.ListAccessPolicies, cancellationToken: cancellationToken)).ConfigureAwait(false))
                .Select(r => r.ToRecord()).ToList(), cancellationToken);

    public Task<AccessPolicyRecord?> GetAccessPolicyAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync("read an access policy", async connection =>
            (await connection.QuerySingleOrDefaultAsync<AccessPolicyRow>(Command(Sql.GetAccessPolicy, new { Name = name }, cancellationToken: cancellationToken)).ConfigureAwait(false))
                ?.ToRecord(), cancellationToken);
    }

    public Task<AccessPolicyRecord?> CreateAccessPolicyAsync(string name, AccessRights rights, string primaryKey, string secondaryKey, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentException.ThrowIfNullOrWhiteSpace(primaryKey);
        ArgumentException.ThrowIfNullOrWhiteSpace(secondaryKey);
        var stored = AccessPolicies.Normalize(rights);
        return RunAsync("create an access policy", async connection =>
            (await connection.QuerySingleOrDefaultAsync<AccessPolicyRow>(Command(
                Sql.InsertAccessPolicy,
                new { Name = name, Rights = (int)stored, PrimaryKey = primaryKey, SecondaryKey = secondaryKey },
                cancellationToken: cancellationToken)).ConfigureAwait(false))?.ToRecord(), cancellationToken);
    }

    public Task<bool> DeleteAccessPolicyAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        return RunAsync("delete an access policy", async connection =>
        {
            // Locked against every other change of the policies: two deletes of the last two Manage
            // policies must not each see the other one and both go.
            await using var transaction = await BeginWriteAsync(connection, cancellationToken).ConfigureAwait(false);
            await connection.ExecuteAsync(Command(Sql.LockAccessPolicies, transaction: transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            var deleted = await connection.ExecuteAsync(Command(
                Sql.DeleteAccessPolicy, new { Name = name, Manage = (int)AccessRights.Manage }, transaction, cancellationToken)).ConfigureAwait(false);
            if (deleted == 0)
            {
                var exists = await connection.QuerySingleOrDefaultAsync<AccessPolicyRow>(Command(
                    Sql.GetAccessPolicy, new { Name = name }, transaction, cancellationToken)).ConfigureAwait(false);
                await transaction.RollbackAsync(cancellationToken).ConfigureAwait(false);
                return exists is null ? false : throw new LastManageAccessPolicyException(name);
            }
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return true;
        }, cancellationToken);
    }

    public Task<AccessPolicyRecord?> UpdateAccessPolicyKeysAsync(string name, string primaryKey, string secondaryKey, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(name);
        ArgumentException.ThrowIfNullOrWhiteSpace(primaryKey);
        ArgumentException.ThrowIfNullOrWhiteSpace(secondaryKey);
        return RunAsync("renew an access policy's keys", async connection =>
            (await connection.QuerySingleOrDefaultAsync<AccessPolicyRow>(Command(
                Sql.UpdateAccessPolicyKeys,
                new { Name = name, PrimaryKey = primaryKey, SecondaryKey = secondaryKey },
                cancellationToken: cancellationToken)).ConfigureAwait(false))?.ToRecord(), cancellationToken);
    }

    /// <summary>Entity names are unique regardless of case, as in Service Bus.</summary>
    protected static string NameKey(string name) => name.ToLowerInvariant();

    protected static CommandDefinition Command(string sql, object? parameters = null, DbTransaction? transaction = null, CancellationToken cancellationToken = default) =>
        new(sql, parameters, transaction, cancellationToken: cancellationToken);

    private static InvalidOperationException UnknownNode(long nodeId) => new($"The node {nodeId} is not registered in the farm database.");

    private static KeyNotFoundException UnknownParent(long parentId, Exception? inner = null) => new($"The parent entity {parentId} does not exist (any more).", inner);

    private static KeyNotFoundException UnknownSubscription(long subscriptionId, Exception? inner = null) => new($"The subscription {subscriptionId} does not exist (any more).", inner);
}
