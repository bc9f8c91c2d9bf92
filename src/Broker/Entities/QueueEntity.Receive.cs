using Farm.Broker.Telemetry;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

internal sealed partial class QueueEntity
{
    /// <summary>
    /// Takes up to <paramref name="maxMessages"/> messages, waiting up to <paramref name="maxWait"/>
    /// for the first. PeekLock raises each message's DeliveryCount durably before handing it out,
    /// so a crash cannot hide a delivery; ReceiveAndDelete deletes durably before handing out, so a
    /// message is never delivered twice.
    /// </summary>
    public async Task<IReadOnlyList<ReceivedMessage>> ReceiveAsync(bool deadLetter, ReceiveMode mode, int maxMessages, TimeSpan maxWait, CancellationToken cancellationToken)
    {
        maxMessages = Math.Clamp(maxMessages, 1, _options.MaxMessagesPerReceive);
        var deadline = _time.GetUtcNow() + maxWait;
        var sub = SubQueueOf(deadLetter);
        while (true)
        {
            // Take the wake-up signal before looking, so an arrival in between is not missed.
            var arrived = sub.WhenArrived;
            var received = await TryTakeAsync(deadLetter, mode, maxMessages).ConfigureAwait(false);
            if (received.Count > 0)
            {
                return received;
            }
            var remaining = deadline - _time.GetUtcNow();
            if (remaining <= TimeSpan.Zero)
            {
                return received;
            }
            // Wake on arrival or at the deadline. Expired locks and due scheduled messages arrive
            // through the container's sweep (every SweepInterval), which signals them: an idle
            // receiver costs nothing until then, however many entities the node serves.
            using var napCancel = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            var napTask = Task.Delay(remaining, _time, napCancel.Token);
            var waitingPeekLock = mode == ReceiveMode.PeekLock && !deadLetter;
            if (waitingPeekLock)
            {
                // Sends meanwhile may count these deliveries in their insert (PreCountBudgetLocked).
                lock (_gate)
                {
                    sub.WaitingPeekLockCredit += maxMessages;
                }
            }
            try
            {
                await Task.WhenAny(arrived, napTask).ConfigureAwait(false);
            }
            finally
            {
                if (waitingPeekLock)
                {
                    lock (_gate)
                    {
                        sub.WaitingPeekLockCredit -= maxMessages;
                    }
                }
            }
            napCancel.Cancel();
            cancellationToken.ThrowIfCancellationRequested();
        }
    }

    /// <summary>
    /// A receive stream's look: takes up to <paramref name="maxMessages"/> messages at once, or,
    /// when there are none, leaves <paramref name="waiter"/> armed and registered with the sub-queue
    /// (before the look, so an arrival in between is not missed) and returns empty. The stream then
    /// awaits the waiter and calls <see cref="EndWait"/>. The waiter wakes at an arrival, at the
    /// sweep after <paramref name="maxWait"/>, or when the stream wakes it (a drain, the call's end).
    /// With <paramref name="stored"/> each delivery carries its stored bytes
    /// (<see cref="ReceivedMessage.StoredMessage"/>) instead of a parsed message: what a stream writes
    /// as they are (<see cref="Farm.Contracts.StoredDeliveries"/>).
    /// </summary>
    public Task<IReadOnlyList<ReceivedMessage>> TakeOrArm(bool deadLetter, ReceiveMode mode, int maxMessages, ReceiveWaiter waiter, TimeSpan maxWait, bool stored = false)
    {
        maxMessages = Math.Clamp(maxMessages, 1, _options.MaxMessagesPerReceive);
        var sub = SubQueueOf(deadLetter);
        waiter.Arm(NowMs + (long)maxWait.TotalMilliseconds);
        sub.Register(waiter);
        var taking = TryTakeAsync(deadLetter, mode, maxMessages, stored);
        if (taking.IsCompletedSuccessfully && taking.Result.Count == 0)
        {
            if (mode == ReceiveMode.PeekLock && !deadLetter)
            {
                // Sends meanwhile may count these deliveries in their insert (PreCountBudgetLocked).
                lock (_gate)
                {
                    waiter.WaitingCredit = maxMessages;
                    sub.WaitingPeekLockCredit += maxMessages;
                }
            }
            return taking;
        }
        // Took messages (or failed): no wait follows.
        sub.Unregister(waiter);
        return taking;
    }

    /// <summary>After a wait <see cref="TakeOrArm"/> left armed: off the sub-queue's list, its credit no longer waiting.</summary>
    public void EndWait(bool deadLetter, ReceiveWaiter waiter)
    {
        var sub = SubQueueOf(deadLetter);
        sub.Unregister(waiter);
        if (waiter.WaitingCredit > 0)
        {
            lock (_gate)
            {
                sub.WaitingPeekLockCredit -= waiter.WaitingCredit;
                waiter.WaitingCredit = 0;
            }
        }
    }

    private async Task<IReadOnlyList<ReceivedMessage>> TryTakeAsync(bool deadLetter, ReceiveMode mode, int maxMessages, bool stored = false)
    {
        var now = NowMs;
        var peekLock = mode == ReceiveMode.PeekLock;
        var sub = SubQueueOf(deadLetter);
        var taken = new List<StoredMessage>();
        var result = new List<ReceivedMessage>();
        var background = new List<PendingChange>();
        var settings = Settings;
        var swept = Arrivals.None;
        var toCount = new List<StoredMessage>();
        // Each delivery's payload as taken under the lock: parsed into its message after the lock is released.
        var payloads = new List<(byte[] Payload, SharedParse? Shared)>();
        // The highest first delivery the entity's delivery mark counts instead of a row write (0: none).
        var mark = 0L;
        var markCounted = 0;
        var marking = peekLock && CountsByMark(sub, settings);
        Task? delivery = null;
        lock (_gate)
        {
            ThrowIfNotServing();
            swept = SweepLocked(now, background);
            // Without ordering a topic can hand a later send over before an earlier one: the mark
            // counts only what lies below the end of its lowest send not handed over (the rest count by row).
            var markBelow = marking && _deliveryMarkBound is { } bound ? bound() : long.MaxValue;
            var bytes = 0L;
            while (taken.Count < maxMessages && sub.Available.Count > 0)
            {
                var sequence = sub.Available.Min;
                var message = sub.Messages[sequence];
                if (taken.Count > 0 && bytes + ResponseSizeOf(message) > _options.MaxReceiveResponseBytes)
                {
                    // The response is full; the rest stay available (not locked, not counted).
                    break;
                }
                sub.Available.Remove(sequence);
                if (!deadLetter && message.ExpiresAtMs <= now)
                {
                    ExpireLocked(message, background);
                    continue;
                }
                if (!deadLetter && message.DeliveryCount >= settings.MaxDeliveryCount)
                {
                    // Used up its deliveries before a crash: it goes where a release would have sent it.
                    DeadLetterLocked(message, MaxDeliveryCountExceeded,
                        $"Message could not be consumed after {message.DeliveryCount} delivery attempts.", null, background);
                    continue;
                }
                message.DeliveryCount++;
                if (peekLock)
                {
                    LockLocked(message, now, settings);
                    if (message.DurableCountAhead)
                    {
                        // The send stored this delivery's count already.
                        message.DurableCountAhead = false;
                    }
                    else if (marking && message.DeliveryCount == 1 && message.ScheduledAtMs is null && message.SequenceNumber < markBelow)
                    {
                        // Taken lowest first: every message below it was delivered or is counted
                        // otherwise, so the mark raised to it counts this delivery (CountsByMark).
                        mark = Math.Max(mark, message.SequenceNumber);
                        markCounted++;
                    }
                    else
                    {
                        toCount.Add(message);
                    }
                }
                else
                {
                    message.Settling = true;
                }
                taken.Add(message);
                bytes += ResponseSizeOf(message);
                result.Add(ToReceivedWithoutMessage(message, peekLock));
                payloads.Add((message.Payload, message.SharedParse));
                // A message that stays locked, or comes again, holds only its bytes (SharedParse).
                message.SharedParse = null;
            }
            MaybeRefillLocked(sub);
            if (taken.Count > 0 && (!peekLock || toCount.Count > 0 || mark > 0))
            {
                // Queued under the lock, so deliveries commit in the order they took their messages:
                // a later receive's mark is never durable before the deliveries below it.
                delivery = CommitDeliveryAsync(sub, taken, peekLock ? toCount : null, mark);
            }
        }
        Flush(background);
        // What this receiver's sweep freed may be for the other sub-queue's receivers (or for its peers).
        SignalArrivals(swept);
        if (taken.Count == 0)
        {
            // Not the empty list: a waiting stream holds what its last look returned for the whole wait.
            return [];
        }
        for (var i = 0; i < result.Count; i++)
        {
            if (stored)
            {
                // Written to the stream as stored: never parsed here (a payload array is never changed, only replaced).
                result[i].StoredMessage = payloads[i].Payload;
            }
            else
            {
                // Parsed here, not under the lock: sends, settlements and the other receivers wait on it.
                result[i].Message = StoredMessage.ToDeliver(payloads[i].Payload, payloads[i].Shared);
            }
        }

        if (delivery is not null)
        {
            await delivery.ConfigureAwait(false);
        }
        var counters = CountersOf(deadLetter);
        counters.AddReceived(result.Count);
        if (peekLock && toCount.Count + markCounted < taken.Count)
        {
            counters.AddCountedAtSend(taken.Count - toCount.Count - markCounted);
        }
        if (markCounted > 0)
        {
            counters.AddCountedByMark(markCounted);
        }
        return result;
    }

    /// <summary>
    /// Whether this sub-queue's peek-lock receives count first deliveries with the entity's delivery
    /// mark (one small write per receive) instead of a write of each message's row. The main queue
    /// only: receives take its available messages lowest first, and the messages below the lowest
    /// available one are delivered, scheduled (never marked: they come due out of order, so they
    /// write their count), deferred (delivered), settling, or read back with the mark applied. The
    /// price, as for counting at send: a message given back undelivered, or reinstated from the
    /// dead-letter queue, below the mark reads as delivered once more after a crash. So never where
    /// one delivery is all a message gets (MaxDeliveryCount 1): it would be dead-lettered unseen.
    /// </summary>
    private static bool CountsByMark(SubQueueState sub, QueueSettings settings) =>
        sub.Kind == SubQueue.Main && settings.MaxDeliveryCount > 1;

    /// <summary>
    /// Makes a delivery durable: the raised delivery counts (peek-lock; those the send stored
    /// already need no write), or the deletes (receive-and-delete, which leave memory once
    /// committed). A failed write puts the messages back.
    /// </summary>
    private Task CommitDeliveryAsync(SubQueueState sub, List<StoredMessage> taken, List<StoredMessage>? toCount, long mark = 0)
    {
        if (toCount is not null)
        {
            var updates = toCount.Select(m => m.ToDeliveryCountUpdate(Id)).ToList();
            return _commits.CommitAsync(
                batch =>
                {
                    batch.Updates.AddRange(updates);
                    if (mark > 0)
                    {
                        batch.DeliveryMarks[Id] = Math.Max(batch.DeliveryMarks.GetValueOrDefault(Id), mark);
                    }
                },
                onCommitted: mark > 0 ? () => RaiseDeliveredThrough(sub, mark) : null,
                onFailed: _ => ReleaseAfterFailedDelivery(taken));
        }
        return DeleteTakenAsync(sub, taken, onFailed: () => ReleaseAfterFailedDelivery(taken));
    }

    private void RaiseDeliveredThrough(SubQueueState sub, long mark)
    {
        lock (_gate)
        {
            sub.DeliveredThrough = Math.Max(sub.DeliveredThrough, mark);
        }
    }

    /// <summary>What a message adds to a receive response: its payload plus room for what the broker adds (lock, times, dead-letter fields).</summary>
    private static long ResponseSizeOf(StoredMessage message) =>
        message.PayloadSize + 256 + (message.DeadLetterReason?.Length ?? 0) + (message.DeadLetterDescription?.Length ?? 0) + (message.DeadLetterSource?.Length ?? 0);

    /// <summary>
    /// Gives back peek-locked messages that never reached the application (a prefetch buffer closed,
    /// a stream that broke before they were written): the lock goes and the delivery is not counted,
    /// durably, before the message is available again. Unknown or expired lock tokens are skipped.
    /// </summary>
    public async Task ReleaseUndeliveredAsync(bool deadLetter, IReadOnlyCollection<string> lockTokens)
    {
        var writes = new List<PendingChange>();
        lock (_gate)
        {
            ThrowIfDeleted();
            var sub = SubQueueOf(deadLetter);
            foreach (var lockToken in lockTokens)
            {
                if (Guid.TryParse(lockToken, out var token) && _locks.TryGetValue(token, out var message)
                    && !message.Settling && sub.Messages.ContainsKey(message.SequenceNumber))
                {
                    ReleaseUndeliveredLocked(message, writes);
                }
            }
        }
        if (writes.Count > 0)
        {
            await _commits.CommitAsync(
                batch => writes.ForEach(w => w.Write(batch)),
                onCommitted: () => writes.ForEach(w => w.OnCommitted()),
                onFailed: e => writes.ForEach(w => w.OnFailed(e))).ConfigureAwait(false);
        }
    }

    private void ReleaseUndeliveredLocked(StoredMessage message, List<PendingChange> writes)
    {
        _locks.Remove(message.LockToken!.Value);
        message.LockToken = null;
        // Not available until the lower count is durable: a receive in between would write its own
        // count, which this write could then overwrite.
        message.Settling = true;
        message.DeliveryCount = Math.Max(0, message.DeliveryCount - 1);
        var update = message.ToDeliveryCountUpdate(Id);
        writes.Add(new PendingChange(
            batch => batch.Updates.Add(update),
            () => Unsettle(message),
            _ =>
            {
                // Not written: the delivery stays counted, as after any other lost lock.
                lock (_gate)
                {
                    message.DeliveryCount++;
                }
                Unsettle(message);
            }));
    }

    private void LockLocked(StoredMessage message, long now, QueueSettings settings)
    {
        message.LockedUntilMs = now + (long)settings.LockDuration.TotalMilliseconds;
        var token = LockTokens.New(message.SequenceNumber, message.LockedUntilMs);
        message.LockToken = token;
        _locks[token] = message;
        _lockExpiry.Enqueue(message, message.LockedUntilMs);
        SweepBy(message.LockedUntilMs);
    }

    /// <summary>The delivery was not recorded, so it did not happen: undo it.</summary>
    private void ReleaseAfterFailedDelivery(List<StoredMessage> taken)
    {
        lock (_gate)
        {
            foreach (var message in taken)
            {
                message.DeliveryCount--;
                message.Settling = false;
                if (message.LockToken is { } token)
                {
                    _locks.Remove(token);
                    message.LockToken = null;
                }
                if (message.State == StoredMessageState.Active)
                {
                    SubQueueOf(message.SubQueue == SubQueue.DeadLetter).Available.Add(message.SequenceNumber);
                }
            }
        }
    }

    /// <summary>Receives deferred messages by sequence number (the only way to get them back).</summary>
    public async Task<IReadOnlyList<ReceivedMessage>> ReceiveDeferredAsync(IReadOnlyList<long> sequenceNumbers, ReceiveMode mode)
    {
        var now = NowMs;
        var peekLock = mode == ReceiveMode.PeekLock;
        var settings = Settings;
        var (taken, result) = await WithStoredDeferredAsync(sequenceNumbers, () => TakeDeferred(sequenceNumbers, now, peekLock, settings)).ConfigureAwait(false);
        await CommitDeliveryAsync(_main, taken, peekLock ? taken : null).ConfigureAwait(false);
        return result;
    }

    /// <summary>Locks (or takes, receive-and-delete) deferred messages in memory, after checking all of them.</summary>
    private (List<StoredMessage> Taken, List<ReceivedMessage> Result) TakeDeferred(IReadOnlyList<long> sequenceNumbers, long now, bool peekLock, QueueSettings settings)
    {
        var taken = new List<StoredMessage>();
        var result = new List<ReceivedMessage>();
        lock (_gate)
        {
            ThrowIfNotServing();
            foreach (var sequence in sequenceNumbers.Distinct())
            {
                if (!_main.Messages.TryGetValue(sequence, out var message) || message.Settling)
                {
                    throw FarmErrors.MessageNotFound(Name, sequence, "does not exist");
                }
                if (message.State != StoredMessageState.Deferred)
                {
                    throw FarmErrors.MessageNotFound(Name, sequence, "is not deferred");
                }
                if (message.IsLocked && message.LockedUntilMs > now)
                {
                    throw FarmErrors.MessageNotFound(Name, sequence, "is locked by another receiver");
                }
            }
            foreach (var sequence in sequenceNumbers.Distinct())
            {
                var message = _main.Messages[sequence];
                if (message.LockToken is { } stale)
                {
                    _locks.Remove(stale);
                }
                message.DeliveryCount++;
                if (peekLock)
                {
                    LockLocked(message, now, settings);
                }
                else
                {
                    message.LockToken = null;
                    message.Settling = true;
                }
                taken.Add(message);
                result.Add(ToReceived(message, peekLock));
            }
        }
        return (taken, result);
    }

    /// <summary>Browses messages from a sequence number on, without locking or changing them.</summary>
    public IReadOnlyList<ReceivedMessage> Peek(bool deadLetter, long fromSequenceNumber, int maxMessages)
    {
        var sub = SubQueueOf(deadLetter);
        var result = new List<ReceivedMessage>();
        lock (_gate)
        {
            ThrowIfNotServing();
            if (sub.Ordered.Count == 0)
            {
                return result;
            }
            var from = Math.Max(fromSequenceNumber, sub.Ordered.Min);
            if (from > sub.Ordered.Max)
            {
                return result;
            }
            var bytes = 0L;
            foreach (var sequence in sub.Ordered.GetViewBetween(from, sub.Ordered.Max))
            {
                if (result.Count >= maxMessages)
                {
                    break;
                }
                var message = sub.Messages[sequence];
                if (message.Settling)
                {
                    continue;
                }
                if (result.Count > 0 && bytes + ResponseSizeOf(message) > _options.MaxReceiveResponseBytes)
                {
                    // A full response; the caller pages on from the last sequence number it got.
                    break;
                }
                bytes += ResponseSizeOf(message);
                result.Add(ToReceived(message, withLock: false));
            }
        }
        return result;
    }
}
