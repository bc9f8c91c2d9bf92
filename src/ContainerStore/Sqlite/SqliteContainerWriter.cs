using Farm.ContainerStore.Containers;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// The one write connection of a container database and its prepared statements. Group commits
/// run hundreds of rows per transaction, so each statement is compiled once and only rebound per
/// row. Not thread-safe: <see cref="SqliteContainerDatabase"/> serializes callers. Its commits are
/// not durable when they return: <see cref="Flush"/> or <see cref="FlushAsync"/> makes them so.
/// </summary>
internal sealed class SqliteContainerWriter : IAsyncDisposable
{
    private readonly SqliteConnection _connection;
    private readonly string _path;
    private readonly SqliteCommand _readEpoch;
    private readonly SqliteCommand _raiseEpoch;
    private readonly SqliteCommand _purgeMessages;
    private readonly SqliteCommand _purgeDuplicates;
    private readonly SqliteCommand _purgeEntityState;
    private readonly SqliteCommand _purgeCopyMembers;
    // The statements run once per message row: bound by index (see SqliteRowStatement).
    private readonly SqliteRowStatement _insert;
    private readonly SqliteRowStatement _update;
    private readonly SqliteRowStatement _updateDeliveryCount;
    private readonly SqliteRowStatement _delete;
    // A fan-out's followers (schema version 7): a membership per copy, a done mark per subscription and commit.
    private readonly SqliteRowStatement _insertCopyMembers;
    private readonly SqliteRowStatement _deleteCopyMembers;
    private readonly SqliteRowStatement _upsertTombstone;
    private readonly SqliteRowStatement _upsertDoneThrough;
    private readonly SqliteRowStatement _deleteTombstonesThrough;
    private readonly SqliteRowStatement _upsertFollower;
    // Once per entity, duplicate-detected message or named send of a batch: at 15,000 queues with a
    // message each, as often as the rows (a send record and a sequence counter per message).
    private readonly SqliteRowStatement _upsertSequence;
    private readonly SqliteRowStatement _upsertDeliveryMark;
    private readonly SqliteRowStatement _upsertDuplicate;
    private readonly SqliteCommand _pruneDuplicates;
    private readonly SqliteRowStatement _insertSendRecord;
    private readonly SqliteCommand _pruneSendRecords;
    private readonly SqliteCommand[] _all;
    private readonly WalFlusher _flusher;

    public SqliteContainerWriter(SqliteConnection connection, string path)
    {
        _connection = connection;
        _path = path;
        _flusher = new WalFlusher(path);
        using (var synchronous = connection.CreateCommand())
        {
            synchronous.CommandText = SqliteSql.CommitWithoutFsync;
            synchronous.ExecuteNonQuery();
        }
        _readEpoch = Prepare(SqliteSql.ContainerDb.ReadEpoch);
        _raiseEpoch = Prepare(SqliteSql.ContainerDb.RaiseEpoch, "@Epoch");
        _purgeMessages = Prepare(SqliteSql.ContainerDb.PurgeMessages, "$entity");
        _purgeDuplicates = Prepare(SqliteSql.ContainerDb.PurgeDuplicates, "$entity");
        _purgeEntityState = Prepare(SqliteSql.ContainerDb.PurgeEntityState, "$entity");
        _purgeCopyMembers = Prepare(SqliteSql.ContainerDb.PurgeCopyMembers, "$entity");
        _insert = new SqliteRowStatement(
            connection, SqliteSql.ContainerDb.InsertMessage,
            "$entity", "$sequence", "$subQueue", "$state", "$deliveryCount", "$enqueuedAt", "$scheduledAt",
            "$expiresAt", "$messageId", "$dlReason", "$dlDescription", "$dlSource", "$payload", "$payloadSize");
        _update = new SqliteRowStatement(
            connection, SqliteSql.ContainerDb.UpdateMessage,
            "$entity", "$sequence", "$subQueue", "$state", "$deliveryCount", "$dlReason", "$dlDescription", "$dlSource",
            "$payload", "$payloadSize");
        _updateDeliveryCount = new SqliteRowStatement(connection, SqliteSql.ContainerDb.UpdateDeliveryCount, "$entity", "$sequence", "$deliveryCount");
        _delete = new SqliteRowStatement(connection, SqliteSql.ContainerDb.DeleteMessage, "$entity", "$sequence");
        _insertCopyMembers = new SqliteRowStatement(connection, SqliteSql.ContainerDb.InsertCopyMembers, "$entity", "$sequence", "$members");
        _deleteCopyMembers = new SqliteRowStatement(connection, SqliteSql.ContainerDb.DeleteCopyMembers, "$entity", "$sequence");
        _upsertTombstone = new SqliteRowStatement(connection, SqliteSql.ContainerDb.UpsertTombstone, "$entity", "$sequence");
        _upsertDoneThrough = new SqliteRowStatement(connection, SqliteSql.ContainerDb.UpsertDoneThrough, "$entity", "$through");
        _deleteTombstonesThrough = new SqliteRowStatement(connection, SqliteSql.ContainerDb.DeleteTombstonesThrough, "$entity", "$through");
        _upsertFollower = new SqliteRowStatement(connection, SqliteSql.ContainerDb.UpsertFollower, "$entity", "$slot", "$from");
        _upsertSequence = new SqliteRowStatement(connection, SqliteSql.ContainerDb.UpsertSequence, "$entity", "$next");
        _upsertDeliveryMark = new SqliteRowStatement(connection, SqliteSql.ContainerDb.UpsertDeliveryMark, "$entity", "$through");
        _upsertDuplicate = new SqliteRowStatement(connection, SqliteSql.ContainerDb.UpsertDuplicate, "$entity", "$messageId", "$expiresAt");
        _pruneDuplicates = Prepare(SqliteSql.ContainerDb.PruneDuplicates, "$before");
        _insertSendRecord = new SqliteRowStatement(
            connection, SqliteSql.ContainerDb.InsertSendRecord, "$producer", "$sendId", "$entity", "$sequences", "$at");
        _pruneSendRecords = Prepare(SqliteSql.ContainerDb.PruneSendRecords, "$before");
        _all = [_readEpoch, _raiseEpoch, _purgeMessages, _purgeDuplicates, _purgeEntityState, _purgeCopyMembers, _pruneDuplicates, _pruneSendRecords];
    }

    /// <summary>Makes every commit so far durable; a failure leaves their outcome unknown.</summary>
    public void Flush()
    {
        try
        {
            _flusher.Flush();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw FlushFailed(e);
        }
    }

    /// <summary>
    /// Completes once every commit so far is durable, on the flusher's thread; fails with
    /// <see cref="CommitOutcomeUnknownException"/> when the fsync did.
    /// </summary>
    public async Task FlushAsync()
    {
        try
        {
            await _flusher.FlushAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or ObjectDisposedException)
        {
            throw FlushFailed(e);
        }
    }

    private CommitOutcomeUnknownException FlushFailed(Exception e) =>
        new($"Writing the commits to '{_path}' to disk failed; they may or may not be durable: {e.Message}", e);

    /// <summary>Raises the epoch in a transaction of its own, durable when this returns.</summary>
    public bool RaiseEpoch(long newEpoch)
    {
        var transaction = Begin();
        try
        {
            _raiseEpoch.Parameters[0].Value = newEpoch;
            var raised = _raiseEpoch.ExecuteNonQuery() == 1 || ReadEpoch() == newEpoch;
            transaction.Commit();
            Flush();
            return raised;
        }
        catch
        {
            Abandon(transaction);
            throw;
        }
        finally
        {
            transaction.Dispose();
        }
    }

    /// <summary>One transaction: check the epoch, then apply the batch in its documented order.</summary>
    /// <param name="purgedBefore">Entities purged by earlier batches through this database handle: their rows may be missing.</param>
    public void Commit(long expectedEpoch, ContainerWriteBatch batch, IReadOnlySet<long> purgedBefore)
    {
        // BEGIN IMMEDIATE: the write lock is taken before the epoch is read, so no other writer can
        // raise it between the check and the commit.
        var transaction = Begin();
        try
        {
            var epoch = ReadEpoch();
            if (epoch != expectedEpoch)
            {
                throw new StaleEpochException(expectedEpoch, epoch);
            }

            // An open handle keeps writing into a file that was deleted; acknowledging such writes
            // would lose them, so a vanished file fails the commit instead.
            if (!File.Exists(_path))
            {
                throw new StoreUnavailableException($"The container database '{_path}' was deleted or moved while open; nothing was written.");
            }

            Apply(batch, purgedBefore);
        }
        catch
        {
            Abandon(transaction);
            transaction.Dispose();
            throw;
        }

        try
        {
            transaction.Commit();
        }
        catch (Exception e)
        {
            // SQLite may have written the WAL frames before the failure (a failed fsync): unknown.
            Abandon(transaction);
            throw new CommitOutcomeUnknownException($"The commit to '{_path}' failed; it may or may not be durable: {e.Message}", e);
        }
        finally
        {
            transaction.Dispose();
        }
    }

    public async ValueTask DisposeAsync()
    {
        // First: a flush under way finishes (its callers get their answer) before the connection closes.
        _flusher.Dispose();
        foreach (var command in _all)
        {
            await command.DisposeAsync().ConfigureAwait(false);
        }

        // Finalized before the connection closes: an open statement keeps the database handle busy.
        _insert.Dispose();
        _update.Dispose();
        _updateDeliveryCount.Dispose();
        _delete.Dispose();
        _insertCopyMembers.Dispose();
        _deleteCopyMembers.Dispose();
        _upsertTombstone.Dispose();
        _upsertDoneThrough.Dispose();
        _deleteTombstonesThrough.Dispose();
        _upsertFollower.Dispose();
        _upsertSequence.Dispose();
        _upsertDeliveryMark.Dispose();
        _upsertDuplicate.Dispose();
        _insertSendRecord.Dispose();
        await _connection.DisposeAsync().ConfigureAwait(false);
    }

    private void Apply(ContainerWriteBatch batch, IReadOnlySet<long> purgedBefore)
    {
        foreach (var m in batch.Inserts)
        {
            Insert(m);
        }

        // A row may be missing only when its entity was purged (a settlement racing the delete of its
        // queue or subscription); anywhere else the broker's memory and the database disagree.
        bool MayBeMissing(long entityId) => batch.PurgedEntities.Contains(entityId) || purgedBefore.Contains(entityId);

        foreach (var u in batch.Updates)
        {
            if (Update(u) == 0)
            {
                if (u.InsertIfMissing is { } row)
                {
                    // An implicit message's first write: its row, unless its subscription is gone.
                    if (!MayBeMissing(u.EntityId))
                    {
                        Insert(row);
                    }
                }
                else if (!MayBeMissing(u.EntityId))
                {
                    throw MissingRowException.For("update", new MessageKey(u.EntityId, u.SequenceNumber));
                }
            }
        }

        foreach (var d in batch.Deletes)
        {
            Delete(d);
        }

        foreach (var d in batch.CopyDeletes)
        {
            Delete(d);
            _deleteCopyMembers.Bind(0, d.EntityId);
            _deleteCopyMembers.Bind(1, d.SequenceNumber);
            _deleteCopyMembers.Execute();
        }

        foreach (var t in batch.Tombstones)
        {
            if (!MayBeMissing(t.EntityId))
            {
                _upsertTombstone.Bind(0, t.EntityId);
                _upsertTombstone.Bind(1, t.SequenceNumber);
                _upsertTombstone.Execute();
            }
        }

        ApplyCountersAndMarks(batch, MayBeMissing);
        ApplyHistoryAndPurges(batch);

        void Delete(MessageKey d)
        {
            _delete.Bind(0, d.EntityId);
            _delete.Bind(1, d.SequenceNumber);
            if (_delete.Execute() == 0 && !MayBeMissing(d.EntityId))
            {
                throw MissingRowException.For("delete", d);
            }
        }
    }

    private void Insert(MessageRecord m)
    {
        _insert.Bind(0, m.EntityId);
        _insert.Bind(1, m.SequenceNumber);
        _insert.Bind(2, (long)m.SubQueue);
        _insert.Bind(3, (long)m.State);
        _insert.Bind(4, (long)m.DeliveryCount);
        _insert.Bind(5, m.EnqueuedAtMs);
        _insert.Bind(6, m.ScheduledAtMs);
        _insert.Bind(7, m.ExpiresAtMs);
        _insert.Bind(8, m.MessageId);
        _insert.Bind(9, m.DeadLetterReason);
        _insert.Bind(10, m.DeadLetterDescription);
        _insert.Bind(11, m.DeadLetterSource);
        _insert.Bind(12, m.Payload);
        _insert.Bind(13, (long)(m.Payload?.Length ?? m.PayloadSize));
        _insert.Execute();
        if (m.Members is { } members)
        {
            _insertCopyMembers.Bind(0, m.EntityId);
            _insertCopyMembers.Bind(1, m.SequenceNumber);
            _insertCopyMembers.Bind(2, members);
            _insertCopyMembers.Execute();
        }
    }

    /// <summary>Applies an update; returns the rows it changed (0: no row).</summary>
    private int Update(MessageUpdate u)
    {
        if (u.DeliveryCountOnly && u.Payload is null)
        {
            _updateDeliveryCount.Bind(0, u.EntityId);
            _updateDeliveryCount.Bind(1, u.SequenceNumber);
            _updateDeliveryCount.Bind(2, (long)u.StoredDeliveryCount);
            return _updateDeliveryCount.Execute();
        }

        _update.Bind(0, u.EntityId);
        _update.Bind(1, u.SequenceNumber);
        _update.Bind(2, (long)u.SubQueue);
        _update.Bind(3, (long)u.State);
        _update.Bind(4, (long)u.StoredDeliveryCount);
        _update.Bind(5, u.DeadLetterReason);
        _update.Bind(6, u.DeadLetterDescription);
        _update.Bind(7, u.DeadLetterSource);
        _update.Bind(8, u.Payload);
        _update.Bind(9, (long)(u.Payload?.Length ?? 0));
        return _update.Execute();
    }

    private void ApplyCountersAndMarks(ContainerWriteBatch batch, Func<long, bool> mayBeMissing)
    {
        foreach (var (entityId, next) in batch.SequenceCounters)
        {
            _upsertSequence.Bind(0, entityId);
            _upsertSequence.Bind(1, next);
            _upsertSequence.Execute();
        }

        foreach (var (entityId, through) in batch.DeliveryMarks)
        {
            if (mayBeMissing(entityId))
            {
                // Deleted: its state row goes (or went) with it and must not come back.
                continue;
            }
            _upsertDeliveryMark.Bind(0, entityId);
            _upsertDeliveryMark.Bind(1, through);
            _upsertDeliveryMark.Execute();
        }

        foreach (var (entityId, through) in batch.DoneThrough)
        {
            if (mayBeMissing(entityId))
            {
                continue;
            }
            _upsertDoneThrough.Bind(0, entityId);
            _upsertDoneThrough.Bind(1, through);
            _upsertDoneThrough.Execute();
            _deleteTombstonesThrough.Bind(0, entityId);
            _deleteTombstonesThrough.Bind(1, through);
            _deleteTombstonesThrough.Execute();
        }

        foreach (var (entityId, (slot, from)) in batch.Followers)
        {
            if (mayBeMissing(entityId))
            {
                continue;
            }
            _upsertFollower.Bind(0, entityId);
            _upsertFollower.Bind(1, (long)slot);
            _upsertFollower.Bind(2, from);
            _upsertFollower.Execute();
        }
    }

    private void ApplyHistoryAndPurges(ContainerWriteBatch batch)
    {
        foreach (var d in batch.Duplicates)
        {
            _upsertDuplicate.Bind(0, d.EntityId);
            _upsertDuplicate.Bind(1, d.MessageId);
            _upsertDuplicate.Bind(2, d.ExpiresAtMs);
            _upsertDuplicate.Execute();
        }

        if (batch.PruneDuplicatesBeforeMs > 0)
        {
            _pruneDuplicates.Parameters[0].Value = batch.PruneDuplicatesBeforeMs;
            _pruneDuplicates.ExecuteNonQuery();
        }

        foreach (var send in batch.Sends)
        {
            _insertSendRecord.Bind(0, send.ProducerId);
            _insertSendRecord.Bind(1, send.SendId);
            _insertSendRecord.Bind(2, send.EntityId);
            _insertSendRecord.Bind(3, SendRecord.Pack(send.SequenceNumbers));
            _insertSendRecord.Bind(4, send.AtMs);
            _insertSendRecord.Execute();
        }

        if (batch.PruneSendsBeforeMs > 0)
        {
            _pruneSendRecords.Parameters[0].Value = batch.PruneSendsBeforeMs;
            _pruneSendRecords.ExecuteNonQuery();
        }

        // Purges last: an insert or update of an entity deleted in the same batch must not outlive it.
        foreach (var entityId in batch.PurgedEntities)
        {
            _purgeMessages.Parameters[0].Value = entityId;
            _purgeMessages.ExecuteNonQuery();
            _purgeDuplicates.Parameters[0].Value = entityId;
            _purgeDuplicates.ExecuteNonQuery();
            _purgeEntityState.Parameters[0].Value = entityId;
            _purgeEntityState.ExecuteNonQuery();
            _purgeCopyMembers.Parameters[0].Value = entityId;
            _purgeCopyMembers.ExecuteNonQuery();
        }
    }

    private SqliteTransaction Begin()
    {
        var transaction = _connection.BeginTransaction(deferred: false);
        foreach (var command in _all)
        {
            command.Transaction = transaction;
        }

        return transaction;
    }

    private long ReadEpoch() => (long)_readEpoch.ExecuteScalar()!;

    /// <summary>
    /// Rolls back after a failure. SQLite may already have rolled back by itself (I/O error, full
    /// disk), in which case ROLLBACK fails too; the first error is the one that matters.
    /// </summary>
    private static void Abandon(SqliteTransaction transaction)
    {
        if (transaction.Connection is null)
        {
            return;
        }

        try
        {
            transaction.Rollback();
        }
        catch (SqliteException)
        {
            // Already rolled back by SQLite; the caller rethrows the original failure.
        }
    }

    private SqliteCommand Prepare(string sql, params string[] parameterNames)
    {
        var command = _connection.CreateCommand();
        command.CommandText = sql;
        foreach (var name in parameterNames)
        {
            command.Parameters.Add(new SqliteParameter(name, DBNull.Value));
        }

        command.Prepare();
        return command;
    }
}
