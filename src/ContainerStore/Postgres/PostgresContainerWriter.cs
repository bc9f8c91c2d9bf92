using Farm.ContainerStore.Containers;
using Npgsql;

namespace Farm.ContainerStore.Postgres;

/// <summary>
/// Turns a <see cref="ContainerWriteBatch"/> into one <see cref="NpgsqlBatch"/> of set-based
/// statements, in the batch's documented order, each taking its rows as one array per column. A
/// group commit of hundreds of messages is then one round trip, and PostgreSQL applies the
/// statements one after the other, each seeing the ones before it.
/// </summary>
internal static class PostgresContainerWriter
{
    /// <summary>A statement whose rows must all exist: after it ran, it must have touched <paramref name="Expected"/> rows.</summary>
    public sealed record RowCheck(NpgsqlBatchCommand Command, string Write, int Expected, IReadOnlyList<MessageKey> Keys);

    /// <summary>
    /// The commands of <paramref name="batch"/>; an empty batch gives an empty <see cref="NpgsqlBatch"/>.
    /// Updates and deletes come as two statements each: rows that must exist (counted by
    /// <paramref name="checks"/>, verified by <see cref="Verify"/>), and rows of entities purged in
    /// this batch or in <paramref name="purgedBefore"/>, which may be gone.
    /// </summary>
    public static NpgsqlBatch Build(
        NpgsqlConnection connection, NpgsqlTransaction transaction, ContainerWriteBatch batch, IReadOnlySet<long> purgedBefore, List<RowCheck> checks)
    {
        var commands = new NpgsqlBatch(connection, transaction);
        if (batch.Inserts.Count > 0)
        {
            AddInserts(commands, batch.Inserts, PostgresSql.ContainerDb.InsertMessages);
            var copies = batch.Inserts.Where(m => m.Members is not null).ToList();
            if (copies.Count > 0)
            {
                Add(commands, PostgresSql.ContainerDb.InsertCopyMembers,
                    Parameter(copies.Select(c => c.EntityId).ToArray()), Parameter(copies.Select(c => c.SequenceNumber).ToArray()),
                    Parameter(copies.Select(c => c.Members!).ToArray()));
            }
        }

        bool MayBeMissing(long entityId) => batch.PurgedEntities.Contains(entityId) || purgedBefore.Contains(entityId);

        if (batch.Updates.Count > 0)
        {
            var all = MergeUpdates(batch.Updates);
            // An implicit message's write inserts its row when it has none (unless its subscription is gone).
            var upserts = all.Where(u => u.InsertIfMissing is not null && !MayBeMissing(u.EntityId)).Select(u => u.InsertIfMissing!).ToList();
            if (upserts.Count > 0)
            {
                AddInserts(commands, upserts, PostgresSql.ContainerDb.UpsertMessages);
            }
            var merged = all.Where(u => u.InsertIfMissing is null).ToList();
            var strict = merged.Where(u => !MayBeMissing(u.EntityId)).ToList();
            if (strict.Count > 0)
            {
                var command = AddUpdates(commands, strict);
                checks.Add(new RowCheck(command, "update", strict.Count, [.. strict.Select(u => new MessageKey(u.EntityId, u.SequenceNumber))]));
            }
            if (strict.Count < merged.Count)
            {
                AddUpdates(commands, [.. merged.Where(u => MayBeMissing(u.EntityId))]);
            }
        }

        if (batch.CopyDeletes.Count > 0)
        {
            Add(commands, PostgresSql.ContainerDb.DeleteCopyMembers,
                Parameter(batch.CopyDeletes.Select(d => d.EntityId).ToArray()), Parameter(batch.CopyDeletes.Select(d => d.SequenceNumber).ToArray()));
        }

        // A topic's copies have no membership here: they go as any row does.
        var deletes = batch.CopyDeletes.Count == 0 ? batch.Deletes : [.. batch.Deletes, .. batch.CopyDeletes];
        if (deletes.Count > 0)
        {
            var strict = deletes.Where(d => !MayBeMissing(d.EntityId)).ToList();
            if (strict.Count > 0)
            {
                var command = AddDeletes(commands, strict);
                checks.Add(new RowCheck(command, "delete", strict.Count, strict));
            }
            if (strict.Count < deletes.Count)
            {
                AddDeletes(commands, [.. deletes.Where(d => MayBeMissing(d.EntityId))]);
            }
        }

        // After the deletes, each key once (ON CONFLICT cannot touch a row twice in one statement).
        var tombstones = batch.Tombstones.Where(t => !MayBeMissing(t.EntityId)).Distinct().ToList();
        if (tombstones.Count > 0)
        {
            Add(commands, PostgresSql.ContainerDb.UpsertTombstones,
                Parameter(tombstones.Select(t => t.EntityId).ToArray()), Parameter(tombstones.Select(t => t.SequenceNumber).ToArray()));
        }

        if (batch.SequenceCounters.Count > 0)
        {
            Add(commands, PostgresSql.ContainerDb.UpsertSequences,
                Parameter(batch.SequenceCounters.Keys.ToArray()), Parameter(batch.SequenceCounters.Values.ToArray()));
        }

        // A deleted entity's state row goes (or went) with it and must not come back.
        var marks = batch.DeliveryMarks.Where(m => !MayBeMissing(m.Key)).ToList();
        if (marks.Count > 0)
        {
            Add(commands, PostgresSql.ContainerDb.UpsertDeliveryMarks,
                Parameter(marks.Select(m => m.Key).ToArray()), Parameter(marks.Select(m => m.Value).ToArray()));
        }

        var done = batch.DoneThrough.Where(d => !MayBeMissing(d.Key)).ToList();
        if (done.Count > 0)
        {
            var entities = done.Select(d => d.Key).ToArray();
            var through = done.Select(d => d.Value).ToArray();
            Add(commands, PostgresSql.ContainerDb.UpsertDoneThrough, Parameter(entities), Parameter(through));
            Add(commands, PostgresSql.ContainerDb.DeleteTombstonesThrough, Parameter(entities), Parameter(through));
        }

        var followers = batch.Followers.Where(f => !MayBeMissing(f.Key)).ToList();
        if (followers.Count > 0)
        {
            Add(commands, PostgresSql.ContainerDb.UpsertFollowers,
                Parameter(followers.Select(f => f.Key).ToArray()), Parameter(followers.Select(f => f.Value.Slot).ToArray()),
                Parameter(followers.Select(f => f.Value.FollowFrom).ToArray()));
        }

        if (batch.Duplicates.Count > 0)
        {
            AddDuplicates(commands, batch.Duplicates);
        }

        if (batch.PruneDuplicatesBeforeMs > 0)
        {
            Add(commands, PostgresSql.ContainerDb.PruneDuplicates, Parameter(batch.PruneDuplicatesBeforeMs));
        }

        if (batch.Sends.Count > 0)
        {
            AddSendRecords(commands, batch.Sends);
        }

        if (batch.PruneSendsBeforeMs > 0)
        {
            Add(commands, PostgresSql.ContainerDb.PruneSendRecords, Parameter(batch.PruneSendsBeforeMs));
        }

        // Purges last: an insert or update of an entity deleted in the same batch must not outlive it.
        if (batch.PurgedEntities.Count > 0)
        {
            var entities = batch.PurgedEntities.ToArray();
            Add(commands, PostgresSql.ContainerDb.PurgeMessages, Parameter(entities));
            Add(commands, PostgresSql.ContainerDb.PurgeDuplicates, Parameter(entities));
            Add(commands, PostgresSql.ContainerDb.PurgeEntityState, Parameter(entities));
            Add(commands, PostgresSql.ContainerDb.PurgeCopyMembers, Parameter(entities));
        }

        return commands;
    }

    /// <summary>Rows as one array per column, for <see cref="PostgresSql.ContainerDb.InsertMessages"/> or <see cref="PostgresSql.ContainerDb.UpsertMessages"/>.</summary>
    private static void AddInserts(NpgsqlBatch commands, List<MessageRecord> inserts, string sql)
    {
        var n = inserts.Count;
        var entity = new long[n];
        var sequence = new long[n];
        var subQueue = new int[n];
        var state = new int[n];
        var deliveryCount = new int[n];
        var enqueuedAt = new long[n];
        var scheduledAt = new long?[n];
        var expiresAt = new long?[n];
        var messageId = new string?[n];
        var dlReason = new string?[n];
        var dlDescription = new string?[n];
        var dlSource = new string?[n];
        var payload = new byte[]?[n];
        var payloadSize = new int[n];
        for (var i = 0; i < n; i++)
        {
            var m = inserts[i];
            entity[i] = m.EntityId;
            sequence[i] = m.SequenceNumber;
            subQueue[i] = (int)m.SubQueue;
            state[i] = (int)m.State;
            deliveryCount[i] = m.DeliveryCount;
            enqueuedAt[i] = m.EnqueuedAtMs;
            scheduledAt[i] = m.ScheduledAtMs;
            expiresAt[i] = m.ExpiresAtMs;
            messageId[i] = m.MessageId;
            dlReason[i] = m.DeadLetterReason;
            dlDescription[i] = m.DeadLetterDescription;
            dlSource[i] = m.DeadLetterSource;
            payload[i] = m.Payload;
            payloadSize[i] = m.Payload?.Length ?? m.PayloadSize;
        }

        Add(commands, sql,
            Parameter(entity), Parameter(sequence), Parameter(subQueue), Parameter(state), Parameter(deliveryCount),
            Parameter(enqueuedAt), Parameter(scheduledAt), Parameter(expiresAt), Parameter(messageId), Parameter(dlReason),
            Parameter(dlDescription), Parameter(dlSource), Parameter(payload), Parameter(payloadSize));
    }

    /// <summary>After the batch ran: throws <see cref="MissingRowException"/> when a statement touched fewer rows than it must.</summary>
    public static void Verify(List<RowCheck> checks)
    {
        foreach (var check in checks)
        {
            if (check.Command.RecordsAffected < check.Expected)
            {
                throw MissingRowException.ForMany(check.Write, check.Expected, check.Command.RecordsAffected, check.Keys);
            }
        }
    }

    private static NpgsqlBatchCommand AddDeletes(NpgsqlBatch commands, List<MessageKey> deletes)
    {
        var entities = new long[deletes.Count];
        var sequences = new long[deletes.Count];
        for (var i = 0; i < deletes.Count; i++)
        {
            (entities[i], sequences[i]) = (deletes[i].EntityId, deletes[i].SequenceNumber);
        }

        return Add(commands, PostgresSql.ContainerDb.DeleteMessages, Parameter(entities), Parameter(sequences));
    }

    private static NpgsqlBatchCommand AddUpdates(NpgsqlBatch commands, IReadOnlyList<MessageUpdate> updates)
    {
        var n = updates.Count;
        var entity = new long[n];
        var sequence = new long[n];
        var subQueue = new int[n];
        var state = new int[n];
        var deliveryCount = new int[n];
        var dlReason = new string?[n];
        var dlDescription = new string?[n];
        var dlSource = new string?[n];
        var payload = new byte[]?[n];
        for (var i = 0; i < n; i++)
        {
            var u = updates[i];
            entity[i] = u.EntityId;
            sequence[i] = u.SequenceNumber;
            subQueue[i] = (int)u.SubQueue;
            state[i] = (int)u.State;
            deliveryCount[i] = u.StoredDeliveryCount;
            dlReason[i] = u.DeadLetterReason;
            dlDescription[i] = u.DeadLetterDescription;
            dlSource[i] = u.DeadLetterSource;
            payload[i] = u.Payload;
        }

        return Add(commands, PostgresSql.ContainerDb.UpdateMessages,
            Parameter(entity), Parameter(sequence), Parameter(subQueue), Parameter(state), Parameter(deliveryCount),
            Parameter(dlReason), Parameter(dlDescription), Parameter(dlSource), Parameter(payload));
    }

    /// <summary>
    /// One row per message, as if the updates ran one after the other: the last one's columns win,
    /// and a later update without a payload keeps the payload an earlier one set.
    /// </summary>
    private static IReadOnlyList<MessageUpdate> MergeUpdates(List<MessageUpdate> updates)
    {
        if (updates.Count == 1)
        {
            return updates;
        }

        var merged = new Dictionary<MessageKey, MessageUpdate>(updates.Count);
        foreach (var update in updates)
        {
            var key = new MessageKey(update.EntityId, update.SequenceNumber);
            // The later update carries every field's newest value; a payload set earlier stays. The
            // DeliveryCountOnly hint is not used here (this statement writes every column anyway).
            if (!merged.TryGetValue(key, out var earlier))
            {
                merged[key] = update;
                continue;
            }
            var payload = update.Payload ?? earlier.Payload;
            // An implicit message's row to insert, if it has none, carries the newest values too.
            var row = (update.InsertIfMissing ?? earlier.InsertIfMissing) is { } template
                ? template with
                {
                    SubQueue = update.SubQueue,
                    State = update.State,
                    DeliveryCount = update.StoredDeliveryCount,
                    DeadLetterReason = update.DeadLetterReason,
                    DeadLetterDescription = update.DeadLetterDescription,
                    DeadLetterSource = update.DeadLetterSource,
                    Payload = payload ?? template.Payload,
                    PayloadSize = payload?.Length ?? template.PayloadSize,
                }
                : null;
            merged[key] = update with { Payload = payload, DeliveryCountOnly = false, InsertIfMissing = row };
        }

        return merged.Count == updates.Count ? updates : [.. merged.Values];
    }

    /// <summary>One row per (entity, MessageId), the last one seen winning, as sequential upserts would leave it.</summary>
    private static void AddDuplicates(NpgsqlBatch commands, List<DuplicateRecord> duplicates)
    {
        var latest = new Dictionary<(long EntityId, string MessageId), long>(duplicates.Count);
        foreach (var d in duplicates)
        {
            latest[(d.EntityId, d.MessageId)] = d.ExpiresAtMs;
        }

        var entity = new long[latest.Count];
        var messageId = new string[latest.Count];
        var expiresAt = new long[latest.Count];
        var i = 0;
        foreach (var ((entityId, id), expires) in latest)
        {
            (entity[i], messageId[i], expiresAt[i]) = (entityId, id, expires);
            i++;
        }

        Add(commands, PostgresSql.ContainerDb.UpsertDuplicates, Parameter(entity), Parameter(messageId), Parameter(expiresAt));
    }

    /// <summary>One row per (producer, send id), the first one seen kept: ON CONFLICT cannot touch a row twice in one statement.</summary>
    private static void AddSendRecords(NpgsqlBatch commands, List<SendRecord> sends)
    {
        var first = new Dictionary<(string ProducerId, long SendId), SendRecord>(sends.Count);
        foreach (var send in sends)
        {
            first.TryAdd((send.ProducerId, send.SendId), send);
        }

        var records = first.Values.ToList();
        Add(commands, PostgresSql.ContainerDb.InsertSendRecords,
            Parameter(records.Select(r => r.ProducerId).ToArray()),
            Parameter(records.Select(r => r.SendId).ToArray()),
            Parameter(records.Select(r => r.EntityId).ToArray()),
            Parameter(records.Select(r => SendRecord.Pack(r.SequenceNumbers)).ToArray()),
            Parameter(records.Select(r => r.AtMs).ToArray()));
    }

    private static NpgsqlBatchCommand Add(NpgsqlBatch commands, string sql, params NpgsqlParameter[] parameters)
    {
        var command = new NpgsqlBatchCommand(sql);
        command.Parameters.AddRange(parameters);
        commands.BatchCommands.Add(command);
        return command;
    }

    /// <summary>A positional parameter ($1, $2, ... in order of addition), typed from its CLR type.</summary>
    private static NpgsqlParameter<T> Parameter<T>(T value) => new() { TypedValue = value };
}
