using System.Text.Json;
using Dapper;
using Farm.ContainerStore.Containers;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// A container database in one SQLite file. Writes go through one long-lived connection (the
/// broker is the single writer), reads through pooled connections of their own: in WAL mode a
/// read sees the last commit and never waits behind a write in progress.
/// </summary>
internal sealed class SqliteContainerDatabase : IContainerDatabase
{
    private readonly SqliteDatabaseFile _file;
    private readonly SemaphoreSlim _writeLock = new(1, 1);
    private SqliteContainerWriter? _writer;
    private bool _disposed;

    // Entities purged through this handle (guarded by _writeLock): a later write may find their rows gone.
    private readonly HashSet<long> _purged = [];

    private SqliteContainerDatabase(string connectionString, SqliteDatabaseFile file, SqliteContainerWriter writer)
    {
        ConnectionString = connectionString;
        _file = file;
        _writer = writer;
    }

    public string ConnectionString { get; }

    public bool FollowsTopics => true;

    public static async Task<SqliteContainerDatabase> OpenAsync(string connectionString, CancellationToken cancellationToken)
    {
        var file = SqliteDatabaseFile.Resolve(connectionString, "container database");
        var connection = await file.OpenAsync(create: true, cancellationToken).ConfigureAwait(false);
        try
        {
            file.EnableWal(connection);
            await SqliteMigrator.MigrateAsync(file, connection, SqliteMigrator.ContainerSchema, cancellationToken).ConfigureAwait(false);
            return new SqliteContainerDatabase(connectionString, file, new SqliteContainerWriter(connection, file.Path));
        }
        catch
        {
            await connection.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    public Task<long> ReadEpochAsync(CancellationToken cancellationToken = default) =>
        ReadAsync(connection => connection.ExecuteScalarAsync<long>(new CommandDefinition(SqliteSql.ContainerDb.ReadEpoch, cancellationToken: cancellationToken)), cancellationToken);

    public Task<bool> RaiseEpochAsync(long newEpoch, CancellationToken cancellationToken = default) =>
        WriteAsync(writer => writer.RaiseEpoch(newEpoch), cancellationToken);

    public Task CommitAsync(long expectedEpoch, ContainerWriteBatch batch, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(batch);
        return WriteAsync(
            writer =>
            {
                Commit(writer, expectedEpoch, batch);
                writer.Flush();
                return true;
            },
            cancellationToken);
    }

    public Task<Task> CommitBeforeDurableAsync(long expectedEpoch, ContainerWriteBatch batch, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(batch);
        return WriteAsync(
            writer =>
            {
                Commit(writer, expectedEpoch, batch);
                return writer.FlushAsync();
            },
            cancellationToken);
    }

    private void Commit(SqliteContainerWriter writer, long expectedEpoch, ContainerWriteBatch batch)
    {
        writer.Commit(expectedEpoch, batch, _purged);
        _purged.UnionWith(batch.PurgedEntities);
    }

    public Task<EntityLoad> LoadEntityAsync(long entityId, long nowMs, CancellationToken cancellationToken = default) =>
        ReadAsync(async connection =>
        {
            // One read transaction: the counter, messages and history come from the same snapshot.
            using var transaction = connection.BeginTransaction(deferred: true);
            var (next, mark, _) = await ReadEntityStateAsync(connection, transaction, entityId, cancellationToken).ConfigureAwait(false);

            var messages = new List<MessageRecord>();
            using (var command = connection.CreateCommand())
            {
                command.Transaction = transaction;
                command.CommandText = SqliteSql.ContainerDb.LoadMessages;
                command.Parameters.AddWithValue("@EntityId", entityId);
                using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
                while (reader.Read())
                {
                    messages.Add(SqliteMessageReader.Read(reader));
                }
            }

            var duplicates = await connection.QueryAsync<DuplicateRecord>(new CommandDefinition(
                SqliteSql.ContainerDb.LoadDuplicates, new { EntityId = entityId, NowMs = nowMs }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            transaction.Commit();

            // Sequence numbers start at 1 for an entity that never had a counter written.
            return new EntityLoad(entityId, next ?? 1, OrderBySubQueue(messages), duplicates.AsList(), DeliveredThrough: mark);
        }, cancellationToken);

    public Task<EntityLoad> LoadEntityHeadAsync(long entityId, long nowMs, long cacheBytes, long copiesOf = 0, int maxDuplicates = int.MaxValue, CancellationToken cancellationToken = default) =>
        ReadAsync(async connection =>
        {
            // One read transaction: counter, held messages, heads, tails and history from one snapshot.
            using var transaction = connection.BeginTransaction(deferred: true);
            var (next, mark, follower) = await ReadEntityStateAsync(connection, transaction, entityId, cancellationToken).ConfigureAwait(false);
            // A follower's implicit messages: all of them come into memory, where its topic's fan-out put them.
            var implicitMessages = follower is not null && copiesOf != 0
                ? await ReadImplicitAsync(connection, transaction, entityId, copiesOf, follower, cancellationToken).ConfigureAwait(false)
                : [];
            var implicitThrough = implicitMessages.Count > 0 ? implicitMessages[^1].SequenceNumber : 0;
            // The first scheduled messages to come due and some deferred ones, each up to the cache's bytes; the rest are counted.
            var scheduled = await ReadScheduledRowsAsync(connection, transaction, entityId, copiesOf, long.MinValue, long.MinValue, int.MaxValue, cacheBytes, cancellationToken).ConfigureAwait(false);
            var deferred = await ReadMessagesAsync(connection, transaction, SqliteSql.ContainerDb.ReadDeferred, int.MaxValue, cacheBytes, cancellationToken,
                ("@EntityId", entityId), ("@CopiesOf", copiesOf), ("@Limit", int.MaxValue)).ConfigureAwait(false);
            var held = (await connection.QueryAsync<(long State, long Count, long Bytes)>(new CommandDefinition(
                SqliteSql.ContainerDb.CountHeld, new { EntityId = entityId }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false)).ToList();
            var heldTail = HeldTails.Of(scheduled, deferred, held.Select(h => ((StoredMessageState)h.State, h.Count, h.Bytes)));
            var messages = new List<MessageRecord>(scheduled.Count + deferred.Count);
            messages.AddRange(scheduled);
            messages.AddRange(deferred);
            var tails = new List<StoredTail>();
            // Every sequence number handed out so far: the counter, or the rows themselves if it lags.
            var through = Math.Max(Math.Max((next ?? 1) - 1, implicitThrough), await connection.ExecuteScalarAsync<long>(new CommandDefinition(
                SqliteSql.ContainerDb.MaxSequence, new { EntityId = entityId }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false));
            foreach (var subQueue in new[] { SubQueue.Main, SubQueue.DeadLetter })
            {
                var head = await ReadActiveRowsAsync(connection, transaction, SqliteSql.ContainerDb.ReadActive, entityId, copiesOf, subQueue, 0, int.MaxValue, cacheBytes, cancellationToken).ConfigureAwait(false);
                // The head stopped short of the budget: it is every active message, nothing is left to
                // count. Else the broker counts the tail while it serves: a deep queue's count takes seconds.
                var whole = head.Sum(m => (long)m.PayloadSize) < cacheBytes;
                var after = await FollowerHead.MergeAsync(head, whole, subQueue == SubQueue.Main ? implicitMessages : [], (from, until) =>
                    ReadMessagesAsync(connection, transaction, SqliteSql.ContainerDb.ReadActive, int.MaxValue, long.MaxValue, cancellationToken,
                        row => row.SequenceNumber > until,
                        ("@EntityId", entityId), ("@CopiesOf", copiesOf), ("@SubQueue", (int)subQueue), ("@After", from), ("@Limit", int.MaxValue))).ConfigureAwait(false);
                messages.AddRange(head);
                tails.Add(whole ? new StoredTail(subQueue, after, through, 0, 0) : new StoredTail(subQueue, after, through, null, null));
            }

            var duplicates = await LoadDuplicatesAsync(connection, transaction, entityId, nowMs, maxDuplicates, cancellationToken).ConfigureAwait(false);
            var alone = copiesOf == 0 ? default : await connection.QuerySingleAsync<(long Count, long Bytes)>(new CommandDefinition(
                SqliteSql.ContainerDb.CountStoredAlone, new { EntityId = entityId, CopiesOf = copiesOf }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            transaction.Commit();
            return new EntityLoad(entityId, through + 1, [.. messages.OrderBy(m => m.SubQueue).ThenBy(m => m.SequenceNumber)], duplicates, tails, duplicates.Count < maxDuplicates, heldTail,
                new StoredAloneTally(alone.Count, alone.Bytes), mark, follower);
        }, cancellationToken);

    public Task<IReadOnlyList<EntityLoad>> LoadQuietHeadsAsync(IReadOnlyCollection<long> entityIds, long nowMs, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<EntityLoad>>(async connection =>
        {
            var rows = await connection.QueryAsync<(long EntityId, long? Next, long? Mark, long? Slot, long? From, long? Done)>(new CommandDefinition(
                SqliteSql.ContainerDb.FindQuiet, new { Ids = JsonArray(entityIds), NowMs = nowMs, TopicId = copiesOf }, cancellationToken: cancellationToken)).ConfigureAwait(false);
            // Sequence numbers start at 1 for an entity that never had a counter written.
            return [.. rows.Select(r => EntityLoad.QuietHead(r.EntityId, r.Next ?? 1, r.Mark ?? 0, Follower(r.Slot, r.From, r.Done ?? 0)))];
        }, cancellationToken);

    private static FollowerState? Follower(long? slot, long? followFrom, long doneThrough) =>
        slot is { } s && followFrom is { } from ? new FollowerState((int)s, from, doneThrough) : null;

    public Task<EntityLoad> LoadEntityStateAsync(long entityId, long nowMs, int maxDuplicates = int.MaxValue, CancellationToken cancellationToken = default) =>
        ReadAsync(async connection =>
        {
            using var transaction = connection.BeginTransaction(deferred: true);
            var next = await connection.ExecuteScalarAsync<long?>(new CommandDefinition(
                SqliteSql.ContainerDb.ReadNextSequence, new { EntityId = entityId }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            var stored = await connection.ExecuteScalarAsync<long>(new CommandDefinition(
                SqliteSql.ContainerDb.MaxSequence, new { EntityId = entityId }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            var duplicates = await LoadDuplicatesAsync(connection, transaction, entityId, nowMs, maxDuplicates, cancellationToken).ConfigureAwait(false);
            transaction.Commit();
            return new EntityLoad(entityId, Math.Max(next ?? 1, stored + 1), [], duplicates, DuplicateHistoryComplete: duplicates.Count < maxDuplicates);
        }, cancellationToken);

    /// <summary>The entity's sequence counter (null: never written), delivery mark (0: none) and follower state (null: not a follower), in one read.</summary>
    private static async Task<(long? Next, long DeliveredThrough, FollowerState? Follower)> ReadEntityStateAsync(
        SqliteConnection connection, SqliteTransaction transaction, long entityId, CancellationToken cancellationToken)
    {
        using var command = connection.CreateCommand();
        command.Transaction = transaction;
        command.CommandText = SqliteSql.ContainerDb.ReadEntityState;
        command.Parameters.AddWithValue("@EntityId", entityId);
        using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
        if (!reader.Read())
        {
            return (null, 0, null);
        }
        return (reader.GetInt64(0), reader.GetInt64(1),
            Follower(reader.IsDBNull(2) ? null : reader.GetInt64(2), reader.IsDBNull(3) ? null : reader.GetInt64(3), reader.GetInt64(4)));
    }

    /// <summary>
    /// A follower's implicit messages, in order: its topic's copies after its done mark (and from where
    /// it follows) whose membership names its slot, less those it has a row at (its own or a tombstone).
    /// Three reads: the memberships (a narrow table), the subscription's rows at those sequence numbers,
    /// and the copies left.
    /// </summary>
    private static async Task<List<MessageRecord>> ReadImplicitAsync(
        SqliteConnection connection, SqliteTransaction transaction, long entityId, long topicId, FollowerState follower, CancellationToken cancellationToken)
    {
        var memberships = await connection.QueryAsync<(long, byte[])>(new CommandDefinition(
            SqliteSql.ContainerDb.ReadMemberships, new { TopicId = topicId, After = FollowerHead.ReadAfter(follower) }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
        var candidates = FollowerHead.Candidates(memberships, follower);
        if (candidates.Count == 0)
        {
            return [];
        }
        var rows = (await connection.QueryAsync<long>(new CommandDefinition(
            SqliteSql.ContainerDb.RowsAt, new { EntityId = entityId, Sequences = JsonArray(candidates) }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false)).ToHashSet();
        candidates.RemoveAll(rows.Contains);
        var messages = new List<MessageRecord>(candidates.Count);
        if (candidates.Count == 0)
        {
            return messages;
        }
        using (var command = connection.CreateCommand())
        {
            command.Transaction = transaction;
            command.CommandText = SqliteSql.ContainerDb.ReadCopiesAt;
            command.Parameters.AddWithValue("@TopicId", topicId);
            command.Parameters.AddWithValue("@Sequences", JsonArray(candidates));
            using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
            while (reader.Read())
            {
                messages.Add(FollowerHead.Implicit(entityId, reader.GetInt64(0), reader.GetInt64(1), reader.IsDBNull(2) ? null : reader.GetString(2),
                    (byte[])reader.GetValue(3), reader.GetInt32(4)));
            }
        }
        return messages;
    }

    /// <summary>The whole window, or its newest <paramref name="maxDuplicates"/> ids.</summary>
    private static async Task<List<DuplicateRecord>> LoadDuplicatesAsync(
        SqliteConnection connection, SqliteTransaction transaction, long entityId, long nowMs, int maxDuplicates, CancellationToken cancellationToken) =>
        (await connection.QueryAsync<DuplicateRecord>(new CommandDefinition(
            maxDuplicates == int.MaxValue ? SqliteSql.ContainerDb.LoadDuplicates : SqliteSql.ContainerDb.LoadNewestDuplicates,
            new { EntityId = entityId, NowMs = nowMs, Limit = maxDuplicates }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false)).AsList();

    public Task<IReadOnlyCollection<string>> FindDuplicatesAsync(long entityId, IReadOnlyCollection<string> messageIds, long nowMs, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyCollection<string>>(async connection => messageIds.Count == 0 ? [] : (await connection.QueryAsync<string>(new CommandDefinition(
            SqliteSql.ContainerDb.FindDuplicates, new { EntityId = entityId, MessageIds = JsonArray(messageIds), NowMs = nowMs }, cancellationToken: cancellationToken)).ConfigureAwait(false)).AsList(),
            cancellationToken);

    public Task<SendRecord?> FindSendRecordAsync(string producerId, long sendId, long sinceMs, CancellationToken cancellationToken = default) =>
        ReadAsync(async connection => (await connection.QuerySingleOrDefaultAsync<SendRecordRow>(new CommandDefinition(
            SqliteSql.ContainerDb.FindSendRecord, new { ProducerId = producerId, SendId = sendId, Since = sinceMs }, cancellationToken: cancellationToken)).ConfigureAwait(false))?.ToRecord(),
            cancellationToken);

    public Task<IReadOnlyList<SendRecord>> FindSendRecordsAsync(string producerId, IReadOnlyCollection<long> sendIds, long sinceMs, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<SendRecord>>(async connection => sendIds.Count == 0 ? [] : (await connection.QueryAsync<SendRecordRow>(new CommandDefinition(
            SqliteSql.ContainerDb.FindSendRecords, new { ProducerId = producerId, SendIds = JsonArray(sendIds), Since = sinceMs }, cancellationToken: cancellationToken)).ConfigureAwait(false))
            .Select(row => row.ToRecord()).ToList(),
            cancellationToken);

    public Task<long?> NewestSendRecordAtMsAsync(string producerPrefix, CancellationToken cancellationToken = default) =>
        ReadAsync(async connection => await connection.QuerySingleOrDefaultAsync<long?>(new CommandDefinition(
            SqliteSql.ContainerDb.NewestSendRecordAt, new { Prefix = producerPrefix }, cancellationToken: cancellationToken)).ConfigureAwait(false),
            cancellationToken);

    /// <summary>A send_records row as Dapper reads it: the sequence numbers still packed.</summary>
    private sealed record SendRecordRow(string ProducerId, long SendId, long EntityId, byte[] SequenceNumbers, long AtMs)
    {
        public SendRecord ToRecord() => new(ProducerId, SendId, EntityId, SendRecord.Unpack(SequenceNumbers), AtMs);
    }

    public Task<IReadOnlyList<DuplicateRecord>> ReadDuplicatesAsync(long entityId, string afterMessageId, long nowMs, int maxRows, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<DuplicateRecord>>(async connection => (await connection.QueryAsync<DuplicateRecord>(new CommandDefinition(
            SqliteSql.ContainerDb.ReadDuplicatesAfter, new { EntityId = entityId, After = afterMessageId, NowMs = nowMs, Limit = maxRows }, cancellationToken: cancellationToken)).ConfigureAwait(false)).AsList(),
            cancellationToken);

    public Task<CopyScan> ScanCopiesAsync(
        long topicId, IReadOnlyCollection<long> subscriptionIds, long afterSequence, long throughSequence, int maxRows, IReadOnlyCollection<long> recheck,
        CancellationToken cancellationToken = default) =>
        ReadAsync(async connection =>
        {
            using var transaction = connection.BeginTransaction(deferred: true);
            var subscriptions = JsonArray(subscriptionIds);
            // A subscription's lowest active message and everything after it may still be delivered:
            // the scan stops short of the lowest over all subscriptions (one index probe each).
            var lowest = await connection.ExecuteScalarAsync<long?>(new CommandDefinition(
                SqliteSql.ContainerDb.LowestActiveOfAny, new { Subscriptions = subscriptions }, transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
            if (lowest is { } sequence)
            {
                throughSequence = Math.Min(throughSequence, sequence - 1);
            }
            var unreferenced = new List<UnreferencedCopy>();
            var scannedThrough = Math.Max(afterSequence, throughSequence);
            if (throughSequence > afterSequence)
            {
                var rows = (await connection.QueryAsync<(long Sequence, long Size, bool Referenced, byte[]? Members)>(new CommandDefinition(
                    SqliteSql.ContainerDb.ScanCopies,
                    new { TopicId = topicId, Subscriptions = subscriptions, After = afterSequence, Through = throughSequence, Limit = maxRows },
                    transaction, cancellationToken: cancellationToken)).ConfigureAwait(false)).AsList();
                unreferenced.AddRange(rows.Where(r => !r.Referenced).Select(r => new UnreferencedCopy(r.Sequence, r.Size, r.Members)));
                if (rows.Count >= maxRows)
                {
                    scannedThrough = rows[^1].Sequence;
                }
            }
            if (recheck.Count > 0)
            {
                var rows = await connection.QueryAsync<(long Sequence, long Size, bool Referenced, byte[]? Members)>(new CommandDefinition(
                    SqliteSql.ContainerDb.CheckCopies, new { TopicId = topicId, Subscriptions = subscriptions, Sequences = JsonArray(recheck) },
                    transaction, cancellationToken: cancellationToken)).ConfigureAwait(false);
                var found = unreferenced.Select(u => u.SequenceNumber).ToHashSet();
                unreferenced.AddRange(rows.Where(r => !r.Referenced && found.Add(r.Sequence)).Select(r => new UnreferencedCopy(r.Sequence, r.Size, r.Members)));
            }
            transaction.Commit();
            return new CopyScan(unreferenced, scannedThrough);
        }, cancellationToken);

    public Task<(long Count, long Bytes)> CountActiveAsync(long entityId, SubQueue subQueue, long afterSequence, long throughSequence, CancellationToken cancellationToken = default) =>
        ReadAsync(connection => connection.QuerySingleAsync<(long, long)>(new CommandDefinition(
            SqliteSql.ContainerDb.CountActiveAfter, new { EntityId = entityId, SubQueue = (int)subQueue, After = afterSequence, Through = throughSequence }, cancellationToken: cancellationToken)), cancellationToken);

    public Task<IReadOnlyList<MessageRecord>> ReadActiveAsync(long entityId, SubQueue subQueue, long afterSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<MessageRecord>>(async connection =>
        {
            using var transaction = connection.BeginTransaction(deferred: true);
            var rows = await ReadActiveRowsAsync(connection, transaction, SqliteSql.ContainerDb.ReadActive, entityId, copiesOf, subQueue, afterSequence, maxRows, maxBytes, cancellationToken).ConfigureAwait(false);
            transaction.Commit();
            return rows;
        }, cancellationToken);

    /// <summary>Rows of <paramref name="sql"/> in order, until <paramref name="maxRows"/> or until <paramref name="maxBytes"/> of payload are read (at least one row).</summary>
    private static Task<List<MessageRecord>> ReadMessagesAsync(
        SqliteConnection connection, SqliteTransaction? transaction, string sql, int maxRows, long maxBytes, CancellationToken cancellationToken, params (string Name, object Value)[] parameters) =>
        ReadMessagesAsync(connection, transaction, sql, maxRows, maxBytes, cancellationToken, stopAt: null, parameters);

    /// <summary>The same, stopping before the first row <paramref name="stopAt"/> picks.</summary>
    private static async Task<List<MessageRecord>> ReadMessagesAsync(
        SqliteConnection connection, SqliteTransaction? transaction, string sql, int maxRows, long maxBytes, CancellationToken cancellationToken,
        Func<MessageRecord, bool>? stopAt, params (string Name, object Value)[] parameters)
    {
        var rows = new List<MessageRecord>();
        using var command = connection.CreateCommand();
        command.Transaction = transaction;
        command.CommandText = sql;
        foreach (var (name, value) in parameters)
        {
            command.Parameters.AddWithValue(name, value);
        }
        using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
        var bytes = 0L;
        while (rows.Count < maxRows && (rows.Count == 0 || bytes < maxBytes) && reader.Read())
        {
            var row = SqliteMessageReader.Read(reader);
            if (stopAt?.Invoke(row) == true)
            {
                break;
            }
            bytes += row.PayloadSize;
            rows.Add(row);
        }
        return rows;
    }

    private static Task<List<MessageRecord>> ReadActiveRowsAsync(
        SqliteConnection connection, SqliteTransaction? transaction, string sql, long entityId, long copiesOf, SubQueue subQueue, long after, int maxRows, long maxBytes, CancellationToken cancellationToken) =>
        ReadMessagesAsync(connection, transaction, sql, maxRows, maxBytes, cancellationToken,
            ("@EntityId", entityId), ("@CopiesOf", copiesOf), ("@SubQueue", (int)subQueue), ("@After", after), ("@Limit", maxRows));

    private static Task<List<MessageRecord>> ReadScheduledRowsAsync(
        SqliteConnection connection, SqliteTransaction? transaction, long entityId, long copiesOf, long fromAt, long fromSequence, int maxRows, long maxBytes, CancellationToken cancellationToken) =>
        ReadMessagesAsync(connection, transaction, SqliteSql.ContainerDb.ReadScheduled, maxRows, maxBytes, cancellationToken,
            ("@EntityId", entityId), ("@CopiesOf", copiesOf), ("@At", fromAt), ("@Sequence", fromSequence), ("@Limit", maxRows));

    public Task<IReadOnlyList<MessageRecord>> ReadScheduledAsync(long entityId, long fromAtMs, long fromSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<MessageRecord>>(async connection =>
            await ReadScheduledRowsAsync(connection, null, entityId, copiesOf, fromAtMs, fromSequence, maxRows, maxBytes, cancellationToken).ConfigureAwait(false), cancellationToken);

    public Task<IReadOnlyList<MessageRecord>> ReadExpiredAsync(long entityId, long afterSequence, long nowMs, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<MessageRecord>>(async connection =>
            await ReadMessagesAsync(connection, null, SqliteSql.ContainerDb.ReadExpired, maxRows, maxBytes, cancellationToken,
                ("@EntityId", entityId), ("@CopiesOf", copiesOf), ("@After", afterSequence), ("@Now", nowMs), ("@Limit", maxRows)).ConfigureAwait(false), cancellationToken);

    public Task<IReadOnlyList<MessageRecord>> ReadByKeyAsync(long entityId, IReadOnlyCollection<long> sequenceNumbers, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<MessageRecord>>(async connection =>
            await ReadMessagesAsync(connection, null, SqliteSql.ContainerDb.ReadByKey, int.MaxValue, long.MaxValue, cancellationToken,
                ("@EntityId", entityId), ("@CopiesOf", copiesOf), ("@Sequences", JsonArray(sequenceNumbers))).ConfigureAwait(false), cancellationToken);

    /// <summary>Ids as one JSON array parameter, read with json_each: one parameter however many ids.</summary>
    private static string JsonArray(IEnumerable<long> ids) => "[" + string.Join(",", ids) + "]";

    /// <summary>Strings as one JSON array parameter, each escaped as JSON wants (quotes, control characters).</summary>
    private static string JsonArray(IEnumerable<string> ids) => JsonSerializer.Serialize(ids);

    public Task<IReadOnlyList<MessageRecord>> ReadFromAsync(long entityId, SubQueue subQueue, long afterSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        ReadAsync<IReadOnlyList<MessageRecord>>(async connection =>
            await ReadActiveRowsAsync(connection, null, SqliteSql.ContainerDb.ReadFrom, entityId, copiesOf, subQueue, afterSequence, maxRows, maxBytes, cancellationToken).ConfigureAwait(false), cancellationToken);

    /// <summary>Rows arrive in sequence order; a stable sort groups them by sub-queue, main first.</summary>
    private static List<MessageRecord> OrderBySubQueue(List<MessageRecord> messages) =>
        messages.TrueForAll(m => m.SubQueue == SubQueue.Main) ? messages : [.. messages.OrderBy(m => m.SubQueue)];

    public Task<IReadOnlyDictionary<long, byte[]>> ReadPayloadsAsync(long entityId, IReadOnlyCollection<long> sequenceNumbers, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(sequenceNumbers);
        return ReadAsync<IReadOnlyDictionary<long, byte[]>>(async connection =>
        {
            var payloads = new Dictionary<long, byte[]>(sequenceNumbers.Count);
            if (sequenceNumbers.Count == 0)
            {
                return payloads;
            }

            using var transaction = connection.BeginTransaction(deferred: true);
            using var command = connection.CreateCommand();
            command.Transaction = transaction;
            command.CommandText = SqliteSql.ContainerDb.ReadPayload;
            var entity = command.Parameters.AddWithValue("$entity", entityId);
            var sequence = command.Parameters.AddWithValue("$sequence", 0L);
            command.Prepare();
            foreach (var sequenceNumber in sequenceNumbers)
            {
                cancellationToken.ThrowIfCancellationRequested();
                sequence.Value = sequenceNumber;
                using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
                if (reader.Read() && !reader.IsDBNull(0))
                {
                    payloads[sequenceNumber] = (byte[])reader.GetValue(0);
                }
            }

            transaction.Commit();
            return payloads;
        }, cancellationToken);
    }

    public async ValueTask DisposeAsync()
    {
        await _writeLock.WaitAsync().ConfigureAwait(false);
        try
        {
            if (_disposed)
            {
                return;
            }

            _disposed = true;
            if (_writer is not null)
            {
                await _writer.DisposeAsync().ConfigureAwait(false);
                _writer = null;
            }

            _file.ClearPools();
        }
        finally
        {
            _writeLock.Release();
        }
    }

    /// <summary>
    /// Serializes writers (the broker should already be the only one). A write that finds the file
    /// unreachable drops the connection; the next write reopens it, and fails if the file is gone.
    /// </summary>
    private async Task<T> WriteAsync<T>(Func<SqliteContainerWriter, T> write, CancellationToken cancellationToken)
    {
        await _writeLock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            ContainerDatabaseClosedException.ThrowIfClosed(_disposed, this);
            cancellationToken.ThrowIfCancellationRequested();
            var writer = _writer ??= await ReopenWriterAsync(cancellationToken).ConfigureAwait(false);
            try
            {
                // Synchronous on purpose: Microsoft.Data.Sqlite has no truly asynchronous I/O, and
                // per-row awaits would only cost allocations on the group-commit path.
                return write(writer);
            }
            catch (SqliteException e) when (SqliteDatabaseFile.IsUnavailable(e))
            {
                await DropWriterAsync().ConfigureAwait(false);
                throw _file.Unavailable("write to", e);
            }
            catch (Exception e) when (e is StoreUnavailableException or CommitOutcomeUnknownException)
            {
                await DropWriterAsync().ConfigureAwait(false);
                throw;
            }
        }
        finally
        {
            _writeLock.Release();
        }
    }

    private async Task<SqliteContainerWriter> ReopenWriterAsync(CancellationToken cancellationToken)
    {
        var connection = await _file.OpenAsync(create: false, cancellationToken).ConfigureAwait(false);
        return new SqliteContainerWriter(connection, _file.Path);
    }

    private async Task DropWriterAsync()
    {
        if (_writer is { } writer)
        {
            _writer = null;
            await writer.DisposeAsync().ConfigureAwait(false);
        }
    }

    private async Task<T> ReadAsync<T>(Func<SqliteConnection, Task<T>> read, CancellationToken cancellationToken)
    {
        ContainerDatabaseClosedException.ThrowIfClosed(_disposed, this);
        await using var connection = await _file.OpenAsync(create: false, cancellationToken).ConfigureAwait(false);
        try
        {
            return await read(connection).ConfigureAwait(false);
        }
        catch (SqliteException e) when (SqliteDatabaseFile.IsUnavailable(e))
        {
            throw _file.Unavailable("read", e);
        }
    }
}
