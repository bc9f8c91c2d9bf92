using Farm.ContainerStore.Containers;
using Microsoft.Data.Sqlite;

namespace Farm.ContainerStore.Sqlite;

/// <summary>
/// The one write connection of a container database and its prepared statements. Group commits
/// run hundreds of rows per transaction, so each statement is compiled once and only rebound per
/// row. Not thread-safe: <see cref="SqliteContainerDatabase"/> serializes callers.
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
    private readonly SqliteCommand _insert;
    private readonly SqliteCommand _update;
    private readonly SqliteCommand _updateDeliveryCount;
    private readonly SqliteCommand _delete;
    private readonly SqliteCommand _upsertSequence;
    private readonly SqliteCommand _upsertDuplicate;
    private readonly SqliteCommand _pruneDuplicates;
    private readonly SqliteCommand[] _all;

    public SqliteContainerWriter(SqliteConnection connection, string path)
    {
        _connection = connection;
        _path = path;
        _readEpoch = Prepare(SqliteSql.ContainerDb.ReadEpoch);
        _raiseEpoch = Prepare(SqliteSql.ContainerDb.RaiseEpoch, "@Epoch");
        _purgeMessages = Prepare(SqliteSql.ContainerDb.PurgeMessages, "$entity");
        _purgeDuplicates = Prepare(SqliteSql.ContainerDb.PurgeDuplicates, "$entity");
        _purgeEntityState = Prepare(SqliteSql.ContainerDb.PurgeEntityState, "$entity");
        _insert = Prepare(
            SqliteSql.ContainerDb.InsertMessage,
            "$entity", "$sequence", "$subQueue", "$state", "$deliveryCount", "$enqueuedAt", "$scheduledAt",
            "$expiresAt", "$messageId", "$dlReason", "$dlDescription", "$dlSource", "$payload", "$payloadSize");
        _update = Prepare(
            SqliteSql.ContainerDb.UpdateMessage,
            "$entity", "$sequence", "$subQueue", "$state", "$deliveryCount", "$dlReason", "$dlDescription", "$dlSource",
            "$payload", "$payloadSize");
        _updateDeliveryCount = Prepare(SqliteSql.ContainerDb.UpdateDeliveryCount, "$entity", "$sequence", "$deliveryCount");
        _delete = Prepare(SqliteSql.ContainerDb.DeleteMessage, "$entity", "$sequence");
        _upsertSequence = Prepare(SqliteSql.ContainerDb.UpsertSequence, "$entity", "$next");
        _upsertDuplicate = Prepare(SqliteSql.ContainerDb.UpsertDuplicate, "$entity", "$messageId", "$expiresAt");
        _pruneDuplicates = Prepare(SqliteSql.ContainerDb.PruneDuplicates, "$before");
        _all = [_readEpoch, _raiseEpoch, _purgeMessages, _purgeDuplicates, _purgeEntityState, _insert, _update, _updateDeliveryCount, _delete, _upsertSequence, _upsertDuplicate, _pruneDuplicates];
    }

    public bool RaiseEpoch(long newEpoch)
    {
        var transaction = Begin();
        try
        {
            _raiseEpoch.Parameters[0].Value = newEpoch;
            var raised = _raiseEpoch.ExecuteNonQuery() == 1 || ReadEpoch() == newEpoch;
            transaction.Commit();
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
        foreach (var command in _all)
        {
            await command.DisposeAsync().ConfigureAwait(false);
        }

        await _connection.DisposeAsync().ConfigureAwait(false);
    }

    private void Apply(ContainerWriteBatch batch, IReadOnlySet<long> purgedBefore)
    {
        var p = _insert.Parameters;
        foreach (var m in batch.Inserts)
        {
            p[0].Value = m.EntityId;
            p[1].Value = m.SequenceNumber;
            p[2].Value = (long)m.SubQueue;
            p[3].Value = (long)m.State;
            p[4].Value = (long)m.DeliveryCount;
            p[5].Value = m.EnqueuedAtMs;
            p[6].Value = Db(m.ScheduledAtMs);
            p[7].Value = Db(m.ExpiresAtMs);
            p[8].Value = Db(m.MessageId);
            p[9].Value = Db(m.DeadLetterReason);
            p[10].Value = Db(m.DeadLetterDescription);
            p[11].Value = Db(m.DeadLetterSource);
            p[12].Value = Db(m.Payload);
            p[13].Value = (long)(m.Payload?.Length ?? m.PayloadSize);
            _insert.ExecuteNonQuery();
        }

        // A row may be missing only when its entity was purged (a settlement racing the delete of its
        // queue or subscription); anywhere else the broker's memory and the database disagree.
        bool MayBeMissing(long entityId) => batch.PurgedEntities.Contains(entityId) || purgedBefore.Contains(entityId);

        p = _update.Parameters;
        var countOnly = _updateDeliveryCount.Parameters;
        foreach (var u in batch.Updates)
        {
            if (u.DeliveryCountOnly && u.Payload is null)
            {
                countOnly[0].Value = u.EntityId;
                countOnly[1].Value = u.SequenceNumber;
                countOnly[2].Value = (long)u.DeliveryCount;
                if (_updateDeliveryCount.ExecuteNonQuery() == 0 && !MayBeMissing(u.EntityId))
                {
                    throw MissingRowException.For("update", new MessageKey(u.EntityId, u.SequenceNumber));
                }
                continue;
            }

            p[0].Value = u.EntityId;
            p[1].Value = u.SequenceNumber;
            p[2].Value = (long)u.SubQueue;
            p[3].Value = (long)u.State;
            p[4].Value = (long)u.DeliveryCount;
            p[5].Value = Db(u.DeadLetterReason);
            p[6].Value = Db(u.DeadLetterDescription);
            p[7].Value = Db(u.DeadLetterSource);
            p[8].Value = Db(u.Payload);
            p[9].Value = (long)(u.Payload?.Length ?? 0);
            if (_update.ExecuteNonQuery() == 0 && !MayBeMissing(u.EntityId))
            {
                throw MissingRowException.For("update", new MessageKey(u.EntityId, u.SequenceNumber));
            }
        }

        p = _delete.Parameters;
        foreach (var d in batch.Deletes)
        {
            p[0].Value = d.EntityId;
            p[1].Value = d.SequenceNumber;
            if (_delete.ExecuteNonQuery() == 0 && !MayBeMissing(d.EntityId))
            {
                throw MissingRowException.For("delete", d);
            }
        }

        p = _upsertSequence.Parameters;
        foreach (var (entityId, next) in batch.SequenceCounters)
        {
            p[0].Value = entityId;
            p[1].Value = next;
            _upsertSequence.ExecuteNonQuery();
        }

        p = _upsertDuplicate.Parameters;
        foreach (var d in batch.Duplicates)
        {
            p[0].Value = d.EntityId;
            p[1].Value = d.MessageId;
            p[2].Value = d.ExpiresAtMs;
            _upsertDuplicate.ExecuteNonQuery();
        }

        if (batch.PruneDuplicatesBeforeMs > 0)
        {
            _pruneDuplicates.Parameters[0].Value = batch.PruneDuplicatesBeforeMs;
            _pruneDuplicates.ExecuteNonQuery();
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

    private static object Db(object? value) => value ?? DBNull.Value;

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
