namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// Every SQL statement the SQLite provider runs, in one place. The schema itself lives in the
/// versioned migration files under Migrations/.
/// </summary>
internal static class SqliteSql
{
    /// <summary>
    /// The database's clock as Unix milliseconds. SQLite holds 'now' fixed for the whole statement,
    /// so every use inside one statement sees the same instant.
    /// </summary>
    private const string NowMs = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

    /// <summary>
    /// Per connection, as these are not stored in the file. synchronous = FULL makes every commit
    /// durable (WAL fsynced) before it returns: an acknowledged send survives a power cut. A
    /// container's write connection then sets <see cref="CommitWithoutFsync"/> for itself.
    /// busy_timeout bounds how long a statement waits for another connection's lock.
    /// wal_autocheckpoint: see <see cref="WalAutoCheckpointPages"/>.
    /// </summary>
    public static string ConnectionPragmas(int busyTimeoutMs) =>
        $"PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = {busyTimeoutMs}; PRAGMA wal_autocheckpoint = {WalAutoCheckpointPages};";

    /// <summary>
    /// The commit that takes the WAL past this many pages copies them into the database file
    /// (SQLite's default is 1,000, 4 MB). A page written several times between two checkpoints is
    /// copied once, and a message's row is usually inserted and deleted within one: with 4,000
    /// (a WAL of about 16 MB, reused rather than grown) a queue with a backlog commits about 12% faster
    /// and half as many commits take over 2.5 ms (perf/README "Session 30"). Recovery after a crash
    /// reads the whole WAL, so it is not made much larger.
    /// </summary>
    public const int WalAutoCheckpointPages = 4000;

    /// <summary>
    /// For a container's write connection only: its commits append to the WAL without an fsync, and
    /// <see cref="WalFlusher"/> fsyncs the WAL before anything committed is acknowledged. The group
    /// commit so writes its next transaction while the disk writes this one. Checkpoints still fsync
    /// the WAL before copying it (SQLite does so at NORMAL).
    /// </summary>
    public const string CommitWithoutFsync = "PRAGMA synchronous = NORMAL;";

    /// <summary>WAL lets readers run beside the writer; it is stored in the file once set.</summary>
    public const string EnableWal = "PRAGMA journal_mode = WAL;";

    public static class Schema
    {
        public const string CreateVersionTable = """
            CREATE TABLE IF NOT EXISTS schema_version (
                version    INTEGER PRIMARY KEY,
                name       TEXT    NOT NULL,
                applied_at TEXT    NOT NULL
            )
            """;

        public const string CurrentVersion = "SELECT COALESCE(MAX(version), 0) FROM schema_version";

        public const string RecordVersion =
            "INSERT INTO schema_version (version, name, applied_at) VALUES (@Version, @Name, strftime('%Y-%m-%d %H:%M:%f', 'now'))";
    }

    /// <summary>The farm database's statements, as the shared store (FarmDatabase/FarmStore.cs) runs them.</summary>
    public static readonly FarmDatabase.FarmSql Farm = new(typeof(FarmDb));

    public static class FarmDb
    {
        private const string NodeColumns = $"""
            id AS Id, address AS Address, metrics_address AS MetricsAddress, amqp_address AS AmqpAddress, state AS State, process_id AS ProcessId,
            heartbeat_at AS HeartbeatAtMs, {NowMs} - heartbeat_at AS HeartbeatAgeMs
            """;

        public const string RegisterNode = $"""
            INSERT INTO nodes (id, address, metrics_address, amqp_address, state, process_id, heartbeat_at)
            VALUES (@Id, @Address, @MetricsAddress, @AmqpAddress, @State, @ProcessId, {NowMs})
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
            UPDATE nodes SET heartbeat_at = {NowMs}, state = CASE WHEN state = 'crashed' THEN 'active' ELSE state END
            WHERE id = @Id AND process_id = @ProcessId AND address = @Address
            """;

        public const string CountNode = "SELECT COUNT(*) FROM nodes WHERE id = @Id";

        public const string SetNodeState = "UPDATE nodes SET state = @State WHERE id = @Id";

        /// <summary>Only the process found gone, and only while active: a draining or stopped node keeps its state.</summary>
        public const string MarkNodeCrashed = "UPDATE nodes SET state = @Crashed WHERE id = @Id AND process_id = @ProcessId AND state = @Active";

        public const string ListNodes = $"SELECT {NodeColumns} FROM nodes ORDER BY id";

        private const string ContainerColumns = """
            c.id AS Id, c.connection_string AS ConnectionString, c.owner_node AS OwnerNode, c.epoch AS Epoch,
            c.lease_expires_at AS LeaseExpiresAtMs, c.owned_since AS OwnedSinceMs,
            (SELECT COUNT(*) FROM entities e WHERE e.container_id = c.id AND e.parent_id IS NULL) AS EntityCount, c.server AS Server
            """;

        /// <summary>The real connection string needs the id, so the row is inserted first and named after.</summary>
        public const string InsertContainer = "INSERT INTO containers (connection_string, epoch) VALUES ('', 0) RETURNING id";

        public const string SetContainerConnectionString = "UPDATE containers SET connection_string = @ConnectionString, server = @Server WHERE id = @Id";

        public const string InsertServer = $"""
            INSERT INTO servers (name, connection_string, created_at) VALUES (@Name, @ConnectionString, {NowMs})
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
        /// What a take finds, read in its transaction before <see cref="TryAcquireContainer"/> (the
        /// write lock keeps it true): the owner and its last heartbeat, or who released it and since
        /// when, for the change the take records.
        /// </summary>
        public const string ReadContainerBeforeTake = """
            SELECT c.owner_node AS OwnerNode, c.epoch AS Epoch, c.lease_expires_at AS LeaseExpiresAtMs,
                n.heartbeat_at AS OwnerHeartbeatAtMs,
                c.released_by AS ReleasedBy, c.released_at AS ReleasedAtMs, c.released_abandoned AS ReleasedAbandoned
            FROM containers c LEFT JOIN nodes n ON n.id = c.owner_node
            WHERE c.id = @Id
            """;

        /// <summary>
        /// The lease decision in one conditional statement, judged by the database's clock: take the
        /// container when it is unowned, its lease has run out, or the node already holds it. A new
        /// owner (including the same node coming back after a release) raises the epoch. The record
        /// of the last release goes: the container is owned again.
        /// </summary>
        public const string TryAcquireContainer = $"""
            UPDATE containers SET
                epoch = CASE WHEN owner_node IS @NodeId THEN epoch ELSE epoch + 1 END,
                owned_since = CASE WHEN owner_node IS @NodeId THEN owned_since ELSE {NowMs} END,
                owner_node = @NodeId,
                lease_expires_at = {NowMs} + @LeaseMs,
                released_at = NULL, released_by = NULL, released_abandoned = 0
            WHERE id = @Id
              AND (owner_node IS NULL OR owner_node = @NodeId OR lease_expires_at <= {NowMs})
            """;

        /// <summary>
        /// The change a take made, in its transaction (now is the take's time; unowned is counted up
        /// to it), then the pruning that keeps the newest @Keep rows: the id of the @Keep-th newest is
        /// found through the primary key, so a take reads at most @Keep index entries and deletes the
        /// row or two past them.
        /// </summary>
        public const string RecordOwnershipChange = $"""
            INSERT INTO ownership_changes (container_id, epoch, from_node, to_node, kind, unowned_ms, at)
            VALUES (@ContainerId, @Epoch, @FromNode, @ToNode, @Kind,
                CASE WHEN @UnownedSinceMs IS NULL THEN NULL ELSE MAX(0, {NowMs} - @UnownedSinceMs) END, {NowMs});
            DELETE FROM ownership_changes
            WHERE id < (SELECT id FROM ownership_changes ORDER BY id DESC LIMIT 1 OFFSET @Keep - 1);
            """;

        public const string ListOwnershipChanges = """
            SELECT container_id AS ContainerId, epoch AS Epoch, from_node AS FromNode, to_node AS ToNode, kind AS Kind,
                unowned_ms AS UnownedMs, at AS AtMs
            FROM ownership_changes
            ORDER BY id DESC
            LIMIT @Limit
            """;

        public const string RenewContainerLease = $"""
            UPDATE containers SET lease_expires_at = {NowMs} + @LeaseMs
            WHERE id = @Id AND owner_node = @NodeId AND epoch = @Epoch
            """;

        /// <summary>
        /// Unowned from now on, or from when the lease ran out if that came first (the owner had
        /// stopped serving by then: a re-take after a lost lease).
        /// </summary>
        public const string ReleaseContainer = $"""
            UPDATE containers SET owner_node = NULL, lease_expires_at = NULL, owned_since = NULL,
                released_at = MIN({NowMs}, COALESCE(lease_expires_at, {NowMs})), released_by = @NodeId, released_abandoned = 0
            WHERE id = @Id AND owner_node = @NodeId
            """;

        /// <summary>A crashed process's leftover: unowned since that process was last alive (@LastAliveMs, when known).</summary>
        public const string ReleaseAbandonedContainer = $"""
            UPDATE containers SET owner_node = NULL, lease_expires_at = NULL, owned_since = NULL,
                released_at = MIN({NowMs}, COALESCE(lease_expires_at, {NowMs}), COALESCE(@LastAliveMs, {NowMs})),
                released_by = @NodeId, released_abandoned = 1
            WHERE id = @Id AND owner_node = @NodeId
            """;

        private const string EntityColumns = """
            id AS Id, name AS Name, kind AS Kind, container_id AS ContainerId, properties_json AS PropertiesJson,
            created_at AS CreatedAtMs, updated_at AS UpdatedAtMs, parent_id AS ParentId
            """;

        public const string InsertEntity = $"""
            INSERT INTO entities (name, name_key, kind, container_id, properties_json, created_at, updated_at)
            VALUES (@Name, @NameKey, @Kind, @ContainerId, @PropertiesJson, {NowMs}, {NowMs})
            RETURNING {EntityColumns}
            """;

        public const string GetEntity = $"SELECT {EntityColumns} FROM entities WHERE name_key = @NameKey";

        /// <summary>The entities whose ids are in @Ids, a JSON array: one parameter however many.</summary>
        public const string GetEntitiesById = $"SELECT {EntityColumns} FROM entities WHERE id IN (SELECT value FROM json_each(@Ids))";

        public const string ListEntities = $"SELECT {EntityColumns} FROM entities ORDER BY name_key";

        public const string ListEntitiesOfKind = $"SELECT {EntityColumns} FROM entities WHERE kind = @Kind ORDER BY name_key";

        public const string ListEntitiesInContainer = $"SELECT {EntityColumns} FROM entities WHERE container_id = @ContainerId ORDER BY name_key";

        public const string UpdateEntity = $"""
            UPDATE entities SET properties_json = @PropertiesJson, updated_at = {NowMs}
            WHERE name_key = @NameKey
            RETURNING {EntityColumns}
            """;

        /// <summary>The foreign keys' ON DELETE CASCADE takes a topic's subscriptions and their rules along.</summary>
        public const string DeleteEntity = "DELETE FROM entities WHERE name_key = @NameKey";

        public const string GetEntityName = "SELECT name FROM entities WHERE id = @Id";

        /// <summary>A child in its parent's container; no row when the parent is gone.</summary>
        public const string InsertChildEntity = $"""
            INSERT INTO entities (name, name_key, kind, container_id, parent_id, properties_json, created_at, updated_at)
            SELECT @Name, @NameKey, @Kind, p.container_id, p.id, @PropertiesJson, {NowMs}, {NowMs}
            FROM entities p WHERE p.id = @ParentId
            RETURNING {EntityColumns}
            """;

        public const string ListChildEntities = $"SELECT {EntityColumns} FROM entities WHERE parent_id = @ParentId ORDER BY name_key";

        /// <summary>Qualified by the alias r, for the join of <see cref="ListRulesOfTopic"/>.</summary>
        private const string RuleColumns = """
            r.id AS Id, r.subscription_id AS SubscriptionId, r.name AS Name, r.definition_json AS DefinitionJson,
            r.created_at AS CreatedAtMs
            """;

        /// <summary>RETURNING may name only the inserted table's columns, unqualified.</summary>
        private const string InsertedRuleColumns = """
            id AS Id, subscription_id AS SubscriptionId, name AS Name, definition_json AS DefinitionJson,
            created_at AS CreatedAtMs
            """;

        /// <summary>No row when the subscription is gone.</summary>
        public const string InsertRule = $"""
            INSERT INTO rules (subscription_id, name, name_key, definition_json, created_at)
            SELECT s.id, @Name, @NameKey, @DefinitionJson, {NowMs}
            FROM entities s WHERE s.id = @SubscriptionId
            RETURNING {InsertedRuleColumns}
            """;

        public const string DeleteRule = "DELETE FROM rules WHERE subscription_id = @SubscriptionId AND name_key = @NameKey";

        public const string UpdateRule = $"""
            UPDATE rules SET definition_json = @DefinitionJson
            WHERE subscription_id = @SubscriptionId AND name_key = @NameKey
            RETURNING {InsertedRuleColumns}
            """;

        /// <summary>Ids rise with every rule created, so id order is creation order.</summary>
        public const string ListRules = $"SELECT {RuleColumns} FROM rules r WHERE r.subscription_id = @SubscriptionId ORDER BY r.id";

        private const string AccessPolicyColumns = """
            name AS Name, rights AS Rights, primary_key AS PrimaryKey, secondary_key AS SecondaryKey,
            created_at AS CreatedAtMs, updated_at AS UpdatedAtMs
            """;

        /// <summary>
        /// The first Manage policy of a farm that has none (a new farm, or one from before schema 6);
        /// ON CONFLICT: a policy of that name stays as it is, keys and all.
        /// </summary>
        public const string InsertRootAccessPolicy = $"""
            INSERT INTO access_policies (name, rights, primary_key, secondary_key, created_at, updated_at)
            SELECT @Name, @Rights, @PrimaryKey, @SecondaryKey, {NowMs}, {NowMs}
            WHERE NOT EXISTS (SELECT 1 FROM access_policies WHERE (rights & @Manage) <> 0)
            ON CONFLICT (name) DO NOTHING
            """;

        /// <summary>No row when the name is taken.</summary>
        public const string InsertAccessPolicy = $"""
            INSERT INTO access_policies (name, rights, primary_key, secondary_key, created_at, updated_at)
            VALUES (@Name, @Rights, @PrimaryKey, @SecondaryKey, {NowMs}, {NowMs})
            ON CONFLICT (name) DO NOTHING
            RETURNING {AccessPolicyColumns}
            """;

        public const string ListAccessPolicies = $"SELECT {AccessPolicyColumns} FROM access_policies ORDER BY name";

        public const string GetAccessPolicy = $"SELECT {AccessPolicyColumns} FROM access_policies WHERE name = @Name";

        /// <summary>Nothing to do: the write transaction's BEGIN IMMEDIATE already holds SQLite's one write lock.</summary>
        public const string LockAccessPolicies = "SELECT 1";

        /// <summary>Deletes nothing when the policy is the last one with Manage (the farm would lock itself out).</summary>
        public const string DeleteAccessPolicy = """
            DELETE FROM access_policies
            WHERE name = @Name
              AND ((rights & @Manage) = 0
                   OR EXISTS (SELECT 1 FROM access_policies other WHERE other.name <> @Name AND (other.rights & @Manage) <> 0))
            """;

        public const string UpdateAccessPolicyKeys = $"""
            UPDATE access_policies SET primary_key = @PrimaryKey, secondary_key = @SecondaryKey, updated_at = {NowMs}
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

    public static class ContainerDb
    {
        public const string ReadEpoch = "SELECT epoch FROM owner WHERE id = 1";

        public const string RaiseEpoch = "UPDATE owner SET epoch = @Epoch WHERE id = 1 AND epoch < @Epoch";

        public const string ReadNextSequence = "SELECT next_sequence FROM entity_state WHERE entity_id = @EntityId";

        /// <summary>What a load needs of the entity's state row: its counter, its delivery mark and, for a follower, its slot, start and done mark.</summary>
        public const string ReadEntityState = "SELECT next_sequence, delivered_through, follower_slot, follow_from, done_through FROM entity_state WHERE entity_id = @EntityId";

        /// <summary>
        /// Of @Ids (a JSON array of entity ids), those with no message row and no duplicate id live at
        /// @NowMs, with their counter and delivery mark (null: never written): a primary-key probe of
        /// each table per id. A follower of topic @TopicId is quiet only while the topic holds no
        /// membership after its done mark (any subscription's: one probe, and the head load tells the rest).
        /// </summary>
        public const string FindQuiet = """
            SELECT i.value, s.next_sequence, s.delivered_through, s.follower_slot, s.follow_from, s.done_through
            FROM json_each(@Ids) i
            LEFT JOIN entity_state s ON s.entity_id = i.value
            WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.entity_id = i.value)
              AND NOT EXISTS (SELECT 1 FROM duplicates d WHERE d.entity_id = i.value AND d.expires_at_ms > @NowMs)
              AND (s.follower_slot IS NULL OR NOT EXISTS (
                    SELECT 1 FROM copy_members c
                    WHERE c.topic_id = @TopicId AND c.sequence_number > MAX(s.done_through, s.follow_from - 1)))
            """;

        /// <summary>
        /// Column order is fixed: <see cref="SqliteMessageReader"/> reads by ordinal. Ordered by the
        /// primary key only: ordering by sub-queue here would make SQLite sort every row, payloads and
        /// all, in a temporary b-tree; the caller splits sub-queues instead.
        /// </summary>
        public const string LoadMessages = """
            SELECT entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms,
                   scheduled_at_ms, expires_at_ms, message_id, dl_reason, dl_description, dl_source,
                   payload, payload_size
            FROM messages
            WHERE entity_id = @EntityId AND state <> 3
            ORDER BY sequence_number
            """;

        /// <summary>The highest sequence number stored for an entity (0: none), from the primary key.</summary>
        public const string MaxSequence = "SELECT COALESCE(MAX(sequence_number), 0) FROM messages WHERE entity_id = @EntityId";

        /// <summary>
        /// The columns of <see cref="LoadMessages"/>, for the paged reads: a row stored without a payload
        /// (a subscription's pointer at its topic's copy) gets the copy's, from the entity @CopiesOf. COALESCE
        /// stops at the first non-null argument, so a queue's rows never run the lookup. The last column
        /// (<see cref="MessageRecord.StoredAlone"/>) says whether a subscription's row carries its own
        /// payload while its topic holds no copy; for a queue's rows (@CopiesOf 0) it is not looked up.
        /// </summary>
        private const string PagedColumns = """
            entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms,
            scheduled_at_ms, expires_at_ms, message_id, dl_reason, dl_description, dl_source,
            COALESCE(payload, (SELECT c.payload FROM messages c WHERE c.entity_id = @CopiesOf AND c.sequence_number = messages.sequence_number)),
            payload_size,
            CASE WHEN @CopiesOf = 0 OR payload IS NULL THEN 0
                 ELSE NOT EXISTS (SELECT 1 FROM messages c WHERE c.entity_id = @CopiesOf AND c.sequence_number = messages.sequence_number) END
            """;

        /// <summary>
        /// A subscription's rows that are their message's only stored form (own payload, no copy in the
        /// topic @CopiesOf), and their bytes. Reads every row of the subscription: run once, at its load.
        /// </summary>
        public const string CountStoredAlone = """
            SELECT COUNT(*), COALESCE(SUM(payload_size), 0)
            FROM messages
            WHERE entity_id = @EntityId AND payload IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM messages c WHERE c.entity_id = @CopiesOf AND c.sequence_number = messages.sequence_number)
            """;

        /// <summary>
        /// Scheduled messages (state 2, main queue only) from the due time and sequence number
        /// (@At, @Sequence) on, in that order (index messages_by_due_time).
        /// </summary>
        public const string ReadScheduled = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = @EntityId AND state = 2 AND (scheduled_at_ms, sequence_number) >= (@At, @Sequence)
            ORDER BY scheduled_at_ms, sequence_number
            LIMIT @Limit
            """;

        /// <summary>
        /// Active messages of the main queue after @After whose expiry is at or before @Now, the earliest
        /// first (index messages_by_expiry: only rows that can expire are in it, dead-lettered ones apart).
        /// </summary>
        public const string ReadExpired = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = @EntityId AND sub_queue = 0 AND state = 0 AND expires_at_ms IS NOT NULL
              AND expires_at_ms <= @Now AND sequence_number > @After
            ORDER BY expires_at_ms
            LIMIT @Limit
            """;

        /// <summary>Deferred messages (state 1) of the main queue, in sequence order (index messages_by_sub_queue).</summary>
        public const string ReadDeferred = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = @EntityId AND sub_queue = 0 AND state = 1
            ORDER BY sequence_number
            LIMIT @Limit
            """;

        /// <summary>How many deferred (1) and scheduled (2) messages the main queue holds, and their bytes (from the index alone).</summary>
        public const string CountHeld = """
            SELECT state, COUNT(*), COALESCE(SUM(payload_size), 0)
            FROM messages
            WHERE entity_id = @EntityId AND sub_queue = 0 AND state IN (1, 2)
            GROUP BY state
            """;

        /// <summary>Messages by sequence number (@Sequences: a JSON array), any state.</summary>
        public const string ReadByKey = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = @EntityId AND sequence_number IN (SELECT value FROM json_each(@Sequences)) AND state <> 3
            ORDER BY sequence_number
            """;

        /// <summary>A sub-queue's messages in any state after a sequence number, in order, for peek.</summary>
        public const string ReadFrom = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = @EntityId AND sub_queue = @SubQueue AND sequence_number > @After AND state <> 3
            ORDER BY sequence_number
            LIMIT @Limit
            """;

        /// <summary>A sub-queue's active messages after a sequence number, in order (index messages_by_sub_queue).</summary>
        public const string ReadActive = $"""
            SELECT {PagedColumns}
            FROM messages
            WHERE entity_id = @EntityId AND sub_queue = @SubQueue AND state = 0 AND sequence_number > @After
            ORDER BY sequence_number
            LIMIT @Limit
            """;

        /// <summary>How many active messages of a sub-queue have a sequence number in (after, through], and their bytes (from the index alone).</summary>
        public const string CountActiveAfter = """
            SELECT COUNT(*), COALESCE(SUM(payload_size), 0)
            FROM messages
            WHERE entity_id = @EntityId AND sub_queue = @SubQueue AND state = 0 AND sequence_number > @After AND sequence_number <= @Through
            """;

        /// <summary>
        /// The lowest sequence number of an active message in the main queue of any of @Subscriptions
        /// (a JSON array of entity ids; null: none): one index probe each (messages_by_sub_queue), in
        /// one statement. (A query per subscription cost a topic with 1,000 of them 1,000 statements
        /// prepared and bound per scan, inside the commit loop.)
        /// </summary>
        public const string LowestActiveOfAny = """
            SELECT MIN((SELECT MIN(m.sequence_number) FROM messages m
                        WHERE m.entity_id = s.value AND m.sub_queue = 0 AND m.state = 0))
            FROM json_each(@Subscriptions) s
            """;

        /// <summary>
        /// A topic's stored copies in (@After, @Through], in order, each with whether a row of one of
        /// @Subscriptions (a JSON array; tombstones aside) still points at it, and its followers'
        /// membership (copy_members): a primary-key probe per subscription. One
        /// parameter for the list: Dapper's expansion into a parameter per subscription made SQLite
        /// match every name against all the others when it parsed and bound them (quadratic: a fifth
        /// of a node's CPU with 1,000 subscriptions at 2 msg/s).
        /// </summary>
        public const string ScanCopies = """
            SELECT t.sequence_number, t.payload_size,
                   EXISTS (SELECT 1 FROM messages s
                           WHERE s.entity_id IN (SELECT value FROM json_each(@Subscriptions)) AND s.sequence_number = t.sequence_number AND s.state <> 3),
                   (SELECT c.members FROM copy_members c WHERE c.topic_id = t.entity_id AND c.sequence_number = t.sequence_number)
            FROM messages t
            WHERE t.entity_id = @TopicId AND t.sequence_number > @After AND t.sequence_number <= @Through
            ORDER BY t.sequence_number
            LIMIT @Limit
            """;

        /// <summary>The same for the copies of the sequence numbers in @Sequences (a JSON array).</summary>
        public const string CheckCopies = """
            SELECT t.sequence_number, t.payload_size,
                   EXISTS (SELECT 1 FROM messages s
                           WHERE s.entity_id IN (SELECT value FROM json_each(@Subscriptions)) AND s.sequence_number = t.sequence_number AND s.state <> 3),
                   (SELECT c.members FROM copy_members c WHERE c.topic_id = t.entity_id AND c.sequence_number = t.sequence_number)
            FROM messages t
            WHERE t.entity_id = @TopicId AND t.sequence_number IN (SELECT value FROM json_each(@Sequences))
            """;

        /// <summary>The memberships of topic @TopicId's copies after @After, in order (a follower's implicit messages are among them).</summary>
        public const string ReadMemberships = """
            SELECT sequence_number, members FROM copy_members
            WHERE topic_id = @TopicId AND sequence_number > @After
            ORDER BY sequence_number
            """;

        /// <summary>Which of @Sequences (a JSON array) entity @EntityId has a row at, tombstones included.</summary>
        public const string RowsAt = """
            SELECT sequence_number FROM messages
            WHERE entity_id = @EntityId AND sequence_number IN (SELECT value FROM json_each(@Sequences))
            """;

        /// <summary>The copies of topic @TopicId at @Sequences (a JSON array), as a follower's implicit messages read them.</summary>
        public const string ReadCopiesAt = """
            SELECT sequence_number, enqueued_at_ms, message_id, payload, payload_size FROM messages
            WHERE entity_id = @TopicId AND sequence_number IN (SELECT value FROM json_each(@Sequences))
            ORDER BY sequence_number
            """;

        public const string LoadDuplicates = """
            SELECT entity_id AS EntityId, message_id AS MessageId, expires_at_ms AS ExpiresAtMs
            FROM duplicates
            WHERE entity_id = @EntityId AND expires_at_ms > @NowMs
            ORDER BY message_id
            """;

        /// <summary>An entity's newest MessageIds within the window, newest first, at most @Limit (index duplicates_by_entity_expiry).</summary>
        public const string LoadNewestDuplicates = """
            SELECT entity_id AS EntityId, message_id AS MessageId, expires_at_ms AS ExpiresAtMs
            FROM duplicates
            WHERE entity_id = @EntityId AND expires_at_ms > @NowMs
            ORDER BY expires_at_ms DESC
            LIMIT @Limit
            """;

        /// <summary>
        /// Which of @MessageIds (a JSON array, see <see cref="SqliteContainerDatabase"/>) an entity saw
        /// within the window, by primary key. One parameter, not a list Dapper expands: SQLite finds a
        /// named parameter by a linear search, so binding n expanded names cost n squared string
        /// compares, and every list length was a statement of its own to compile (perf/README Session 60).
        /// </summary>
        public const string FindDuplicates = """
            SELECT message_id FROM duplicates
            WHERE entity_id = @EntityId AND message_id IN (SELECT value FROM json_each(@MessageIds)) AND expires_at_ms > @NowMs
            """;

        /// <summary>An entity's MessageIds within the window after @After, in key order, at most @Limit.</summary>
        public const string ReadDuplicatesAfter = """
            SELECT entity_id AS EntityId, message_id AS MessageId, expires_at_ms AS ExpiresAtMs
            FROM duplicates
            WHERE entity_id = @EntityId AND message_id > @After AND expires_at_ms > @NowMs
            ORDER BY message_id
            LIMIT @Limit
            """;

        /// <summary>A named send recorded at or after @Since, by primary key.</summary>
        public const string FindSendRecord = """
            SELECT producer_id AS ProducerId, send_id AS SendId, entity_id AS EntityId, sequence_numbers AS SequenceNumbers, at_ms AS AtMs
            FROM send_records
            WHERE producer_id = @ProducerId AND send_id = @SendId AND at_ms >= @Since
            """;

        /// <summary>One producer's sends (@SendIds, a JSON array as in <see cref="FindDuplicates"/>) recorded at or after @Since, by primary key.</summary>
        public const string FindSendRecords = """
            SELECT producer_id AS ProducerId, send_id AS SendId, entity_id AS EntityId, sequence_numbers AS SequenceNumbers, at_ms AS AtMs
            FROM send_records
            WHERE producer_id = @ProducerId AND send_id IN (SELECT value FROM json_each(@SendIds)) AND at_ms >= @Since
            """;

        /// <summary>The newest record of a producer whose id starts with @Prefix, through send_records_by_time from the newest down.</summary>
        public const string NewestSendRecordAt = """
            SELECT at_ms FROM send_records INDEXED BY send_records_by_time
            WHERE substr(producer_id, 1, length(@Prefix)) = @Prefix
            ORDER BY at_ms DESC LIMIT 1
            """;

        public const string ReadPayload = "SELECT payload FROM messages WHERE entity_id = $entity AND sequence_number = $sequence";

        // The write path below runs through prepared commands with positional '$' parameters.
        public const string PurgeMessages = "DELETE FROM messages WHERE entity_id = $entity";

        public const string PurgeDuplicates = "DELETE FROM duplicates WHERE entity_id = $entity";

        public const string PurgeEntityState = "DELETE FROM entity_state WHERE entity_id = $entity";

        /// <summary>A topic's memberships go with it (a purged subscription's bits stay: its slot's next owner follows from later).</summary>
        public const string PurgeCopyMembers = "DELETE FROM copy_members WHERE topic_id = $entity";

        public const string InsertCopyMembers = "INSERT INTO copy_members (topic_id, sequence_number, members) VALUES ($entity, $sequence, $members)";

        public const string DeleteCopyMembers = "DELETE FROM copy_members WHERE topic_id = $entity AND sequence_number = $sequence";

        /// <summary>
        /// An implicit message completed above its subscription's done mark: a tombstone (state 3) in
        /// place of whatever row the message had. Out of every partial index (state 3), and read by none.
        /// </summary>
        public const string UpsertTombstone = """
            INSERT INTO messages (entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms, payload_size)
            VALUES ($entity, $sequence, 0, 3, 0, 0, 0)
            ON CONFLICT (entity_id, sequence_number) DO UPDATE SET
                sub_queue = 0, state = 3, delivery_count = 0, scheduled_at_ms = NULL, expires_at_ms = NULL,
                dl_reason = NULL, dl_description = NULL, dl_source = NULL, payload = NULL, payload_size = 0
            """;

        /// <summary>Never backwards (see <see cref="UpsertDeliveryMark"/> for the row it may make).</summary>
        public const string UpsertDoneThrough = """
            INSERT INTO entity_state (entity_id, next_sequence, done_through) VALUES ($entity, 1, $through)
            ON CONFLICT (entity_id) DO UPDATE SET done_through = MAX(done_through, excluded.done_through)
            """;

        /// <summary>The tombstones the done mark passed (index messages_by_sub_queue).</summary>
        public const string DeleteTombstonesThrough = "DELETE FROM messages WHERE entity_id = $entity AND sub_queue = 0 AND state = 3 AND sequence_number <= $through";

        public const string UpsertFollower = """
            INSERT INTO entity_state (entity_id, next_sequence, follower_slot, follow_from) VALUES ($entity, 1, $slot, $from)
            ON CONFLICT (entity_id) DO UPDATE SET follower_slot = excluded.follower_slot, follow_from = excluded.follow_from
            """;

        public const string InsertMessage = """
            INSERT INTO messages (entity_id, sequence_number, sub_queue, state, delivery_count, enqueued_at_ms,
                                  scheduled_at_ms, expires_at_ms, message_id, dl_reason, dl_description, dl_source,
                                  payload, payload_size)
            VALUES ($entity, $sequence, $subQueue, $state, $deliveryCount, $enqueuedAt,
                    $scheduledAt, $expiresAt, $messageId, $dlReason, $dlDescription, $dlSource,
                    $payload, $payloadSize)
            """;

        /// <summary>A null payload keeps the stored one (and its size).</summary>
        public const string UpdateMessage = """
            UPDATE messages SET
                sub_queue = $subQueue, state = $state, delivery_count = $deliveryCount,
                dl_reason = $dlReason, dl_description = $dlDescription, dl_source = $dlSource,
                payload = COALESCE($payload, payload),
                payload_size = CASE WHEN $payload IS NULL THEN payload_size ELSE $payloadSize END
            WHERE entity_id = $entity AND sequence_number = $sequence
            """;

        /// <summary>Names no indexed column, so SQLite rewrites the row and leaves every index alone.</summary>
        public const string UpdateDeliveryCount = "UPDATE messages SET delivery_count = $deliveryCount WHERE entity_id = $entity AND sequence_number = $sequence";

        public const string DeleteMessage = "DELETE FROM messages WHERE entity_id = $entity AND sequence_number = $sequence";

        /// <summary>Never backwards: commits of concurrent sends can land out of sequence order.</summary>
        public const string UpsertSequence = """
            INSERT INTO entity_state (entity_id, next_sequence) VALUES ($entity, $next)
            ON CONFLICT (entity_id) DO UPDATE SET next_sequence = MAX(next_sequence, excluded.next_sequence)
            """;

        /// <summary>
        /// Never backwards. A subscription has no counter of its own (its sequence numbers are its
        /// topic's): its first mark makes its row, with the counter every entity starts from.
        /// </summary>
        public const string UpsertDeliveryMark = """
            INSERT INTO entity_state (entity_id, next_sequence, delivered_through) VALUES ($entity, 1, $through)
            ON CONFLICT (entity_id) DO UPDATE SET delivered_through = MAX(delivered_through, excluded.delivered_through)
            """;

        /// <summary>A repeat stored twice on one node cannot happen (RecentSends), but a record must never fail a commit: the first stays.</summary>
        public const string InsertSendRecord = """
            INSERT INTO send_records (producer_id, send_id, entity_id, sequence_numbers, at_ms) VALUES ($producer, $sendId, $entity, $sequences, $at)
            ON CONFLICT (producer_id, send_id) DO NOTHING
            """;

        /// <summary>Through index send_records_by_time: reads only the rows it deletes.</summary>
        public const string PruneSendRecords = "DELETE FROM send_records WHERE at_ms < $before";

        public const string UpsertDuplicate = """
            INSERT INTO duplicates (entity_id, message_id, expires_at_ms) VALUES ($entity, $messageId, $expiresAt)
            ON CONFLICT (entity_id, message_id) DO UPDATE SET expires_at_ms = excluded.expires_at_ms
            """;

        public const string PruneDuplicates = "DELETE FROM duplicates WHERE expires_at_ms < $before";
    }
}
