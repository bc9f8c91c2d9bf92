using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

// The message cache of a paged queue (issue "Bounded memory"). Memory holds the head of each
// sub-queue (the queue and its dead-letter queue each) up to the cache budget, plus every locked, scheduled and deferred message; an active
// message arriving past the budget stays in the container database only. As receivers drain the
// head, the next messages are read back in sequence order, in batches, between two commits of the
// container (CommitQueue.ReadAsync), so what is read and what commits change in memory never cross.
internal sealed partial class QueueEntity
{
    /// <summary>
    /// Puts an active message that just became durable in its sub-queue: in memory when it fits the
    /// cache and nothing after the frontier is stored only, otherwise left in the database (counted)
    /// to be read back in order. Returns whether it is in memory.
    /// </summary>
    private bool AdmitLocked(SubQueueState sub, StoredMessage message)
    {
        // While a fan-out's implicit messages are on their way (held in memory whatever comes), an
        // arrival before them must not be left in the database: it would come after them.
        if (message.SequenceNumber > sub.Frontier
            && (sub.StoredCount > 0 || sub.TailPending || (OverBudget(ActiveBytesLocked(sub), message.PayloadSize) && _implicitReservedBytes == 0)))
        {
            sub.CountStored(message.SequenceNumber, message.PayloadSize);
            return false;
        }
        sub.Add(message);
        sub.Available.Add(message.SequenceNumber);
        if (sub.StoredCount == 0 && !sub.TailPending)
        {
            sub.Frontier = Math.Max(sub.Frontier, message.SequenceNumber);
        }
        if (message.ExpiresAtMs is { } expires && sub.Kind == SubQueue.Main)
        {
            _timeToLive.Enqueue(message, expires);
            SweepBy(expires);
        }
        return true;
    }

    /// <summary>
    /// Moves a dead-letter queue's frontier down to <paramref name="frontier"/>: its unlocked messages
    /// above it leave memory and are counted as stored, to be read back in order. Locked, settling and
    /// implicit ones stay (a read-back skips what memory holds, without counting it).
    /// </summary>
    private void LowerFrontierLocked(SubQueueState sub, long frontier)
    {
        foreach (var sequence in sub.Ordered.GetViewBetween(frontier + 1, long.MaxValue).ToList())
        {
            var message = sub.Messages[sequence];
            // An implicit message has no row to read it back from: it stays, as locked ones do.
            if (message.IsLocked || message.Settling || message.State != StoredMessageState.Active || message.Implicit)
            {
                continue;
            }
            sub.Remove(message);
            sub.CountStored(message.SequenceNumber, message.PayloadSize);
        }
        sub.Frontier = frontier;
    }

    /// <summary>Bytes of a sub-queue's messages in memory that count against its active budget: scheduled and deferred ones have budgets of their own.</summary>
    private long ActiveBytesLocked(SubQueueState sub) => sub.Kind == SubQueue.Main ? sub.SizeInBytes - _scheduledBytes - _deferredBytes : sub.SizeInBytes;

    /// <summary>Starts reading stored messages back once the cache is down to half its budget.</summary>
    private void MaybeRefillLocked(SubQueueState sub)
    {
        if ((sub.StoredCount <= 0 && !sub.TailPending) || sub.Refilling || _unloaded is not null
            || ActiveBytesLocked(sub) > _cacheBytes / 2 || OverBudget(ActiveBytesLocked(sub), 1))
        {
            return;
        }
        sub.Refilling = true;
        _ = RefillAsync(sub);
    }

    private async Task RefillAsync(SubQueueState sub)
    {
        var arrived = false;
        try
        {
            await _commits.ReadAsync(async database =>
            {
                long after, room;
                lock (_gate)
                {
                    after = sub.Frontier;
                    room = RoomFor(ActiveBytesLocked(sub));
                }
                var rows = await database.ReadActiveAsync(Id, sub.Kind, after, _options.MaxMessagesPerRefill, room, CopiesOf).ConfigureAwait(false);
                arrived = ApplyRefill(sub, rows);
            }).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The database is unreachable or the container closed: the next receive or sweep tries again.
        }
        finally
        {
            lock (_gate)
            {
                sub.Refilling = false;
            }
        }
        if (arrived)
        {
            sub.SignalArrived();
        }
    }

    /// <summary>Takes read-back rows into memory (they follow the frontier, in order). Returns whether any became available.</summary>
    private bool ApplyRefill(SubQueueState sub, IReadOnlyList<MessageRecord> rows)
    {
        // A read-back message that expired while it waited in the database expires when taken (TryTakeAsync).
        var arrived = false;
        var dangling = new List<MessageKey>();
        lock (_gate)
        {
            if (_unloaded is not null)
            {
                return false;
            }
            foreach (var row in rows)
            {
                sub.Frontier = Math.Max(sub.Frontier, row.SequenceNumber);
                if (sub.Messages.ContainsKey(row.SequenceNumber))
                {
                    // Already in memory (a scheduled message that came due and was written back as active): never counted as stored.
                    continue;
                }
                sub.UncountStored(row.SequenceNumber, row.PayloadSize);
                if (row.Payload is null)
                {
                    dangling.Add(new MessageKey(Id, row.SequenceNumber));
                    continue;
                }
                var message = StoredMessage.FromRecord(row, _main.DeliveredThrough);
                sub.Add(message);
                sub.Available.Add(message.SequenceNumber);
                if (message.ExpiresAtMs is { } expires && sub.Kind == SubQueue.Main)
                {
                    _timeToLive.Enqueue(message, expires);
                    SweepBy(expires);
                }
                arrived = true;
            }
            if (rows.Count == 0 && sub.StoredCount != 0 && !sub.TailPending)
            {
                // Read between two commits, nothing follows the frontier: the count drifted; the database is right.
                sub.StoredCount = 0;
                sub.StoredBytes = 0;
            }
        }
        DeleteDangling(dangling);
        return arrived;
    }

    /// <summary>
    /// Deletes subscription rows whose topic copy is gone: an older version could crash between
    /// deleting a copy and its last pointer. Nothing can be delivered from them.
    /// </summary>
    private void DeleteDangling(List<MessageKey> dangling)
    {
        if (dangling.Count > 0)
        {
            _ = _commits.CommitAsync(batch => batch.Deletes.AddRange(dangling))
                .ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.OnlyOnFaulted);
        }
    }

    /// <summary>
    /// Counts the stored tail of a queue just taken over, while it serves: a deep queue's count takes
    /// seconds, which must not delay its first message. It counts in order, a chunk of sequence
    /// numbers at a time, each between two commits (CommitQueue.ReadAsync), from wherever the
    /// frontier is: what was read back meanwhile is in memory, what arrived after the load is
    /// counted as it arrives, and the part still to count is on nobody's count (SubQueueState.IsCounted).
    /// Counted outside the commit loop, a message read back and completed before the count looked
    /// would be taken off the count and not found by it: a stored message the queue would never read.
    /// Sends wait for the whole count: MaxSizeInMegabytes needs the total.
    /// </summary>
    private async Task CountTailAsync(SubQueueState sub)
    {
        var done = false;
        while (!done)
        {
            try
            {
                await _commits.ReadAsync(async database =>
                {
                    long after, through;
                    lock (_gate)
                    {
                        after = Math.Max(sub.CountedThrough, sub.Frontier);
                        through = Math.Min(sub.CountedThrough + _options.TailCountStep, sub.PendingThrough);
                    }
                    var (count, bytes) = after < through ? await database.CountActiveAsync(Id, sub.Kind, after, through).ConfigureAwait(false) : (0, 0);
                    lock (_gate)
                    {
                        sub.StoredCount += count;
                        sub.StoredBytes += bytes;
                        sub.CountedThrough = through;
                        if (through >= sub.PendingThrough)
                        {
                            sub.TailPending = false;
                            done = true;
                        }
                        MaybeRefillLocked(sub);
                    }
                }).ConfigureAwait(false);
            }
            catch (Exception) when (_unloaded is null)
            {
                // The database did not answer: try again shortly.
                await Task.Delay(_options.SweepInterval, _time).ConfigureAwait(false);
            }
            catch (Exception)
            {
                break;
            }
        }
        lock (_gate)
        {
            if (_unloaded is not null || (!_main.TailPending && !_deadLetter.TailPending))
            {
                _tailsCounted.TrySetResult();
            }
        }
    }

    /// <summary>
    /// Browses from a sequence number on. When every message of the sub-queue is in memory, from
    /// memory; otherwise from the database (any state, in order), with what memory knows newer (a
    /// delivery count, a scheduled message that came due) taking the row's place.
    /// </summary>
    public async Task<IReadOnlyList<ReceivedMessage>> PeekAsync(bool deadLetter, long fromSequenceNumber, int maxMessages)
    {
        var sub = SubQueueOf(deadLetter);
        lock (_gate)
        {
            ThrowIfNotServing();
            if (sub.StoredCount <= 0 && !sub.TailPending && (deadLetter || HeldStoredCount <= 0))
            {
                return Peek(deadLetter, fromSequenceNumber, maxMessages);
            }
        }
        var rows = await _commits.Database.ReadFromAsync(Id, sub.Kind, Math.Max(fromSequenceNumber - 1, 0), maxMessages, _options.MaxReceiveResponseBytes, CopiesOf).ConfigureAwait(false);
        var result = new List<ReceivedMessage>(rows.Count);
        var bytes = 0L;
        lock (_gate)
        {
            foreach (var row in rows)
            {
                var message = sub.Messages.GetValueOrDefault(row.SequenceNumber) ?? (row.Payload is null ? null : StoredMessage.FromRecord(row, _main.DeliveredThrough));
                if (message is null)
                {
                    continue;
                }
                var size = ResponseSizeOf(message);
                if (result.Count > 0 && bytes + size > _options.MaxReceiveResponseBytes)
                {
                    break;
                }
                bytes += size;
                result.Add(ToReceived(message, withLock: false));
            }
        }
        return result;
    }
}
