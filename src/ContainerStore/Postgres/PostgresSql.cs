namespace Farm.ContainerStore.Postgres;

/// <summary>
/// Every SQL statement the PostgreSQL provider runs, in one place. The schema itself lives in the
/// versioned migration files under Migrations/.
/// </summary>
internal static class PostgresSql
{
    /// <summary>
    /// The database server's clock. statement_timestamp() is fixed for the whole statement (so every
    /// use in one statement sees the same instant) yet moves on between statements of a transaction,
    /// unlike now().
    /// </summary>
    private const string Now = "statement_timestamp()";

    // The farm database's times leave it as Unix milliseconds (floor(extract(epoch ...) * 1000)),
    // as SQLite stores them, so both dialects share one set of row types (FarmDatabase/FarmRows.cs).

    /// <summary>
    /// Sent in every connection's startup packet: a commit returns only once its WAL is flushed,
    /// whatever the server's or the database's default says, so an acknowledged write is durable.
    /// </summary>
    public const string DurableSessionOptions = "-c synchronous_commit=on";

    /// <summary>
    /// Also sent in every startup packet: the server ends a session that sits inside a transaction
    /// for this long. Our transactions never pause between statements; one that does was stranded by
    /// a node that froze or lost its network mid-commit, and it would hold the container's owner row
    /// lock (<see cref="ContainerDb.LockEpoch"/>) until TCP gave up on it, hours later, so the new
    /// owner could not raise the epoch and take the container over.
    /// </summary>
    public const string StrandedTransactionSessionOptions = "-c idle_in_transaction_session_timeout=5s";

    public static class Schema
    {
        /// <summary>
        /// Held until the migration transaction ends: nodes opening the same new database at once
        /// migrate it one after the other, and the later ones find nothing left to do.
        /// </summary>
        public static readonly string LockForMigration = $"SELECT pg_advisory_xact_lock({MigrationLockKey})";

        /// <summary>The advisory lock key <see cref="LockForMigration"/> takes (tests hold it too).</summary>
        public const long MigrationLockKey = 7263540162339465216;

        public const string CreateVersionTable = """
            CREATE TABLE IF NOT EXISTS schema_version (
                version    bigint      PRIMARY KEY,
                name       text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT statement_timestamp()
            )
            """;

        public const string CurrentVersion = "SELECT COALESCE(MAX(version), 0) FROM schema_version";

        /// <summary>Resolved like the statements above, through the session's search_path.</summary>
        public const string VersionTableExists = "SELECT to_regclass('schema_version') IS NOT NULL";

        public const string RecordVersion = "INSERT INTO schema_version (version, name) VALUES (@Version, @Name)";
    }

    /// <summary>
    /// The nodes' session locks (PostgresNodeSessionLock): a session-level advisory lock per node id
    /// in the farm database, in a key space of Farm's own (the two-key form: space, node id).
    /// </summary>
    public static class NodeLocks
    {
        /// <summary>"Farm" in ASCII: the first key of every node lock, so other users of the database keep theirs.</summary>
        public const int Space = 0x4661726D;

        /// <summary>Takes node @NodeId's lock for this session if no session holds it; true when taken (or already held by this session).</summary>
        public const string TryLock = "SELECT pg_try_advisory_lock(@Space, @NodeId::int)";

        public const string Unlock = "SELECT pg_advisory_unlock(@Space, @NodeId::int)";

        /// <summary>
        /// Takes node @NodeId's lock for this session if no session holds it (NULL: taken);
        /// otherwise the application name of the session holding it, which tells the node's own
        /// session (<see cref="SessionName"/>) from another node's probe ('' when the holder went
        /// in between: the next probe tells).
        /// </summary>
        public const string TryLockOrNameHolder = """
            SELECT CASE WHEN pg_try_advisory_lock(@Space, @NodeId::int) THEN NULL
              ELSE COALESCE((
                SELECT a.application_name
                FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                  AND l.classid = @Space::oid AND l.objid = @NodeId::bigint::oid
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                LIMIT 1), '')
            END
            """;

        /// <summary>The application name of node <paramref name="nodeId"/>'s lock session, as pg_stat_activity shows it to every role.</summary>
        public static string SessionName(long nodeId) => $"Farm node {nodeId} session lock";

        /// <summary>Whether the session still answers.</summary>
        public const string Ping = "SELECT 1";

        /// <summary>
        /// The node ids whose lock some session of this database holds: a two-key advisory lock shows
        /// in pg_locks as classid = the first key, objid = the second, objsubid = 2. Takes no lock.
        /// </summary>
        public const string Held = """
            SELECT objid::bigint
            FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND objsubid = 2
              AND classid = @Space::oid
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """;
    }

    public static class Server
    {
        /// <summary>
        /// CREATE DATABASE takes no parameters; the name is quoted by <see cref="QuoteIdentifier"/>,
        /// which makes any string a single identifier.
        /// </summary>
        public static string CreateDatabase(string name) => $"CREATE DATABASE {QuoteIdentifier(name)}";

        /// <summary>WITH (FORCE) ends the sessions still connected (PostgreSQL 13 and later).</summary>
        public static string DropDatabase(string name) => $"DROP DATABASE IF EXISTS {QuoteIdentifier(name)} WITH (FORCE)";

        public static string QuoteIdentifier(string name) => "\"" + name.Replace("\"", "\"\"", StringComparison.Ordinal) + "\"";
    }

    /// <summary>The farm database's statements, as the shared store (FarmDatabase/FarmStore.cs) runs them.</summary>
    public static readonly FarmDatabase.FarmSql Farm = new(typeof(FarmDb));

    public static class FarmDb
    {
        private const string NodeColumns = $"""
            id AS Id, address AS Address, metrics_address AS MetricsAddress, amqp_address AS AmqpAddress, state AS State, process_id AS ProcessId,
            (floor(extract(epoch from heartbeat_at) * 1000))::bigint AS HeartbeatAtMs, (floor(extract(epoch from ({Now} - heartbeat_at)) * 1000))::bigint AS HeartbeatAgeMs
            """;

        public const string RegisterNode = $"""
            INSERT INTO nodes (id, address, metrics_address, amqp_address, state, process_id, heartbeat_at)
            VALUES (@Id, @Address, @MetricsAddress, @AmqpAddress, @State, @ProcessId, {Now})
            ON CONFLICT (id) DO UPDATE SET
                address = excluded.address, metrics_address = excluded.metrics_address, amqp_address = excluded.amqp_address, state = excluded.state,
                process_id = excluded.process_id, heartbeat_at = excluded.heartbeat_at
            RETURNING {NodeColumns}
            """;

        /// <summary>
        /// Only the process that registered the node id last: another one registering it takes it over.
        /// A process taken for crashed that still heartbeats (its database session dropped) is active again.
        /// </summary>
        public const string Heartbeat = $"""
            UPDATE nodes SET heartbeat_at = {Now}, state = CASE WHEN state = 'crashed' THEN 'active' ELSE state END
            WHERE id = @Id AND process_id = @ProcessId AND address = @Address
            """;

        public const string CountNode = "SELECT COUNT(*) FROM nodes WHERE id = @Id";

        public const string SetNodeState = "UPDATE nodes SET state = @State WHERE id = @Id";

        /// <summary>Only the process found gone, and only while active: a draining or stopped node keeps its state.</summary>
        public const string MarkNodeCrashed = "UPDATE nodes SET state = @Crashed WHERE id = @Id AND process_id = @ProcessId AND state = @Active";

        public const string ListNodes = $"SELECT {NodeColumns} FROM nodes ORDER BY id";

        private const string ContainerColumns = $"""
            c.id AS Id, c.connection_string AS ConnectionString, c.owner_node AS OwnerNode, c.epoch AS Epoch,
            (floor(extract(epoch from c.lease_expires_at) * 1000))::bigint AS LeaseExpiresAtMs, (floor(extract(epoch from c.owned_since) * 1000))::bigint AS OwnedSinceMs,
            (SELECT COUNT(*) FROM entities e WHERE e.container_id = c.id AND e.parent_id IS NULL) AS EntityCount, c.server AS Server
            """;

        /// <summary>The real connection string needs the id, so the row is inserted first and named after.</summary>
        public const string InsertContainer = "INSERT INTO containers (connection_string, epoch) VALUES ('', 0) RETURNING id";

        public const string SetContainerConnectionString = $"""
            UPDATE containers c SET connection_string = @ConnectionString, server = @Server WHERE c.id = @Id
            RETURNING {ContainerColumns}
            """;

        public const string InsertServer = $"""
            INSERT INTO servers (name, connection_string, created_at) VALUES (@Name, @ConnectionString, {Now})
            ON CONFLICT (name) DO NOTHING
            """;

        public const string ListServers = """
            SELECT s.name AS Name, s.connection_string AS ConnectionString,
                   (SELECT COUNT(*) FROM containers c WHERE c.server = s.name) AS ContainerCount
            FROM servers s ORDER BY s.name
            """;

        public const string DeleteServer = "DELETE FROM servers WHERE name = @Name AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.server = @Name)";

        public const string ListContainers = $"SELECT {ContainerColumns} FROM containers c ORDER BY c.id";

        public const string GetContainer = $"SELECT {ContainerColumns} FROM containers c WHERE c.id = @Id";

        /// <summary>
        /// What a take finds, read in its transaction before <see cref="TryAcquireContainer"/>: the
        /// owner and its last heartbeat, or who released it and since when, for the change the take
        /// records. Locks the container's row until the take's transaction ends, so a take racing this
        /// one waits here, then reads what the winner left (and its UPDATE finds a live lease).
        /// </summary>
        public const string ReadContainerBeforeTake = """
            SELECT c.owner_node AS OwnerNode, c.epoch AS Epoch,
                (floor(extract(epoch from c.lease_expires_at) * 1000))::bigint AS LeaseExpiresAtMs,
                (floor(extract(epoch from n.heartbeat_at) * 1000))::bigint AS OwnerHeartbeatAtMs,
                c.released_by AS ReleasedBy, (floor(extract(epoch from c.released_at) * 1000))::bigint AS ReleasedAtMs,
                c.released_abandoned AS ReleasedAbandoned
            FROM containers c LEFT JOIN nodes n ON n.id = c.owner_node
            WHERE c.id = @Id
            FOR UPDATE OF c
            """;

        /// <summary>
        /// The lease decision in one conditional statement, judged by the server's clock: take the
        /// container when it is unowned, its lease has run out, or the node already holds it. A new
        /// owner (including the same node coming back after a release) raises the epoch. Two nodes
        /// racing for it queue on the row lock, and the second re-checks the condition against the
        /// first one's row, so at most one of them gets it. The record of the last release goes: the
        /// container is owned again.
        /// </summary>
        public const string TryAcquireContainer = $"""
            UPDATE containers c SET
                epoch = CASE WHEN c.owner_node = @NodeId THEN c.epoch ELSE c.epoch + 1 END,
                owned_since = CASE WHEN c.owner_node = @NodeId THEN c.owned_since ELSE {Now} END,
                owner_node = @NodeId,
                lease_expires_at = {Now} + @LeaseMs * interval '1 millisecond',
                released_at = NULL, released_by = NULL, released_abandoned = false
            WHERE c.id = @Id
              AND (c.owner_node IS NULL OR c.owner_node = @NodeId OR c.lease_expires_at <= {Now})
            RETURNING {ContainerColumns}
            """;

        /// <summary>
        /// The change a take made, in its transaction (now is the take's time; unowned is counted up
        /// to it), then the pruning that keeps the newest @Keep rows: the id of the @Keep-th newest is
        /// found through the primary key, so a take reads at most @Keep index entries and deletes the
        /// row or two past them. (GREATEST alone would turn an unknown time into 0.)
        /// </summary>
        public const string RecordOwnershipChange = $"""
            INSERT INTO ownership_changes (container_id, epoch, from_node, to_node, kind, unowned_ms, at)
            VALUES (@ContainerId, @Epoch, @FromNode, @ToNode, @Kind,
                CASE WHEN @UnownedSinceMs IS NULL THEN NULL
                     ELSE GREATEST(0, (floor(extract(epoch from {Now}) * 1000))::bigint - @UnownedSinceMs) END,
                {Now});
            DELETE FROM ownership_changes
            WHERE id < (SELECT id FROM ownership_changes ORDER BY id DESC LIMIT 1 OFFSET @Keep - 1);
            """;

        public const string ListOwnershipChanges = """
            SELECT container_id AS ContainerId, epoch AS Epoch, from_node AS FromNode, to_node AS ToNode, kind AS Kind,
                unowned_ms AS UnownedMs, (floor(extract(epoch from at) * 1000))::bigint AS AtMs
            FROM ownership_changes
            ORDER BY id DESC
            LIMIT @Limit
            """;

        public const string RenewContainerLease = $"""
            UPDATE containers SET lease_expires_at = {Now} + @LeaseMs * interval '1 millisecond'
            WHERE id = @Id AND owner_node = @NodeId AND epoch = @Epoch
            """;

        /// <summary>
        /// Unowned from now on, or from when the lease ran out if that came first (the owner had
        /// stopped serving by then: a re-take after a lost lease). LEAST skips NULLs.
        /// </summary>
        public const string ReleaseContainer = $"""
            UPDATE containers SET owner_node = NULL, lease_expires_at = NULL, owned_since = NULL,
                released_at = LEAST({Now}, lease_expires_at), released_by = @NodeId, released_abandoned = false
            WHERE id = @Id AND owner_node = @NodeId
            """;

        /// <summary>A crashed process's leftover: unowned since that process was last alive (@LastAliveMs, when known).</summary>
        public const string ReleaseAbandonedContainer = $"""
            UPDATE containers SET owner_node = NULL, lease_expires_at = NULL, owned_since = NULL,
                released_at = LEAST({Now}, lease_expires_at, 'epoch'::timestamptz + @LastAliveMs * interval '1 millisecond'),
                released_by = @NodeId, released_abandoned = true
            WHERE id = @Id AND owner_node = @NodeId
            """;

        private const string EntityColumns = $"""
            id AS Id, name AS Name, kind AS Kind, container_id AS ContainerId, properties_json AS PropertiesJson,
            (floor(extract(epoch from created_at) * 1000))::bigint AS CreatedAtMs, (floor(extract(epoch from updated_at) * 1000))::bigint AS UpdatedAtMs, parent_id AS ParentId
            """;

        public const string InsertEntity = $"""
            INSERT INTO entities (name, name_key, kind, container_id, properties_json, created_at, updated_at)
            VALUES (@Name, @NameKey, @Kind, @ContainerId, @PropertiesJson, {Now}, {Now})
            RETURNING {EntityColumns}
            """;

        public const string GetEntity = $"SELECT {EntityColumns} FROM entities WHERE name_key = @NameKey";

        /// <summary>The entities whose ids are in @Ids, a JSON array (as on SQLite): one parameter however many.</summary>
        public const string GetEntitiesById = $"SELECT {EntityColumns} FROM entities WHERE id IN (SELECT jsonb_array_elements_text(CAST(@Ids AS jsonb))::bigint)";

        public const string ListEntities = $"SELECT {EntityColumns} FROM entities ORDER BY name_key";

        public const string ListEntitiesOfKind = $"SELECT {EntityColumns} FROM entities WHERE kind = @Kind ORDER BY name_key";

        public const string ListEntitiesInContainer = $"SELECT {EntityColumns} FROM entities WHERE container_id = @ContainerId ORDER BY name_key";

        public const string UpdateEntity = $"""
            UPDATE entities SET properties_json = @PropertiesJson, updated_at = {Now}
            WHERE name_key = @NameKey
            RETURNING {EntityColumns}
            """;

        /// <summary>The foreign keys' ON DELETE CASCADE takes a topic's subscriptions and their rules along.</summary>
        public const string DeleteEntity = "DELETE FROM entities WHERE name_key = @NameKey";

        public const string GetEntityName = "SELECT name FROM entities WHERE id = @Id";

        /// <summary>
        /// A child in its parent's container; no row when the parent is gone. A parent deleted by a
        /// transaction that commits after this one's snapshot fails the parent_id foreign key instead.
        /// </summary>
        public const string InsertChildEntity = $"""
            INSERT INTO entities (name, name_key, kind, container_id, parent_id, properties_json, created_at, updated_at)
            SELECT @Name, @NameKey, @Kind, p.container_id, p.id, @PropertiesJson, {Now}, {Now}
            FROM entities p WHERE p.id = @ParentId
            RETURNING {EntityColumns}
            """;

        public const string ListChildEntities = $"SELECT {EntityColumns} FROM entities WHERE parent_id = @ParentId ORDER BY name_key";

        /// <summary>Qualified by the alias r, for the join of <see cref="ListRulesOfTopic"/>.</summary>
        private const string RuleColumns = $"""
            r.id AS Id, r.subscription_id AS SubscriptionId, r.name AS Name, r.definition_json AS DefinitionJson,
            (floor(extract(epoch from r.created_at) * 1000))::bigint AS CreatedAtMs
            """;

        /// <summary>No row when the subscription is gone (or a foreign-key violation when it went concurrently).</summary>
        public const string InsertRule = $"""
            INSERT INTO rules AS r (subscription_id, name, name_key, definition_json, created_at)
            SELECT s.id, @Name, @NameKey, @DefinitionJson, {Now}
            FROM entities s WHERE s.id = @SubscriptionId
            RETURNING {RuleColumns}
            """;

        public const string DeleteRule = "DELETE FROM rules WHERE subscription_id = @SubscriptionId AND name_key = @NameKey";

        public const string UpdateRule = $"""
            UPDATE rules AS r SET definition_json = @DefinitionJson
            WHERE r.subscription_id = @SubscriptionId AND r.name_key = @NameKey
            RETURNING {RuleColumns}
            """;

        /// <summary>Identity ids rise with every rule created, so id order is creation order.</summary>
        public const string ListRules = $"SELECT {RuleColumns} FROM rules r WHERE r.subscription_id = @SubscriptionId ORDER BY r.id";

        private const string AccessPolicyColumns = """
            name AS Name, rights AS Rights, primary_key AS PrimaryKey, secondary_key AS SecondaryKey,
            (floor(extract(epoch from created_at) * 1000))::bigint AS CreatedAtMs, (floor(extract(epoch from updated_at) * 1000))::bigint AS UpdatedAtMs
            """;

        /// <summary>
        /// The first Manage policy of a farm that has none (a new farm, or one from before schema 6);
        /// ON CONFLICT: a policy of that name stays as it is, keys and all.
        /// </summary>
        public const string InsertRootAccessPolicy = $"""
            INSERT INTO access_policies (name, rights, primary_key, secondary_key, created_at, updated_at)
            SELECT @Name, @Rights, @PrimaryKey, @SecondaryKey, {Now}, {Now}
            WHERE NOT EXISTS (SELECT 1 FROM access_policies WHERE (rights & @Manage) <> 0)
            ON CONFLICT (name) DO NOTHING
            """;

        /// <summary>No row when the name is taken.</summary>
        public const string InsertAccessPolicy = $"""
            INSERT INTO access_policies (name, rights, primary_key, secondary_key, created_at, updated_at)
            VALUES (@Name, @Rights, @PrimaryKey, @SecondaryKey, {Now}, {Now})
            ON CONFLICT (name) DO NOTHING
            RETURNING {AccessPolicyColumns}
            """;

        public const string ListAccessPolicies = $"SELECT {AccessPolicyColumns} FROM access_policies ORDER BY name";

        public const string GetAccessPolicy = $"SELECT {AccessPolicyColumns} FROM access_policies WHERE name = @Name";

        /// <summary>
        /// Held to the end of the transaction: changes of the policies that check the others (a delete
        /// keeps the last Manage policy) run one at a time. Readers are not blocked.
        /// </summary>
        public const string LockAccessPolicies = "LOCK TABLE access_policies IN SHARE ROW EXCLUSIVE MODE";

        /// <summary>Deletes nothing when the policy is the last one with Manage (the farm would lock itself out).</summary>
        public const string DeleteAccessPolicy = """
            DELETE FROM access_policies
            WHERE name = @Name
              AND ((rights & @Manage) = 0
                   OR EXISTS (SELECT 1 FROM access_policies other WHERE other.name <> @Name AND (other.rights & @Manage) <> 0))
            """;

        public const string UpdateAccessPolicyKeys = $"""
            UPDATE access_policies SET primary_key = @PrimaryKey, secondary_key = @SecondaryKey, updated_at = {Now}
            WHERE name = @Name
            RETURNING {AccessPolicyColumns}
            """;

        public const string ListRulesOfTopic = $"""
            SELECT {RuleColumns}
            FROM rules r JOIN entities s ON s.id = r.subscription_id
            WHERE s.parent_id = @TopicId
            ORDER BY r.id
            """;
    }

    /// <summary>
    /// The container database runs through raw Npgsql commands with positional parameters ($1...):
    /// the write path sends a whole group commit as one batch of set-based statements, each taking
    /// its rows as arrays, so a commit costs a few round trips however many rows it carries.
    /// </summary>
    public static class ContainerDb
    {
        public const string ReadEpoch = "SELECT epoch FROM owner WHERE id = 1";

        /// <summary>
        /// The fence: locks the owner row until the commit ends, so a new owner's
        /// <see cref="RaiseEpoch"/> waits for this transaction and cannot slip in between the check
        /// and the commit.
        /// </summary>
        public const string LockEpoch = "SELECT epoch FROM owner WHERE id = 1 FOR UPDATE";

        /// <summary>
        /// How long <see cref="RaiseEpoch"/> waits for the owner row: a former owner's commit in
        /// flight ends within milliseconds, a stranded one only when the server ends it
        /// (<see cref="StrandedTransactionSessionOptions"/>). Failing fast keeps the caller's
        /// ownership pass (and its heartbeat) going; it tries again on the next pass.
        /// </summary>
        public const string RaiseEpochLockTimeout = "SET LOCAL lock_timeout = '500ms'";

        /// <summary>
        /// True when the epoch was raised or already equals $1. The outer SELECT sees the row as it
        /// was before the UPDATE, so the second test only matters when nothing was raised.
        /// </summary>
        public const string RaiseEpoch = """
            WITH raised AS (UPDATE owner SET epoch = $1 WHERE id = 1 AND epoch < $1 RETURNING epoch)
            SELECT EXISTS (SELECT 1 FROM raised) OR (SELECT epoch FROM owner WHERE id = 1) = $1
            """;

        /// <summary>The counter first (what a scalar read takes), then the delivery mark and a follower's slot, start and done mark.</summary>
        public const string ReadNextSequence = "SELECT next_sequence, delivered_through, follower_slot, follow_from, done_through FROM entity_state WHERE entity_id = $1";

        /// <summary>
        /// Of the entity ids $1, those with no message row and no duplicate id live at $2, with their
        /// counter and delivery mark (null: never written): an index probe of each table per id. A
        /// follower of topic $3 is quiet only while the topic holds no membership after its done mark.
        /// </summary>
        public const string FindQuiet = """
            SELECT i.id, s.next_sequence, s.delivered_through, s.follower_slot, s.follow_from, s.done_through
            FROM unnest($1::bigint[]) AS i(id)
            LEFT JOIN entity_state s ON s.entity_id = i.id
            WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.entity_id = i.id)
              AND NOT EXISTS (SELECT 1 FROM duplicates d WHERE d.entity_id = i.id AND d.expires_at_ms > $2)
              AND (s.follower_slot IS NULL OR NOT EXISTS (
                    SELECT 1 FROM copy_members c
                    WHERE c.topic_id = $3 AND c.sequence_number > GREATEST(s.done_through, s.follow_from - 1)))
            """;

        /// <summary>
        /// Column order is fixed: <see cref="PostgresContainerDatabase"/> reads by ordinal. Ordered by
        /// the primary key only, which the index already gives; the caller splits sub-queues.
        /// </summary>
        public const string LoadMessages = """
            SELECT entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms,
                   scheduled_at_ms, expires_at_ms, message_id, dl_reason, dl_description, dl_source,
                   payload, payload_size
            FROM messages
            WHERE entity_id = $1 AND state <> 3
            ORDER BY sequence_number
            """;

        /// <summary>The highest sequence number stored for an entity (0: none), from the primary key.</summary>
        public const string MaxSequence = "SELECT COALESCE(MAX(sequence_number), 0) FROM messages WHERE entity_id = $1";

        /// <summary>
        /// Scheduled messages (state 2, main queue only) from the due time and sequence number ($3, $4)
        /// on, in that order, at most $5 (index messages_by_due_time). $2 copies-of.
        /// </summary>
        public const string ReadScheduled = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = $1 AND state = 2 AND (scheduled_at_ms, sequence_number) >= ($3, $4)
            ORDER BY scheduled_at_ms, sequence_number
            LIMIT $5
            """;

        /// <summary>
        /// Active messages of the main queue after $3 whose expiry is at or before $4, the earliest first,
        /// at most $5 (index messages_by_expiry: only rows that can expire are in it, dead-lettered ones apart). $2 copies-of.
        /// </summary>
        public const string ReadExpired = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = $1 AND sub_queue = 0 AND state = 0 AND expires_at_ms IS NOT NULL
              AND expires_at_ms <= $4 AND sequence_number > $3
            ORDER BY expires_at_ms
            LIMIT $5
            """;

        /// <summary>Deferred messages (state 1) of the main queue, in sequence order, at most $3 (index messages_by_sub_queue). $2 copies-of.</summary>
        public const string ReadDeferred = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = $1 AND sub_queue = 0 AND state = 1
            ORDER BY sequence_number
            LIMIT $3
            """;

        /// <summary>How many deferred (1) and scheduled (2) messages the main queue holds, and their bytes (an index-only scan).</summary>
        public const string CountHeld = """
            SELECT state, COUNT(*), COALESCE(SUM(payload_size), 0)::bigint
            FROM messages
            WHERE entity_id = $1 AND sub_queue = 0 AND state IN (1, 2)
            GROUP BY state
            """;

        /// <summary>Messages by sequence number ($3), any state. $2 copies-of.</summary>
        public const string ReadByKey = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = $1 AND sequence_number = ANY ($3) AND state <> 3
            ORDER BY sequence_number
            """;

        /// <summary>A sub-queue ($3) of messages in any state after $4, in order, at most $5, for peek. $2 copies-of.</summary>
        public const string ReadFrom = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = $1 AND sub_queue = $3 AND sequence_number > $4 AND state <> 3
            ORDER BY sequence_number
            LIMIT $5
            """;

        /// <summary>A sub-queue's active messages after a sequence number, in order (index messages_by_sub_queue). $1 entity, $2 copies-of, $3 sub-queue, $4 after, $5 limit.</summary>
        public const string ReadActive = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = $1 AND sub_queue = $3 AND state = 0 AND sequence_number > $4
            ORDER BY sequence_number
            LIMIT $5
            """;

        /// <summary>
        /// The columns of <see cref="LoadMessages"/>, for the paged reads: a row stored without a payload
        /// (a subscription's pointer at its topic's copy) gets the copy's, from the entity $2. COALESCE
        /// evaluates only what it needs, so a queue's rows never run the lookup. The last column
        /// (<see cref="MessageRecord.StoredAlone"/>) says whether a subscription's row carries its own
        /// payload while its topic holds no copy; for a queue's rows ($2 = 0) it is not looked up.
        /// </summary>
        private const string PagedColumns = """
            entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms,
            scheduled_at_ms, expires_at_ms, message_id, dl_reason, dl_description, dl_source,
            COALESCE(payload, (SELECT c.payload FROM messages c WHERE c.entity_id = $2 AND c.sequence_number = messages.sequence_number)),
            payload_size,
            CASE WHEN $2 = 0 OR payload IS NULL THEN false
                 ELSE NOT EXISTS (SELECT 1 FROM messages c WHERE c.entity_id = $2 AND c.sequence_number = messages.sequence_number) END
            """;

        /// <summary>
        /// A subscription's ($1) rows that are their message's only stored form (own payload, no copy in
        /// the topic $2), and their bytes. Reads every row of the subscription: run once, at its load.
        /// </summary>
        public const string CountStoredAlone = """
            SELECT COUNT(*), COALESCE(SUM(payload_size), 0)::bigint
            FROM messages
            WHERE entity_id = $1 AND payload IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM messages c WHERE c.entity_id = $2 AND c.sequence_number = messages.sequence_number)
            """;

        /// <summary>
        /// The lowest sequence number of an active message in the main queue of any of the entities
        /// $1 (null: none): one index probe each, in one statement (a statement per subscription was
        /// 1,000 round trips per scan for a topic with 1,000, inside the commit loop).
        /// </summary>
        public const string LowestActiveOfAny = """
            SELECT MIN(l.lowest)
            FROM unnest($1::bigint[]) AS s(id)
            CROSS JOIN LATERAL (SELECT MIN(m.sequence_number) AS lowest FROM messages m
                                WHERE m.entity_id = s.id AND m.sub_queue = 0 AND m.state = 0) l
            """;

        /// <summary>
        /// A topic's stored copies in ($3, $4], in order, at most $5, each with whether a row of one of
        /// the subscriptions $2 (tombstones aside) still points at it, and its followers' membership:
        /// a primary-key probe per subscription.
        /// </summary>
        public const string ScanCopies = """
            SELECT t.sequence_number, t.payload_size,
                   EXISTS (SELECT 1 FROM messages s WHERE s.entity_id = ANY ($2) AND s.sequence_number = t.sequence_number AND s.state <> 3),
                   (SELECT c.members FROM copy_members c WHERE c.topic_id = t.entity_id AND c.sequence_number = t.sequence_number)
            FROM messages t
            WHERE t.entity_id = $1 AND t.sequence_number > $3 AND t.sequence_number <= $4
            ORDER BY t.sequence_number
            LIMIT $5
            """;

        /// <summary>The same for the copies of the sequence numbers $3.</summary>
        public const string CheckCopies = """
            SELECT t.sequence_number, t.payload_size,
                   EXISTS (SELECT 1 FROM messages s WHERE s.entity_id = ANY ($2) AND s.sequence_number = t.sequence_number AND s.state <> 3),
                   (SELECT c.members FROM copy_members c WHERE c.topic_id = t.entity_id AND c.sequence_number = t.sequence_number)
            FROM messages t
            WHERE t.entity_id = $1 AND t.sequence_number = ANY ($3)
            """;

        /// <summary>How many active messages of a sub-queue have a sequence number in (after, through], and their bytes (an index-only scan).</summary>
        public const string CountActiveAfter = """
            SELECT COUNT(*), COALESCE(SUM(payload_size), 0)::bigint
            FROM messages
            WHERE entity_id = $1 AND sub_queue = $2 AND state = 0 AND sequence_number > $3 AND sequence_number <= $4
            """;

        /// <summary>The memberships of topic $1's copies after $2, in order (a follower's implicit messages are among them).</summary>
        public const string ReadMemberships = """
            SELECT sequence_number, members FROM copy_members
            WHERE topic_id = $1 AND sequence_number > $2
            ORDER BY sequence_number
            """;

        /// <summary>Which of the sequence numbers $2 entity $1 has a row at, tombstones included.</summary>
        public const string RowsAt = "SELECT sequence_number FROM messages WHERE entity_id = $1 AND sequence_number = ANY ($2)";

        /// <summary>The copies of topic $1 at the sequence numbers $2, as a follower's implicit messages read them.</summary>
        public const string ReadCopiesAt = """
            SELECT sequence_number, enqueued_at_ms, message_id, payload, payload_size FROM messages
            WHERE entity_id = $1 AND sequence_number = ANY ($2)
            ORDER BY sequence_number
            """;

        public const string LoadDuplicates = """
            SELECT entity_id, message_id, expires_at_ms
            FROM duplicates
            WHERE entity_id = $1 AND expires_at_ms > $2
            ORDER BY message_id
            """;

        /// <summary>An entity's newest MessageIds within the window ($2), newest first, at most $3 (index duplicates_by_entity_expiry).</summary>
        public const string LoadNewestDuplicates = """
            SELECT entity_id, message_id, expires_at_ms
            FROM duplicates
            WHERE entity_id = $1 AND expires_at_ms > $2
            ORDER BY expires_at_ms DESC
            LIMIT $3
            """;

        /// <summary>Which of the MessageIds $2 entity $1 saw within the window ($3), by primary key.</summary>
        public const string FindDuplicates = """
            SELECT message_id FROM duplicates
            WHERE entity_id = $1 AND message_id = ANY ($2) AND expires_at_ms > $3
            """;

        /// <summary>Entity $1's MessageIds within the window ($3) after $2, in key order, at most $4.</summary>
        public const string ReadDuplicatesAfter = """
            SELECT entity_id, message_id, expires_at_ms
            FROM duplicates
            WHERE entity_id = $1 AND message_id > $2 AND expires_at_ms > $3
            ORDER BY message_id
            LIMIT $4
            """;

        /// <summary>A named send ($1, $2) recorded at or after $3, by primary key.</summary>
        public const string FindSendRecord = """
            SELECT producer_id, send_id, entity_id, sequence_numbers, at_ms
            FROM send_records
            WHERE producer_id = $1 AND send_id = $2 AND at_ms >= $3
            """;

        /// <summary>One producer's ($1) sends with the ids in $2 recorded at or after $3, by primary key.</summary>
        public const string FindSendRecords = """
            SELECT producer_id, send_id, entity_id, sequence_numbers, at_ms
            FROM send_records
            WHERE producer_id = $1 AND send_id = ANY ($2) AND at_ms >= $3
            """;

        /// <summary>The newest record of a producer whose id starts with $1, through send_records_by_time from the newest down.</summary>
        public const string NewestSendRecordAt = """
            SELECT at_ms FROM send_records
            WHERE starts_with(producer_id, $1)
            ORDER BY at_ms DESC LIMIT 1
            """;

        public const string ReadPayloads = """
            SELECT sequence_number, payload FROM messages
            WHERE entity_id = $1 AND sequence_number = ANY ($2) AND payload IS NOT NULL
            """;

        public const string PurgeMessages = "DELETE FROM messages WHERE entity_id = ANY ($1)";

        public const string PurgeDuplicates = "DELETE FROM duplicates WHERE entity_id = ANY ($1)";

        public const string PurgeEntityState = "DELETE FROM entity_state WHERE entity_id = ANY ($1)";

        /// <summary>A topic's memberships go with it (a purged subscription's bits stay: its slot's next owner follows from later).</summary>
        public const string PurgeCopyMembers = "DELETE FROM copy_members WHERE topic_id = ANY ($1)";

        public const string InsertCopyMembers = "INSERT INTO copy_members (topic_id, sequence_number, members) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])";

        public const string DeleteCopyMembers = """
            DELETE FROM copy_members AS c
            USING unnest($1::bigint[], $2::bigint[]) AS d (topic_id, sequence_number)
            WHERE c.topic_id = d.topic_id AND c.sequence_number = d.sequence_number
            """;

        /// <summary>
        /// Implicit messages' first writes: each row as the update leaves it, inserted when the message
        /// has none yet (the columns of <see cref="InsertMessages"/>; a null payload keeps a stored one).
        /// The rows must name each message at most once.
        /// </summary>
        public const string UpsertMessages = InsertMessages + """

            ON CONFLICT (entity_id, sequence_number) DO UPDATE SET
                sub_queue = excluded.sub_queue, state = excluded.state, delivery_count = excluded.delivery_count,
                dl_reason = excluded.dl_reason, dl_description = excluded.dl_description, dl_source = excluded.dl_source,
                payload = COALESCE(excluded.payload, messages.payload),
                payload_size = CASE WHEN excluded.payload IS NULL THEN messages.payload_size ELSE excluded.payload_size END
            """;

        /// <summary>Tombstones (state 3) in place of whatever row each message had; each key at most once.</summary>
        public const string UpsertTombstones = """
            INSERT INTO messages (entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms, payload_size)
            SELECT t.entity_id, t.sequence_number, 0, 3, 0, 0, 0 FROM unnest($1::bigint[], $2::bigint[]) AS t (entity_id, sequence_number)
            ON CONFLICT (entity_id, sequence_number) DO UPDATE SET
                sub_queue = 0, state = 3, delivery_count = 0, scheduled_at_ms = NULL, expires_at_ms = NULL,
                dl_reason = NULL, dl_description = NULL, dl_source = NULL, payload = NULL, payload_size = 0
            """;

        /// <summary>Never backwards.</summary>
        public const string UpsertDoneThrough = """
            INSERT INTO entity_state (entity_id, next_sequence, done_through)
            SELECT d.entity_id, 1, d.through FROM unnest($1::bigint[], $2::bigint[]) AS d (entity_id, through)
            ON CONFLICT (entity_id) DO UPDATE SET done_through = GREATEST(entity_state.done_through, excluded.done_through)
            """;

        /// <summary>The tombstones the done marks passed (index messages_by_sub_queue).</summary>
        public const string DeleteTombstonesThrough = """
            DELETE FROM messages AS m
            USING unnest($1::bigint[], $2::bigint[]) AS d (entity_id, through)
            WHERE m.entity_id = d.entity_id AND m.sub_queue = 0 AND m.state = 3 AND m.sequence_number <= d.through
            """;

        public const string UpsertFollowers = """
            INSERT INTO entity_state (entity_id, next_sequence, follower_slot, follow_from)
            SELECT f.entity_id, 1, f.slot, f.follow_from FROM unnest($1::bigint[], $2::integer[], $3::bigint[]) AS f (entity_id, slot, follow_from)
            ON CONFLICT (entity_id) DO UPDATE SET follower_slot = excluded.follower_slot, follow_from = excluded.follow_from
            """;

        /// <summary>All of a batch's new messages in one statement, one array per column.</summary>
        public const string InsertMessages = """
            INSERT INTO messages (entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms,
                                  scheduled_at_ms, expires_at_ms, message_id, dl_reason, dl_description, dl_source,
                                  payload, payload_size)
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::integer[], $5::integer[], $6::bigint[],
                                 $7::bigint[], $8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[],
                                 $13::bytea[], $14::integer[])
            """;

        /// <summary>
        /// A null payload keeps the stored one (and its size). The rows must name each message at
        /// most once: an UPDATE ... FROM applies only one of several matches.
        /// </summary>
        public const string UpdateMessages = """
            UPDATE messages AS m SET
                sub_queue = u.sub_queue, state = u.state, delivery_count = u.delivery_count,
                dl_reason = u.dl_reason, dl_description = u.dl_description, dl_source = u.dl_source,
                payload = COALESCE(u.payload, m.payload),
                payload_size = CASE WHEN u.payload IS NULL THEN m.payload_size ELSE octet_length(u.payload) END
            FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::integer[], $5::integer[],
                        $6::text[], $7::text[], $8::text[], $9::bytea[])
                 AS u (entity_id, sequence_number, sub_queue, state, delivery_count, dl_reason, dl_description, dl_source, payload)
            WHERE m.entity_id = u.entity_id AND m.sequence_number = u.sequence_number
            """;

        public const string DeleteMessages = """
            DELETE FROM messages AS m
            USING unnest($1::bigint[], $2::bigint[]) AS d (entity_id, sequence_number)
            WHERE m.entity_id = d.entity_id AND m.sequence_number = d.sequence_number
            """;

        /// <summary>Never backwards: commits of concurrent sends can land out of sequence order.</summary>
        public const string UpsertSequences = """
            INSERT INTO entity_state (entity_id, next_sequence)
            SELECT * FROM unnest($1::bigint[], $2::bigint[])
            ON CONFLICT (entity_id) DO UPDATE SET next_sequence = GREATEST(entity_state.next_sequence, excluded.next_sequence)
            """;

        /// <summary>
        /// Never backwards. A subscription has no counter of its own (its sequence numbers are its
        /// topic's): its first mark makes its row, with the counter every entity starts from.
        /// </summary>
        public const string UpsertDeliveryMarks = """
            INSERT INTO entity_state (entity_id, next_sequence, delivered_through)
            SELECT m.entity_id, 1, m.through FROM unnest($1::bigint[], $2::bigint[]) AS m (entity_id, through)
            ON CONFLICT (entity_id) DO UPDATE SET delivered_through = GREATEST(entity_state.delivered_through, excluded.delivered_through)
            """;

        /// <summary>The rows must name each (entity, MessageId) at most once: ON CONFLICT cannot touch a row twice.</summary>
        public const string UpsertDuplicates = """
            INSERT INTO duplicates (entity_id, message_id, expires_at_ms)
            SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
            ON CONFLICT (entity_id, message_id) DO UPDATE SET expires_at_ms = excluded.expires_at_ms
            """;

        public const string PruneDuplicates = "DELETE FROM duplicates WHERE expires_at_ms < $1";

        /// <summary>A record must never fail a commit: a pair already there keeps its first record.</summary>
        public const string InsertSendRecords = """
            INSERT INTO send_records (producer_id, send_id, entity_id, sequence_numbers, at_ms)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bigint[])
            ON CONFLICT (producer_id, send_id) DO NOTHING
            """;

        /// <summary>Through index send_records_by_time.</summary>
        public const string PruneSendRecords = "DELETE FROM send_records WHERE at_ms < $1";
    }
}
