using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

// Scheduled and deferred messages past the message cache (issue "Bounded memory"). Each kind keeps
// up to the cache's bytes in memory; the rest stay in the container database only, counted.
//
// Scheduled: memory holds exactly those whose (due time, sequence number) comes before
// _scheduledFrom; every one in the database only comes at or after it. A new scheduled message
// after that mark stays in the database; one before it goes to memory, and when memory is over
// budget the last one to come due leaves it (the mark moves down to it). As they come due the next
// ones are read back in due-time order through the index messages_by_due_time, between two commits.
//
// Deferred: memory is a cache of them. A deferred message that does not fit stays in the database;
// receiving it by sequence number reads it back by key, between two commits.
internal sealed partial class QueueEntity
{
    private static readonly (long At, long Sequence) NothingStored = (long.MaxValue, long.MaxValue);

    private (long At, long Sequence) _scheduledFrom = NothingStored;
    private long _scheduledStoredCount;
    private long _scheduledStoredBytes;

    /// <summary>Scheduled messages in memory that have not come due, by due time: the last one is the one to leave memory first.</summary>
    private readonly SortedDictionary<(long At, long Sequence), StoredMessage> _scheduledInMemory = [];
    private long _scheduledBytes;
    private bool _scheduledRefilling;

    /// <summary>Cancelled scheduled messages in the database only, whose delete has not committed: a read-back skips them.</summary>
    private readonly HashSet<long> _cancellingStored = [];

    private long _deferredStoredCount;
    private long _deferredStoredBytes;

    /// <summary>Deferred messages in memory (sequence number, bytes); entries of messages no longer deferred are dropped when met.</summary>
    private readonly SortedDictionary<long, int> _deferredInMemory = [];
    private long _deferredBytes;

    /// <summary>Scheduled and deferred messages in the database only, and their bytes.</summary>
    private long HeldStoredCount => _scheduledStoredCount + _deferredStoredCount;

    private long HeldStoredBytes => _scheduledStoredBytes + _deferredStoredBytes;

    private static (long At, long Sequence) KeyOf(StoredMessage message) => (message.ScheduledAtMs ?? 0, message.SequenceNumber);

    private void LoadHeldLocked(HeldTail? held)
    {
        if (held is null)
        {
            return;
        }
        _scheduledFrom = held.ScheduledCount > 0 ? (held.ScheduledFromAtMs, held.ScheduledFromSequence) : NothingStored;
        _scheduledStoredCount = held.ScheduledCount;
        _scheduledStoredBytes = held.ScheduledBytes;
        _deferredStoredCount = held.DeferredCount;
        _deferredStoredBytes = held.DeferredBytes;
    }

    /// <summary>A scheduled message that just became durable (or was loaded): in memory when it comes due before the database's first.</summary>
    private void AdmitScheduledLocked(StoredMessage message)
    {
        var key = KeyOf(message);
        if (key.CompareTo(_scheduledFrom) >= 0)
        {
            _scheduledStoredCount++;
            _scheduledStoredBytes += message.PayloadSize;
            return;
        }
        KeepScheduledLocked(message);
        while (OverBudget(_scheduledBytes) && _scheduledInMemory.Count > 1)
        {
            // The last to come due leaves memory; its row is durable already.
            var (lastKey, last) = _scheduledInMemory.Last();
            _scheduledInMemory.Remove(lastKey);
            _scheduledBytes -= last.PayloadSize;
            _main.Remove(last);
            _scheduledStoredCount++;
            _scheduledStoredBytes += last.PayloadSize;
            _scheduledFrom = lastKey;
        }
    }

    private void KeepScheduledLocked(StoredMessage message)
    {
        _main.Add(message);
        _scheduled.Enqueue(message, message.ScheduledAtMs!.Value);
        SweepBy(message.ScheduledAtMs!.Value);
        _scheduledInMemory[KeyOf(message)] = message;
        _scheduledBytes += message.PayloadSize;
        if (message.ExpiresAtMs is { } expires)
        {
            _timeToLive.Enqueue(message, expires);
            SweepBy(expires);
        }
    }

    /// <summary>A scheduled message in memory came due, was cancelled or left: it no longer counts against the scheduled budget.</summary>
    private void ForgetScheduledLocked(StoredMessage message)
    {
        if (_scheduledInMemory.Remove(KeyOf(message)))
        {
            _scheduledBytes -= message.PayloadSize;
        }
    }

    private void MaybeRefillScheduledLocked()
    {
        if (_scheduledStoredCount <= 0 || _scheduledRefilling || _unloaded is not null || _scheduledBytes > _cacheBytes / 2 || OverBudget(_scheduledBytes, 1))
        {
            return;
        }
        _scheduledRefilling = true;
        _ = RefillScheduledAsync();
    }

    private async Task RefillScheduledAsync()
    {
        try
        {
            await _commits.ReadAsync(async database =>
            {
                (long At, long Sequence) from;
                long room;
                lock (_gate)
                {
                    from = _scheduledFrom;
                    room = RoomFor(_scheduledBytes);
                }
                var rows = await database.ReadScheduledAsync(Id, from.At, from.Sequence, _options.MaxMessagesPerRefill, room, CopiesOf).ConfigureAwait(false);
                ApplyScheduledRefill(rows);
            }).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The database is unreachable or the container closed: the next sweep tries again.
        }
        finally
        {
            lock (_gate)
            {
                _scheduledRefilling = false;
            }
        }
    }

    private void ApplyScheduledRefill(IReadOnlyList<MessageRecord> rows)
    {
        var dangling = new List<MessageKey>();
        lock (_gate)
        {
            if (_unloaded is not null)
            {
                return;
            }
            foreach (var row in rows)
            {
                if (_main.Messages.ContainsKey(row.SequenceNumber) || _cancellingStored.Contains(row.SequenceNumber))
                {
                    continue;
                }
                _scheduledStoredCount--;
                _scheduledStoredBytes -= row.PayloadSize;
                if (row.Payload is null)
                {
                    dangling.Add(new MessageKey(Id, row.SequenceNumber));
                    continue;
                }
                KeepScheduledLocked(StoredMessage.FromRecord(row, _main.DeliveredThrough));
            }
            if (rows.Count == 0 || _scheduledStoredCount <= 0)
            {
                // Read between two commits and nothing is left after the mark: the count drifted if not zero; the database is right.
                _scheduledFrom = NothingStored;
                _scheduledStoredCount = 0;
                _scheduledStoredBytes = 0;
            }
            else
            {
                _scheduledFrom = (rows[^1].ScheduledAtMs ?? 0, rows[^1].SequenceNumber + 1);
            }
        }
        DeleteDangling(dangling);
    }

    /// <summary>
    /// The scheduled messages among <paramref name="sequenceNumbers"/> that are in the database only and
    /// not due yet, read by key (empty at once when none is stored only).
    /// </summary>
    private async Task<IReadOnlyList<MessageRecord>> FindStoredScheduledAsync(IReadOnlyCollection<long> sequenceNumbers, long now)
    {
        List<long> missing;
        lock (_gate)
        {
            if (_scheduledStoredCount <= 0)
            {
                return [];
            }
            missing = sequenceNumbers.Where(s => !_main.Messages.ContainsKey(s)).Distinct().ToList();
        }
        if (missing.Count == 0)
        {
            return [];
        }
        var rows = await _commits.Database.ReadByKeyAsync(Id, missing, CopiesOf).ConfigureAwait(false);
        return [.. rows.Where(r => r.SubQueue == SubQueue.Main && r.State == StoredMessageState.Scheduled && r.ScheduledAtMs > now)];
    }

    /// <summary>
    /// Deletes scheduled messages that are in the database only. Under <see cref="_gate"/>, the caller
    /// checked they are still not in memory; a read-back skips them until the delete committed.
    /// </summary>
    private Task DeleteStoredScheduledLocked(IReadOnlyList<MessageRecord> rows)
    {
        foreach (var row in rows)
        {
            _cancellingStored.Add(row.SequenceNumber);
        }
        return _commits.CommitAsync(
            batch => batch.Deletes.AddRange(rows.Select(r => new MessageKey(Id, r.SequenceNumber))),
            onCommitted: () =>
            {
                lock (_gate)
                {
                    foreach (var row in rows)
                    {
                        _cancellingStored.Remove(row.SequenceNumber);
                        _scheduledStoredCount--;
                        _scheduledStoredBytes -= row.PayloadSize;
                        MessageLeftLocked(row.SequenceNumber, row.StoredAlone, row.PayloadSize);
                    }
                }
            },
            onFailed: _ =>
            {
                lock (_gate)
                {
                    foreach (var row in rows)
                    {
                        _cancellingStored.Remove(row.SequenceNumber);
                        // A read-back may have passed it meanwhile: read from it again.
                        var key = (row.ScheduledAtMs ?? 0, row.SequenceNumber);
                        if (key.CompareTo(_scheduledFrom) < 0)
                        {
                            _scheduledFrom = key;
                        }
                    }
                }
            });
    }

    /// <summary>A message became deferred (its update committed, or it was loaded or read back as one).</summary>
    private void NoteDeferredLocked(StoredMessage message)
    {
        if (_deferredInMemory.TryAdd(message.SequenceNumber, message.PayloadSize))
        {
            _deferredBytes += message.PayloadSize;
        }
        EvictDeferredLocked();
    }

    /// <summary>Deferred messages past the budget leave memory, the highest sequence numbers first; a locked one stays.</summary>
    private void EvictDeferredLocked()
    {
        if (!OverBudget(_deferredBytes))
        {
            return;
        }
        foreach (var (sequence, size) in _deferredInMemory.Reverse().ToList())
        {
            if (!OverBudget(_deferredBytes))
            {
                return;
            }
            _main.Messages.TryGetValue(sequence, out var message);
            if (message is { State: StoredMessageState.Deferred, SubQueue: SubQueue.Main } && (message.IsLocked || message.Settling))
            {
                continue;
            }
            _deferredInMemory.Remove(sequence);
            _deferredBytes -= size;
            if (message is { State: StoredMessageState.Deferred, SubQueue: SubQueue.Main })
            {
                _main.Remove(message);
                _deferredStoredCount++;
                _deferredStoredBytes += size;
            }
        }
    }

    /// <summary>A deferred message left memory for good (received and completed, dead-lettered, expired).</summary>
    private void ForgetDeferredLocked(StoredMessage message)
    {
        if (_deferredInMemory.Remove(message.SequenceNumber, out var size))
        {
            _deferredBytes -= size;
        }
    }

    /// <summary>
    /// Reads deferred messages that are in the database only back into memory, by key, between two
    /// commits; then runs <paramref name="take"/> under the lock in the same step, so nothing evicts
    /// them in between.
    /// </summary>
    private async Task<T> WithStoredDeferredAsync<T>(IReadOnlyCollection<long> sequenceNumbers, Func<T> take)
    {
        List<long> missing;
        lock (_gate)
        {
            missing = _deferredStoredCount > 0 ? sequenceNumbers.Where(s => !_main.Messages.ContainsKey(s)).Distinct().ToList() : [];
            if (missing.Count == 0)
            {
                return take();
            }
        }
        T result = default!;
        await _commits.ReadAsync(async database =>
        {
            var rows = await database.ReadByKeyAsync(Id, missing, CopiesOf).ConfigureAwait(false);
            lock (_gate)
            {
                foreach (var row in rows)
                {
                    if (row is { SubQueue: SubQueue.Main, State: StoredMessageState.Deferred, Payload: not null } && !_main.Messages.ContainsKey(row.SequenceNumber))
                    {
                        var message = StoredMessage.FromRecord(row, _main.DeliveredThrough);
                        _main.Add(message);
                        _deferredStoredCount--;
                        _deferredStoredBytes -= row.PayloadSize;
                        if (_deferredInMemory.TryAdd(row.SequenceNumber, row.PayloadSize))
                        {
                            _deferredBytes += row.PayloadSize;
                        }
                        if (message.ExpiresAtMs is { } expires)
                        {
                            _timeToLive.Enqueue(message, expires);
                            SweepBy(expires);
                        }
                    }
                }
                result = take();
            }
        }).ConfigureAwait(false);
        return result;
    }
}
