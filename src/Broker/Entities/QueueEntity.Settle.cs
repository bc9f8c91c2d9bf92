using Farm.Broker.Telemetry;
using Farm.ContainerStore.Containers;
using Google.Protobuf;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

internal sealed partial class QueueEntity
{
    /// <summary>
    /// Settles locked messages. Each settlement gets its own result (a lost lock fails only that
    /// one); the writes of all of them share one transaction and are acknowledged after it. With
    /// <paramref name="repeat"/> (sent again after a lost answer), a lock settled the same way a
    /// moment ago is answered as the first settlement was (<see cref="SettledLocks"/>).
    /// </summary>
    public async Task<IReadOnlyList<SettleResult>> SettleAsync(bool deadLetter, IReadOnlyList<Settlement> settlements, bool repeat = false)
    {
        var now = NowMs;
        var results = new SettleResult[settlements.Count];
        var writes = new List<PendingChange>();
        var writeIndexes = new List<int>();
        var arrived = false;
        // Settled again (a repeat whose first answer was lost): the first one's outcome, by index.
        List<(int Index, Task<BrokerException?> Outcome)>? repeats = null;
        // This call's own commit, for repeats of its settlements that come while it runs.
        var outcome = new TaskCompletionSource<BrokerException?>(TaskCreationOptions.RunContinuationsAsynchronously);
        // The stamps of this call's settlements kept in _settledLocks that wait for its commit: the first and the last.
        long? firstAwaiting = null;
        long lastAwaiting = 0;
        lock (_gate)
        {
            ThrowIfDeleted();
            var sub = SubQueueOf(deadLetter);
            for (var i = 0; i < settlements.Count; i++)
            {
                var settlement = settlements[i];
                results[i] = new SettleResult { LockToken = settlement.LockToken, ErrorCode = FarmErrorCode.Unspecified };
                if (settlement.Disposition == Disposition.Unspecified)
                {
                    // Zero used to mean COMPLETE: a client that forgot the field completed messages it meant to keep.
                    Fail(results[i], FarmErrors.Invalid($"Settlement {i} has no disposition: set COMPLETE, ABANDON, DEAD_LETTER or DEFER."));
                    continue;
                }
                if (!Guid.TryParse(settlement.LockToken, out var token))
                {
                    Fail(results[i], FarmErrors.LockLost(PathOf(deadLetter), settlement.LockToken));
                    continue;
                }
                if (!_locks.TryGetValue(token, out var message)
                    || message.Settling
                    || !sub.Messages.ContainsKey(message.SequenceNumber))
                {
                    if (repeat && _settledLocks.Find(token) is { } earlier && earlier.Disposition == settlement.Disposition)
                    {
                        (repeats ??= []).Add((i, earlier.Outcome));
                    }
                    else if (repeat && SettledElsewhereLocked(sub, deadLetter, token, settlement.Disposition, now))
                    {
                        // Done by the owner before this one, whose answer was lost with it: the
                        // result stays a success.
                    }
                    else
                    {
                        Fail(results[i], FarmErrors.LockLost(PathOf(deadLetter), settlement.LockToken));
                    }
                    continue;
                }
                if (message.LockedUntilMs <= now)
                {
                    arrived |= ReleaseLockLocked(message, writes);
                    Fail(results[i], FarmErrors.LockLost(PathOf(deadLetter), settlement.LockToken));
                    continue;
                }
                var modified = WithProperties(message, settlement.PropertiesToModify);
                var before = writes.Count;
                var lockedUntil = message.LockedUntilMs;
                switch (settlement.Disposition)
                {
                    case Disposition.Complete:
                        CompleteLocked(message, sub, writes);
                        break;
                    case Disposition.Abandon when settlement.NotDelivered:
                        // Still in a closed receiver's prefetch buffer: the application never saw it.
                        ReleaseUndeliveredLocked(message, writes);
                        break;
                    case Disposition.Abandon when modified is not null:
                        AbandonModifiedLocked(message, modified, writes);
                        CountersOf(deadLetter).AddAbandoned();
                        break;
                    case Disposition.Abandon:
                        arrived |= ReleaseLockLocked(message, writes);
                        CountersOf(deadLetter).AddAbandoned();
                        break;
                    case Disposition.DeadLetter when deadLetter:
                        Fail(results[i], FarmErrors.Invalid("A message in a dead-letter queue cannot be dead-lettered again."));
                        continue;
                    case Disposition.DeadLetter:
                        _locks.Remove(token);
                        message.LockToken = null;
                        DeadLetterLocked(message,
                            string.IsNullOrEmpty(settlement.DeadLetterReason) ? "DeadLetteredByReceiver" : settlement.DeadLetterReason,
                            NullIfEmpty(settlement.DeadLetterErrorDescription), modified, writes);
                        break;
                    case Disposition.Defer when deadLetter:
                        Fail(results[i], FarmErrors.Invalid("Messages in a dead-letter queue cannot be deferred."));
                        continue;
                    case Disposition.Defer:
                        _locks.Remove(token);
                        message.LockToken = null;
                        ModifyLocked(message, modified, StoredMessageState.Deferred, writes);
                        break;
                    default:
                        Fail(results[i], FarmErrors.Invalid($"Unknown disposition {settlement.Disposition}."));
                        continue;
                }
                var wrote = writes.Count > before;
                for (var w = before; w < writes.Count; w++)
                {
                    writeIndexes.Add(i);
                }
                // Remembered, so the same settlement sent again is answered as this one is.
                var stamp = _settledLocks.Add(token, settlement.Disposition, awaitsCommit: wrote, lockedUntil, now);
                if (wrote)
                {
                    firstAwaiting ??= stamp;
                    lastAwaiting = stamp;
                }
            }
            if (firstAwaiting is { } first)
            {
                _settledLocks.AwaitCommit(first, lastAwaiting, outcome.Task);
            }
        }
        if (arrived)
        {
            _main.SignalArrived();
        }
        if (writes.Count > 0)
        {
            var committed = false;
            BrokerException? failure = null;
            try
            {
                await _commits.CommitAsync(
                    batch => writes.ForEach(w => w.Write(batch)),
                    onCommitted: () => writes.ForEach(w => w.OnCommitted()),
                    onFailed: e => writes.ForEach(w => w.OnFailed(e))).ConfigureAwait(false);
                committed = true;
                if (firstAwaiting is { } first)
                {
                    lock (_gate)
                    {
                        _settledLocks.Committed(first);
                    }
                }
            }
            catch (BrokerException e)
            {
                failure = e;
                foreach (var index in writeIndexes)
                {
                    Fail(results[index], e);
                }
            }
            finally
            {
                if (!committed)
                {
                    // Failed otherwise than a BrokerException: repeats waiting on it retry, as after a store failure.
                    failure ??= FarmErrors.StoreUnavailable("Settling failed.");
                    // Not done: a repeat from now on is told its lock is gone, not that it was settled.
                    if (firstAwaiting is { } first)
                    {
                        lock (_gate)
                        {
                            _settledLocks.Failed(first);
                        }
                    }
                }
                outcome.SetResult(failure);
            }
        }
        if (repeats is not null)
        {
            foreach (var (index, earlier) in repeats)
            {
                if (await earlier.ConfigureAwait(false) is { } failed)
                {
                    Fail(results[index], failed);
                }
            }
        }
        return results;
    }

    /// <summary>
    /// Takes the locks of messages a send completes in its own transaction ("send via"): all of them
    /// or, when one is not held (expired, settled, never there), none, failing with MESSAGE_LOCK_LOST.
    /// Until the send commits they are settling, as a completion waiting for its commit is; a send
    /// that fails before committing gives the locks back (<see cref="CommitsWithSend.GiveBack"/>).
    /// </summary>
    public CommitsWithSend PrepareCompletions(bool deadLetter, IReadOnlyList<string> lockTokens)
    {
        if (lockTokens.Count == 0)
        {
            throw FarmErrors.Invalid("A send that completes messages needs at least one lock token.");
        }
        var now = NowMs;
        var writes = new List<PendingChange>();
        var taken = new List<(Guid Token, StoredMessage Message)>();
        lock (_gate)
        {
            ThrowIfDeleted();
            var sub = SubQueueOf(deadLetter);
            foreach (var lockToken in lockTokens.Distinct())
            {
                if (!Guid.TryParse(lockToken, out var token)
                    || !_locks.TryGetValue(token, out var message)
                    || message.Settling
                    || !sub.Messages.ContainsKey(message.SequenceNumber)
                    || message.LockedUntilMs <= now)
                {
                    throw FarmErrors.LockLost(PathOf(deadLetter), lockToken);
                }
                taken.Add((token, message));
            }
            foreach (var (_, message) in taken)
            {
                CompleteLocked(message, sub, writes);
            }
        }
        return new CommitsWithSend(
            _commits,
            batch => writes.ForEach(w => w.Write(batch)),
            () => writes.ForEach(w => w.OnCommitted()),
            e => writes.ForEach(w => w.OnFailed(e)),
            () => GiveLocksBack(taken));
    }

    /// <summary>Locks taken for a send that did not commit: held again, until they run out as they would have.</summary>
    private void GiveLocksBack(List<(Guid Token, StoredMessage Message)> taken)
    {
        lock (_gate)
        {
            foreach (var (token, message) in taken)
            {
                message.Settling = false;
                if (message.LockToken is null && !_locks.ContainsKey(token) && IsInMemory(SubQueueOf(message.SubQueue == SubQueue.DeadLetter), message))
                {
                    message.LockToken = token;
                    _locks[token] = message;
                    // Its expiry may have been passed over while it was settling: the sweep looks at it again.
                    _lockExpiry.Enqueue(message, message.LockedUntilMs);
                }
            }
        }
    }

    private static void Fail(SettleResult result, BrokerException error)
    {
        result.ErrorCode = error.Code;
        result.ErrorMessage = error.Message;
    }

    private static string? NullIfEmpty(string s) => string.IsNullOrEmpty(s) ? null : s;

    /// <summary>A copy of the message with the given properties merged in, or null when there are none.</summary>
    private static Message? WithProperties(StoredMessage stored, Google.Protobuf.Collections.MapField<string, PropertyValue> properties)
    {
        if (properties.Count == 0)
        {
            return null;
        }
        var copy = stored.ParseMessage();
        foreach (var (key, value) in properties)
        {
            copy.ApplicationProperties[key] = value;
        }
        return copy;
    }

    /// <summary>A message that stays in its sub-queue gets a new payload: the sub-queue's size follows.</summary>
    private void ResizeAndReplacePayloadLocked(StoredMessage message, byte[] payload)
    {
        SubQueueOf(message.SubQueue == SubQueue.DeadLetter).Resize(payload.Length - message.PayloadSize);
        ReplacePayloadLocked(message, payload);
    }

    private void CompleteLocked(StoredMessage message, SubQueueState sub, List<PendingChange> writes)
    {
        _locks.Remove(message.LockToken!.Value);
        message.LockToken = null;
        message.Settling = true;
        writes.Add(new PendingChange(
            batch => WriteRemoval(batch, message),
            () =>
            {
                lock (_gate)
                {
                    RemoveStored(sub, message);
                }
                CountersOf(message.SubQueue == SubQueue.DeadLetter).AddCompleted();
            },
            _ => Unsettle(message)));
    }

    /// <summary>Writes a new state and/or payload for a message that stays in its sub-queue.</summary>
    private void ModifyLocked(StoredMessage message, Message? modified, StoredMessageState state, List<PendingChange> writes)
    {
        var payload = modified?.ToPayload();
        var previousState = message.State;
        message.State = state;
        if (payload is not null)
        {
            ResizeAndReplacePayloadLocked(message, payload);
        }
        var update = message.ToUpdate(Id, payload);
        writes.Add(new PendingChange(
            batch => batch.Updates.Add(update),
            () =>
            {
                lock (_gate)
                {
                    RowCommittedLocked(message);
                    if (state == StoredMessageState.Deferred)
                    {
                        NoteDeferredLocked(message);
                    }
                }
            },
            _ =>
            {
                lock (_gate)
                {
                    message.State = previousState;
                }
                Unsettle(message);
            }));
    }

    /// <summary>
    /// Abandon with modified properties. The message stays out of receivers' reach until the new
    /// payload is durable, and only then is its lock released: the update carries the delivery count
    /// as of now, so a receive that took the message in between (raising the count and writing it)
    /// could otherwise be overwritten by this older count. If the write fails, the lock is released
    /// all the same, with the message unmodified (as an abandon without properties).
    /// </summary>
    private void AbandonModifiedLocked(StoredMessage message, Message modified, List<PendingChange> writes)
    {
        _locks.Remove(message.LockToken!.Value);
        message.LockToken = null;
        message.Settling = true;
        var payload = modified.ToPayload();
        var update = message.ToUpdate(Id, payload);
        writes.Add(new PendingChange(
            batch => batch.Updates.Add(update),
            () =>
            {
                lock (_gate)
                {
                    ResizeAndReplacePayloadLocked(message, payload);
                }
                ReleaseAfterSettling(message);
            },
            _ => ReleaseAfterSettling(message)));
    }

    /// <summary>Ends a settlement that keeps the message: its lock goes as on an abandon.</summary>
    private void ReleaseAfterSettling(StoredMessage message)
    {
        var changes = new List<PendingChange>();
        bool arrived;
        lock (_gate)
        {
            message.Settling = false;
            if (!SubQueueOf(message.SubQueue == SubQueue.DeadLetter).Messages.ContainsKey(message.SequenceNumber))
            {
                return;
            }
            arrived = ReleaseLockLocked(message, changes);
        }
        Flush(changes);
        if (arrived)
        {
            SubQueueOf(message.SubQueue == SubQueue.DeadLetter).SignalArrived();
        }
    }

    /// <summary>Extends peek-locks by the queue's LockDuration from now; returns the new expiries.</summary>
    /// <summary>
    /// Extends peek-locks by the queue's LockDuration from now. One result per token, in order: a
    /// token that is not held (expired, settled, unknown) fails alone, the others are renewed.
    /// </summary>
    public IReadOnlyList<RenewLockResult> RenewLocks(bool deadLetter, IReadOnlyList<string> lockTokens)
    {
        var now = NowMs;
        var lockDuration = (long)Settings.LockDuration.TotalMilliseconds;
        var results = new List<RenewLockResult>(lockTokens.Count);
        lock (_gate)
        {
            ThrowIfDeleted();
            var sub = SubQueueOf(deadLetter);
            foreach (var lockToken in lockTokens)
            {
                var result = new RenewLockResult { LockToken = lockToken };
                results.Add(result);
                if (!Guid.TryParse(lockToken, out var token)
                    || !_locks.TryGetValue(token, out var message)
                    || message.Settling
                    || message.LockedUntilMs <= now
                    || !sub.Messages.ContainsKey(message.SequenceNumber))
                {
                    var lost = FarmErrors.LockLost(PathOf(deadLetter), lockToken);
                    result.ErrorCode = lost.Code;
                    result.ErrorMessage = lost.Message;
                    continue;
                }
                message.LockedUntilMs = now + lockDuration;
                result.LockedUntil = ToTimestamp(message.LockedUntilMs);
            }
        }
        return results;
    }

    /// <summary>
    /// Whether a settlement sent again with a lock token this node never handed out (another owner
    /// did, before a failover) was done: the token names a message (<see cref="LockTokens.TryRead"/>)
    /// whose lock would still hold, and that message is where the settlement puts it. While its lock
    /// holds, only its receiver could have settled it:
    /// <list type="bullet">
    /// <item>Complete: the message is gone from the sub-queue (not judged when it could be past the
    /// frontier, in the database only);</item>
    /// <item>DeadLetter (from the main sub-queue): it is gone from it and in the dead-letter queue's memory;</item>
    /// <item>Defer: it is in the sub-queue, deferred and unlocked;</item>
    /// <item>Abandon: it is in the sub-queue, active and unlocked (to be received again).</item>
    /// </list>
    /// A message the failover redelivered to another receiver, which settled it the same way before
    /// this repeat came, is answered done too: the outcome is the one asked for, as at-least-once
    /// allows. Anything else (the message somewhere the settlement would not have put it, or not in
    /// memory) is not known, and the repeat loses its lock.
    /// </summary>
    private bool SettledElsewhereLocked(SubQueueState sub, bool deadLetter, Guid token, Disposition disposition, long now)
    {
        if (!LockTokens.TryRead(token, now, out var sequence, out var lockedUntil) || lockedUntil < now || sequence >= _nextSequence)
        {
            return false;
        }
        sub.Messages.TryGetValue(sequence, out var message);
        switch (disposition)
        {
            case Disposition.Complete:
                var maybeStoredOnly = sequence > sub.Frontier && (sub.StoredCount > 0 || sub.TailPending);
                return message is null && !maybeStoredOnly;
            case Disposition.DeadLetter:
                return !deadLetter && message is null && _deadLetter.Messages.ContainsKey(sequence);
            case Disposition.Defer:
                return message is { State: StoredMessageState.Deferred, IsLocked: false, Settling: false };
            case Disposition.Abandon:
                return message is { State: StoredMessageState.Active, IsLocked: false, Settling: false };
            default:
                return false;
        }
    }
}
