using System.Data;
using Farm.ContainerStore.Containers;
using Npgsql;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// A container database: one PostgreSQL database per container, created on first open. Writes are
/// serialized here (the broker should already be the only writer) and each runs in one
/// transaction that first locks the owner row and checks the epoch; reads take pooled
/// connections of their own and never wait behind a write.
/// </summary>
internal sealed class PostgresContainerDatabase : IContainerDatabase
{
    private readonly PostgresDatabase _database;
    private readonly SemaphoreSlim _writeLock = new(1, 1);
    private int _disposed;

    // Entities purged through this handle (guarded by _writeLock): a later write may find their rows gone.
    private readonly HashSet<long> _purged = [];

    private PostgresContainerDatabase(string connectionString, PostgresDatabase database)
    {
        ConnectionString = connectionString;
        _database = database;
    }

    public string ConnectionString { get; }

    public bool FollowsTopics => true;

    /// <summary>
    /// Opens the container database on the connection this process keeps for it (<see cref="PostgresStandby"/>:
    /// it served the container before, or its ownership pass prepared it) when there is one and it
    /// still works, otherwise afresh.
    /// </summary>
    public static async Task<PostgresContainerDatabase> OpenAsync(string connectionString, CancellationToken cancellationToken)
    {
        if (PostgresStandby.Take(connectionString) is { } kept)
        {
            try
            {
                return await OpenAsync(connectionString, kept, cancellationToken).ConfigureAwait(false);
            }
            catch (StoreUnavailableException)
            {
                // Its kept connection ended meanwhile (a server restart, a dropped database): afresh below.
            }
        }
        return await OpenAsync(connectionString, PostgresDatabase.Resolve(connectionString, "container database"), cancellationToken).ConfigureAwait(false);
    }

    private static async Task<PostgresContainerDatabase> OpenAsync(string connectionString, PostgresDatabase database, CancellationToken cancellationToken)
    {
        try
        {
            await using (var connection = await database.OpenOrCreateAsync(cancellationToken).ConfigureAwait(false))
            {
                await PostgresMigrator.MigrateAsync(database, connection, PostgresMigrator.ContainerSchema, cancellationToken).ConfigureAwait(false);
            }

            return new PostgresContainerDatabase(connectionString, database);
        }
        catch
        {
            await database.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    public Task<long> ReadEpochAsync(CancellationToken cancellationToken = default) =>
        RunAsync("read the epoch", async connection =>
        {
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.ReadEpoch, connection);
            return (long)(await command.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
        }, cancellationToken);

    public Task<bool> RaiseEpochAsync(long newEpoch, CancellationToken cancellationToken = default) =>
        WriteAsync("raise the epoch", async connection =>
        {
            // Waits only briefly for the owner row (see RaiseEpochLockTimeout): while a former
            // owner's stranded transaction holds it, this fails with StoreUnavailable, to be retried.
            await using var transaction = await connection.BeginTransactionAsync(cancellationToken).ConfigureAwait(false);
            await using (var timeout = new NpgsqlCommand(PostgresSql.ContainerDb.RaiseEpochLockTimeout, connection, transaction))
            {
                await timeout.ExecuteNonQueryAsync(cancellationToken).ConfigureAwait(false);
            }
            bool raised;
            await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.RaiseEpoch, connection, transaction) { Parameters = { Parameter(newEpoch) } })
            {
                raised = (bool)(await command.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
            }
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return raised;
        }, cancellationToken);

    public Task CommitAsync(long expectedEpoch, ContainerWriteBatch batch, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(batch);
        return WriteAsync("commit a batch", async connection =>
        {
            await using var transaction = await connection.BeginTransactionAsync(cancellationToken).ConfigureAwait(false);

            // The owner row stays locked until COMMIT: a new owner's RaiseEpoch waits for this
            // transaction, so the epoch cannot change between this check and the commit.
            await using (var check = new NpgsqlCommand(PostgresSql.ContainerDb.LockEpoch, connection, transaction))
            {
                var epoch = (long)(await check.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
                if (epoch != expectedEpoch)
                {
                    throw new StaleEpochException(expectedEpoch, epoch);
                }
            }

            var checks = new List<PostgresContainerWriter.RowCheck>();
            await using (var writes = PostgresContainerWriter.Build(connection, transaction, batch, _purged, checks))
            {
                if (writes.BatchCommands.Count > 0)
                {
                    await writes.ExecuteNonQueryAsync(cancellationToken).ConfigureAwait(false);
                }

                // A missing row throws before COMMIT: disposing the transaction rolls everything back.
                PostgresContainerWriter.Verify(checks);
            }

            // synchronous_commit is on for every connection (PostgresSql.DurableSessionOptions): this
            // returns once the WAL is flushed. A failure here leaves the outcome unknown, and the
            // caller does not acknowledge it.
            try
            {
                await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            }
            catch (Exception e)
            {
                throw new CommitOutcomeUnknownException(
                    $"The commit to container database '{_database.Name}' failed; it may or may not be durable: {e.Message}", e);
            }
            _purged.UnionWith(batch.PurgedEntities);
            return true;
        }, cancellationToken);
    }

    public Task<EntityLoad> LoadEntityAsync(long entityId, long nowMs, CancellationToken cancellationToken = default) =>
        RunAsync("load an entity", async connection =>
        {
            // One snapshot for the counter, the messages and the history, read in one round trip.
            await using var transaction = await connection.BeginTransactionAsync(IsolationLevel.RepeatableRead, cancellationToken).ConfigureAwait(false);
            await using var batch = new NpgsqlBatch(connection, transaction)
            {
                BatchCommands =
                {
                    new NpgsqlBatchCommand(PostgresSql.ContainerDb.ReadNextSequence) { Parameters = { Parameter(entityId) } },
                    new NpgsqlBatchCommand(PostgresSql.ContainerDb.LoadMessages) { Parameters = { Parameter(entityId) } },
                    new NpgsqlBatchCommand(PostgresSql.ContainerDb.LoadDuplicates) { Parameters = { Parameter(entityId), Parameter(nowMs) } },
                },
            };

            long? next = null;
            long mark = 0;
            var messages = new List<MessageRecord>();
            var duplicates = new List<DuplicateRecord>();
            await using (var reader = await batch.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false))
            {
                if (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
                {
                    next = reader.GetInt64(0);
                    mark = reader.GetInt64(1);
                }

                await reader.NextResultAsync(cancellationToken).ConfigureAwait(false);
                while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
                {
                    messages.Add(ReadMessage(reader));
                }

                await reader.NextResultAsync(cancellationToken).ConfigureAwait(false);
                while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
                {
                    duplicates.Add(new DuplicateRecord(reader.GetInt64(0), reader.GetString(1), reader.GetInt64(2)));
                }
            }

            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);

            // Sequence numbers start at 1 for an entity that never had a counter written.
            return new EntityLoad(entityId, next ?? 1, OrderBySubQueue(messages), duplicates, DeliveredThrough: mark);
        }, cancellationToken);

    public Task<EntityLoad> LoadEntityHeadAsync(long entityId, long nowMs, long cacheBytes, long copiesOf = 0, int maxDuplicates = int.MaxValue, CancellationToken cancellationToken = default) =>
        RunAsync("load an entity", async connection =>
        {
            // One snapshot for the counter, held messages, heads, tails and history.
            await using var transaction = await connection.BeginTransactionAsync(IsolationLevel.RepeatableRead, cancellationToken).ConfigureAwait(false);
            long? next = null;
            long mark = 0;
            FollowerState? follower = null;
            await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.ReadNextSequence, connection, transaction) { Parameters = { Parameter(entityId) } })
            await using (var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false))
            {
                if (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
                {
                    next = reader.GetInt64(0);
                    mark = reader.GetInt64(1);
                    follower = ReadFollower(reader, 2);
                }
            }
            // A follower's implicit messages: all of them come into memory, where its topic's fan-out put them.
            var implicitMessages = follower is not null && copiesOf != 0
                ? await ReadImplicitAsync(connection, transaction, entityId, copiesOf, follower, cancellationToken).ConfigureAwait(false)
                : [];
            // The first scheduled messages to come due and some deferred ones, each up to the cache's bytes; the rest are counted.
            var scheduled = await ReadMessagesAsync(
                ReadScheduledCommand(connection, transaction, entityId, copiesOf, long.MinValue, long.MinValue, int.MaxValue), int.MaxValue, cacheBytes, cancellationToken).ConfigureAwait(false);
            var deferred = await ReadMessagesAsync(
                new NpgsqlCommand(PostgresSql.ContainerDb.ReadDeferred, connection, transaction) { Parameters = { Parameter(entityId), Parameter(copiesOf), Parameter((long)int.MaxValue) } },
                int.MaxValue, cacheBytes, cancellationToken).ConfigureAwait(false);
            var held = new List<(StoredMessageState, long, long)>();
            await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.CountHeld, connection, transaction) { Parameters = { Parameter(entityId) } })
            await using (var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false))
            {
                while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
                {
                    held.Add(((StoredMessageState)reader.GetInt32(0), reader.GetInt64(1), reader.GetInt64(2)));
                }
            }
            var heldTail = HeldTails.Of(scheduled, deferred, held);
            var messages = new List<MessageRecord>(scheduled.Count + deferred.Count);
            messages.AddRange(scheduled);
            messages.AddRange(deferred);
            var tails = new List<StoredTail>();
            // Every sequence number handed out so far: the counter, or the rows themselves if it lags.
            long stored;
            await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.MaxSequence, connection, transaction) { Parameters = { Parameter(entityId) } })
            {
                stored = (long)(await command.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
            }
            var through = Math.Max(Math.Max((next ?? 1) - 1, stored), implicitMessages.Count > 0 ? implicitMessages[^1].SequenceNumber : 0);
            foreach (var subQueue in new[] { SubQueue.Main, SubQueue.DeadLetter })
            {
                var head = await ReadMessagesAsync(ReadActiveCommand(connection, transaction, entityId, copiesOf, subQueue, 0, int.MaxValue), int.MaxValue, cacheBytes, cancellationToken).ConfigureAwait(false);
                // The head stopped short of the budget: it is every active message, nothing is left to
                // count. Else the broker counts the tail while it serves: a deep queue's count takes seconds.
                var whole = head.Sum(m => (long)m.PayloadSize) < cacheBytes;
                var after = await FollowerHead.MergeAsync(head, whole, subQueue == SubQueue.Main ? implicitMessages : [], async (from, until) =>
                    [.. (await ReadMessagesAsync(ReadActiveCommand(connection, transaction, entityId, copiesOf, subQueue, from, int.MaxValue), int.MaxValue, long.MaxValue, cancellationToken,
                        stopAt: row => row.SequenceNumber > until).ConfigureAwait(false))]).ConfigureAwait(false);
                messages.AddRange(head);
                tails.Add(whole ? new StoredTail(subQueue, after, through, 0, 0) : new StoredTail(subQueue, after, through, null, null));
            }
            var duplicates = await ReadDuplicatesAsync(connection, transaction, entityId, nowMs, maxDuplicates, cancellationToken).ConfigureAwait(false);
            var alone = default(StoredAloneTally);
            if (copiesOf != 0)
            {
                await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.CountStoredAlone, connection, transaction) { Parameters = { Parameter(entityId), Parameter(copiesOf) } };
                await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
                await reader.ReadAsync(cancellationToken).ConfigureAwait(false);
                alone = new StoredAloneTally(reader.GetInt64(0), reader.GetInt64(1));
            }
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return new EntityLoad(entityId, through + 1, [.. messages.OrderBy(m => m.SubQueue).ThenBy(m => m.SequenceNumber)], duplicates, tails, duplicates.Count < maxDuplicates, heldTail, alone, mark, follower);
        }, cancellationToken);

    /// <summary>A follower's slot, start and done mark from the columns at <paramref name="first"/> (null: not a follower).</summary>
    private static FollowerState? ReadFollower(NpgsqlDataReader reader, int first) =>
        reader.IsDBNull(first) || reader.IsDBNull(first + 1) ? null
            : new FollowerState(reader.GetInt32(first), reader.GetInt64(first + 1), reader.IsDBNull(first + 2) ? 0 : reader.GetInt64(first + 2));

    /// <summary>
    /// A follower's implicit messages, in order: its topic's copies after its done mark (and from where
    /// it follows) whose membership names its slot, less those it has a row at (its own or a tombstone).
    /// </summary>
    private static async Task<List<MessageRecord>> ReadImplicitAsync(
        NpgsqlConnection connection, NpgsqlTransaction transaction, long entityId, long topicId, FollowerState follower, CancellationToken cancellationToken)
    {
        var memberships = new List<(long, byte[])>();
        await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.ReadMemberships, connection, transaction) { Parameters = { Parameter(topicId), Parameter(FollowerHead.ReadAfter(follower)) } })
        await using (var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false))
        {
            while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                memberships.Add((reader.GetInt64(0), (byte[])reader.GetValue(1)));
            }
        }
        var candidates = FollowerHead.Candidates(memberships, follower);
        var messages = new List<MessageRecord>();
        if (candidates.Count == 0)
        {
            return messages;
        }
        var rows = new HashSet<long>();
        await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.RowsAt, connection, transaction) { Parameters = { Parameter(entityId), Parameter(candidates.ToArray()) } })
        await using (var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false))
        {
            while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                rows.Add(reader.GetInt64(0));
            }
        }
        candidates.RemoveAll(rows.Contains);
        if (candidates.Count == 0)
        {
            return messages;
        }
        await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.ReadCopiesAt, connection, transaction) { Parameters = { Parameter(topicId), Parameter(candidates.ToArray()) } })
        await using (var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false))
        {
            while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                messages.Add(FollowerHead.Implicit(entityId, reader.GetInt64(0), reader.GetInt64(1), reader.IsDBNull(2) ? null : reader.GetString(2),
                    (byte[])reader.GetValue(3), reader.GetInt32(4)));
            }
        }
        return messages;
    }

    public Task<(long Count, long Bytes)> CountActiveAsync(long entityId, SubQueue subQueue, long afterSequence, long throughSequence, CancellationToken cancellationToken = default) =>
        RunAsync("count messages", connection => CountAsync(connection, null, entityId, subQueue, afterSequence, throughSequence, cancellationToken), cancellationToken);

    private static async Task<(long Count, long Bytes)> CountAsync(
        NpgsqlConnection connection, NpgsqlTransaction? transaction, long entityId, SubQueue subQueue, long after, long through, CancellationToken cancellationToken)
    {
        await using var count = new NpgsqlCommand(PostgresSql.ContainerDb.CountActiveAfter, connection, transaction)
        {
            Parameters = { Parameter(entityId), Parameter((int)subQueue), Parameter(after), Parameter(through) },
        };
        await using var reader = await count.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
        await reader.ReadAsync(cancellationToken).ConfigureAwait(false);
        return (reader.GetInt64(0), reader.GetInt64(1));
    }

    public Task<IReadOnlyList<MessageRecord>> ReadActiveAsync(long entityId, SubQueue subQueue, long afterSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<MessageRecord>>("read messages", async connection =>
            await ReadMessagesAsync(ReadActiveCommand(connection, null, entityId, copiesOf, subQueue, afterSequence, maxRows), maxRows, maxBytes, cancellationToken).ConfigureAwait(false),
            cancellationToken);

    private static NpgsqlCommand ReadActiveCommand(NpgsqlConnection connection, NpgsqlTransaction? transaction, long entityId, long copiesOf, SubQueue subQueue, long after, int limit) =>
        new(PostgresSql.ContainerDb.ReadActive, connection, transaction)
        {
            Parameters = { Parameter(entityId), Parameter(copiesOf), Parameter((int)subQueue), Parameter(after), Parameter((long)limit) },
        };

    private static NpgsqlCommand ReadScheduledCommand(NpgsqlConnection connection, NpgsqlTransaction? transaction, long entityId, long copiesOf, long fromAt, long fromSequence, int limit) =>
        new(PostgresSql.ContainerDb.ReadScheduled, connection, transaction)
        {
            Parameters = { Parameter(entityId), Parameter(copiesOf), Parameter(fromAt), Parameter(fromSequence), Parameter((long)limit) },
        };

    public Task<IReadOnlyList<MessageRecord>> ReadScheduledAsync(long entityId, long fromAtMs, long fromSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<MessageRecord>>("read scheduled messages", async connection =>
            await ReadMessagesAsync(ReadScheduledCommand(connection, null, entityId, copiesOf, fromAtMs, fromSequence, maxRows), maxRows, maxBytes, cancellationToken).ConfigureAwait(false),
            cancellationToken);

    public Task<IReadOnlyList<MessageRecord>> ReadExpiredAsync(long entityId, long afterSequence, long nowMs, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<MessageRecord>>("read expired messages", async connection =>
            await ReadMessagesAsync(new NpgsqlCommand(PostgresSql.ContainerDb.ReadExpired, connection)
            {
                Parameters = { Parameter(entityId), Parameter(copiesOf), Parameter(afterSequence), Parameter(nowMs), Parameter((long)maxRows) },
            }, maxRows, maxBytes, cancellationToken).ConfigureAwait(false),
            cancellationToken);

    public Task<IReadOnlyList<MessageRecord>> ReadByKeyAsync(long entityId, IReadOnlyCollection<long> sequenceNumbers, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<MessageRecord>>("read messages", async connection =>
            await ReadMessagesAsync(
                new NpgsqlCommand(PostgresSql.ContainerDb.ReadByKey, connection) { Parameters = { Parameter(entityId), Parameter(copiesOf), Parameter(sequenceNumbers.ToArray()) } },
                int.MaxValue, long.MaxValue, cancellationToken).ConfigureAwait(false),
            cancellationToken);

    public Task<IReadOnlyList<MessageRecord>> ReadFromAsync(long entityId, SubQueue subQueue, long afterSequence, int maxRows, long maxBytes, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<MessageRecord>>("read messages", async connection =>
            await ReadMessagesAsync(
                new NpgsqlCommand(PostgresSql.ContainerDb.ReadFrom, connection)
                {
                    Parameters = { Parameter(entityId), Parameter(copiesOf), Parameter((int)subQueue), Parameter(afterSequence), Parameter((long)maxRows) },
                },
                maxRows, maxBytes, cancellationToken).ConfigureAwait(false),
            cancellationToken);

    public Task<IReadOnlyList<EntityLoad>> LoadQuietHeadsAsync(IReadOnlyCollection<long> entityIds, long nowMs, long copiesOf = 0, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<EntityLoad>>("load entities", async connection =>
        {
            var quiet = new List<EntityLoad>();
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.FindQuiet, connection) { Parameters = { Parameter(entityIds.ToArray()), Parameter(nowMs), Parameter(copiesOf) } };
            await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
            while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                // Sequence numbers start at 1 for an entity that never had a counter written.
                quiet.Add(EntityLoad.QuietHead(
                    reader.GetInt64(0), reader.IsDBNull(1) ? 1 : reader.GetInt64(1), reader.IsDBNull(2) ? 0 : reader.GetInt64(2), ReadFollower(reader, 3)));
            }
            return quiet;
        }, cancellationToken);

    public Task<EntityLoad> LoadEntityStateAsync(long entityId, long nowMs, int maxDuplicates = int.MaxValue, CancellationToken cancellationToken = default) =>
        RunAsync("load an entity", async connection =>
        {
            await using var transaction = await connection.BeginTransactionAsync(IsolationLevel.RepeatableRead, cancellationToken).ConfigureAwait(false);
            long? next;
            await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.ReadNextSequence, connection, transaction) { Parameters = { Parameter(entityId) } })
            {
                next = await command.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false) is long value ? value : null;
            }
            long stored;
            await using (var command = new NpgsqlCommand(PostgresSql.ContainerDb.MaxSequence, connection, transaction) { Parameters = { Parameter(entityId) } })
            {
                stored = (long)(await command.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false))!;
            }
            var duplicates = await ReadDuplicatesAsync(connection, transaction, entityId, nowMs, maxDuplicates, cancellationToken).ConfigureAwait(false);
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return new EntityLoad(entityId, Math.Max(next ?? 1, stored + 1), [], duplicates, DuplicateHistoryComplete: duplicates.Count < maxDuplicates);
        }, cancellationToken);

    /// <summary>The whole window, or its newest <paramref name="maxDuplicates"/> ids.</summary>
    private static async Task<List<DuplicateRecord>> ReadDuplicatesAsync(
        NpgsqlConnection connection, NpgsqlTransaction transaction, long entityId, long nowMs, int maxDuplicates, CancellationToken cancellationToken)
    {
        await using var command = maxDuplicates == int.MaxValue
            ? new NpgsqlCommand(PostgresSql.ContainerDb.LoadDuplicates, connection, transaction) { Parameters = { Parameter(entityId), Parameter(nowMs) } }
            : new NpgsqlCommand(PostgresSql.ContainerDb.LoadNewestDuplicates, connection, transaction) { Parameters = { Parameter(entityId), Parameter(nowMs), Parameter((long)maxDuplicates) } };
        return await ReadDuplicateRowsAsync(command, cancellationToken).ConfigureAwait(false);
    }

    private static async Task<List<DuplicateRecord>> ReadDuplicateRowsAsync(NpgsqlCommand command, CancellationToken cancellationToken)
    {
        var duplicates = new List<DuplicateRecord>();
        await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
        while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
        {
            duplicates.Add(new DuplicateRecord(reader.GetInt64(0), reader.GetString(1), reader.GetInt64(2)));
        }
        return duplicates;
    }

    public Task<IReadOnlyCollection<string>> FindDuplicatesAsync(long entityId, IReadOnlyCollection<string> messageIds, long nowMs, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyCollection<string>>("look up duplicate ids", async connection =>
        {
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.FindDuplicates, connection)
            {
                Parameters = { Parameter(entityId), Parameter(messageIds.ToArray()), Parameter(nowMs) },
            };
            var found = new List<string>();
            await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
            while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                found.Add(reader.GetString(0));
            }
            return found;
        }, cancellationToken);

    public Task<SendRecord?> FindSendRecordAsync(string producerId, long sendId, long sinceMs, CancellationToken cancellationToken = default) =>
        RunAsync("look up a send record", async connection =>
        {
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.FindSendRecord, connection)
            {
                Parameters = { Parameter(producerId), Parameter(sendId), Parameter(sinceMs) },
            };
            await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
            return await reader.ReadAsync(cancellationToken).ConfigureAwait(false)
                ? new SendRecord(reader.GetString(0), reader.GetInt64(1), reader.GetInt64(2), SendRecord.Unpack(reader.GetFieldValue<byte[]>(3)), reader.GetInt64(4))
                : null;
        }, cancellationToken);

    public Task<IReadOnlyList<SendRecord>> FindSendRecordsAsync(string producerId, IReadOnlyCollection<long> sendIds, long sinceMs, CancellationToken cancellationToken = default) =>
        sendIds.Count == 0 ? Task.FromResult<IReadOnlyList<SendRecord>>([]) : RunAsync<IReadOnlyList<SendRecord>>("look up send records", async connection =>
        {
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.FindSendRecords, connection)
            {
                Parameters = { Parameter(producerId), Parameter(sendIds.ToArray()), Parameter(sinceMs) },
            };
            var found = new List<SendRecord>();
            await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
            while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                found.Add(new SendRecord(reader.GetString(0), reader.GetInt64(1), reader.GetInt64(2), SendRecord.Unpack(reader.GetFieldValue<byte[]>(3)), reader.GetInt64(4)));
            }
            return found;
        }, cancellationToken);

    public Task<long?> NewestSendRecordAtMsAsync(string producerPrefix, CancellationToken cancellationToken = default) =>
        RunAsync("read the newest send record", async connection =>
        {
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.NewestSendRecordAt, connection)
            {
                Parameters = { Parameter(producerPrefix) },
            };
            return await command.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false) is long at ? at : (long?)null;
        }, cancellationToken);

    public Task<IReadOnlyList<DuplicateRecord>> ReadDuplicatesAsync(long entityId, string afterMessageId, long nowMs, int maxRows, CancellationToken cancellationToken = default) =>
        RunAsync<IReadOnlyList<DuplicateRecord>>("read duplicate ids", async connection =>
        {
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.ReadDuplicatesAfter, connection)
            {
                Parameters = { Parameter(entityId), Parameter(afterMessageId), Parameter(nowMs), Parameter((long)maxRows) },
            };
            return await ReadDuplicateRowsAsync(command, cancellationToken).ConfigureAwait(false);
        }, cancellationToken);

    public Task<CopyScan> ScanCopiesAsync(
        long topicId, IReadOnlyCollection<long> subscriptionIds, long afterSequence, long throughSequence, int maxRows, IReadOnlyCollection<long> recheck,
        CancellationToken cancellationToken = default) =>
        RunAsync("scan a topic's copies", async connection =>
        {
            await using var transaction = await connection.BeginTransactionAsync(IsolationLevel.RepeatableRead, cancellationToken).ConfigureAwait(false);
            var subscriptions = subscriptionIds.ToArray();
            // A subscription's lowest active message and everything after it may still be delivered:
            // the scan stops short of the lowest over all subscriptions (one index probe each).
            await using (var lowestActive = new NpgsqlCommand(PostgresSql.ContainerDb.LowestActiveOfAny, connection, transaction) { Parameters = { Parameter(subscriptions) } })
            {
                if (await lowestActive.ExecuteScalarAsync(cancellationToken).ConfigureAwait(false) is long lowest)
                {
                    throughSequence = Math.Min(throughSequence, lowest - 1);
                }
            }
            var unreferenced = new List<UnreferencedCopy>();
            var found = new HashSet<long>();
            var scannedThrough = Math.Max(afterSequence, throughSequence);
            if (throughSequence > afterSequence)
            {
                await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.ScanCopies, connection, transaction)
                {
                    Parameters = { Parameter(topicId), Parameter(subscriptions), Parameter(afterSequence), Parameter(throughSequence), Parameter((long)maxRows) },
                };
                var scanned = 0;
                var last = 0L;
                await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
                while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
                {
                    scanned++;
                    last = reader.GetInt64(0);
                    if (!reader.GetBoolean(2) && found.Add(last))
                    {
                        unreferenced.Add(new UnreferencedCopy(last, reader.GetInt32(1), reader.IsDBNull(3) ? null : (byte[])reader.GetValue(3)));
                    }
                }
                if (scanned >= maxRows)
                {
                    scannedThrough = last;
                }
            }
            if (recheck.Count > 0)
            {
                await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.CheckCopies, connection, transaction)
                {
                    Parameters = { Parameter(topicId), Parameter(subscriptions), Parameter(recheck.ToArray()) },
                };
                await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
                while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
                {
                    var sequence = reader.GetInt64(0);
                    if (!reader.GetBoolean(2) && found.Add(sequence))
                    {
                        unreferenced.Add(new UnreferencedCopy(sequence, reader.GetInt32(1), reader.IsDBNull(3) ? null : (byte[])reader.GetValue(3)));
                    }
                }
            }
            await transaction.CommitAsync(cancellationToken).ConfigureAwait(false);
            return new CopyScan(unreferenced, scannedThrough);
        }, cancellationToken);

    /// <summary>Rows of <paramref name="command"/> in order, until <paramref name="maxRows"/> or until <paramref name="maxBytes"/> of payload are read (at least one row).</summary>
    /// <param name="stopAt">Stops before the first row it picks (null: none).</param>
    private static async Task<List<MessageRecord>> ReadMessagesAsync(NpgsqlCommand command, int maxRows, long maxBytes, CancellationToken cancellationToken, Func<MessageRecord, bool>? stopAt = null)
    {
        await using (command)
        {
            var rows = new List<MessageRecord>();
            await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
            var bytes = 0L;
            while (rows.Count < maxRows && (rows.Count == 0 || bytes < maxBytes) && await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                var row = ReadMessage(reader);
                if (stopAt?.Invoke(row) == true)
                {
                    break;
                }
                bytes += row.PayloadSize;
                rows.Add(row);
            }
            return rows;
        }
    }

    public Task<IReadOnlyDictionary<long, byte[]>> ReadPayloadsAsync(long entityId, IReadOnlyCollection<long> sequenceNumbers, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(sequenceNumbers);
        if (sequenceNumbers.Count == 0)
        {
            return Task.FromResult<IReadOnlyDictionary<long, byte[]>>(new Dictionary<long, byte[]>());
        }

        return RunAsync<IReadOnlyDictionary<long, byte[]>>("read payloads", async connection =>
        {
            await using var command = new NpgsqlCommand(PostgresSql.ContainerDb.ReadPayloads, connection)
            {
                Parameters = { Parameter(entityId), Parameter(sequenceNumbers.ToArray()) },
            };
            var payloads = new Dictionary<long, byte[]>(sequenceNumbers.Count);
            await using var reader = await command.ExecuteReaderAsync(cancellationToken).ConfigureAwait(false);
            while (await reader.ReadAsync(cancellationToken).ConfigureAwait(false))
            {
                payloads[reader.GetInt64(0)] = reader.GetFieldValue<byte[]>(1);
            }

            return payloads;
        }, cancellationToken);
    }

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        // Let a write in progress finish before its connections go. The database is kept with one
        // connection (PostgresStandby): this process may well take the container again.
        await _writeLock.WaitAsync().ConfigureAwait(false);
        try
        {
            PostgresStandby.Keep(ConnectionString, _database);
        }
        finally
        {
            _writeLock.Release();
        }
    }

    /// <summary>Rows arrive in sequence order; a stable sort groups them by sub-queue, main first.</summary>
    private static List<MessageRecord> OrderBySubQueue(List<MessageRecord> messages) =>
        messages.TrueForAll(m => m.SubQueue == SubQueue.Main) ? messages : [.. messages.OrderBy(m => m.SubQueue)];

    /// <summary>A row of <see cref="PostgresSql.ContainerDb.LoadMessages"/>, by ordinal: a container load can read millions.</summary>
    private static MessageRecord ReadMessage(NpgsqlDataReader reader) => new()
    {
        EntityId = reader.GetInt64(0),
        SequenceNumber = reader.GetInt64(1),
        SubQueue = (SubQueue)reader.GetInt32(2),
        State = (StoredMessageState)reader.GetInt32(3),
        DeliveryCount = reader.GetInt32(4),
        EnqueuedAtMs = reader.GetInt64(5),
        ScheduledAtMs = reader.IsDBNull(6) ? null : reader.GetInt64(6),
        ExpiresAtMs = reader.IsDBNull(7) ? null : reader.GetInt64(7),
        MessageId = reader.IsDBNull(8) ? null : reader.GetString(8),
        DeadLetterReason = reader.IsDBNull(9) ? null : reader.GetString(9),
        DeadLetterDescription = reader.IsDBNull(10) ? null : reader.GetString(10),
        DeadLetterSource = reader.IsDBNull(11) ? null : reader.GetString(11),
        Payload = reader.IsDBNull(12) ? null : reader.GetFieldValue<byte[]>(12),
        PayloadSize = reader.GetInt32(13),
        StoredAlone = reader.FieldCount > 14 && reader.GetBoolean(14),
    };

    private static NpgsqlParameter<T> Parameter<T>(T value) => new() { TypedValue = value };

    private async Task<T> WriteAsync<T>(string action, Func<NpgsqlConnection, Task<T>> write, CancellationToken cancellationToken)
    {
        await _writeLock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            return await RunAsync(action, write, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _writeLock.Release();
        }
    }

    /// <summary>Runs one operation on its own pooled connection; database errors name the server and database.</summary>
    private async Task<T> RunAsync<T>(string action, Func<NpgsqlConnection, Task<T>> operation, CancellationToken cancellationToken)
    {
        ContainerDatabaseClosedException.ThrowIfClosed(Volatile.Read(ref _disposed) != 0, this);
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
}
