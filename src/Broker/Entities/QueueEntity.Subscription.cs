using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

// What a subscription needs beyond a queue: its messages come from its topic's fan-out instead of
// sends, and most of them share the topic's stored copy, so the topic must hear when one is gone.
internal sealed partial class QueueEntity
{
    /// <summary>
    /// Called (under this entity's lock, after the commit) with the sequence number of every message
    /// that left the entity for good: completed, received-and-deleted, expired, forwarded, cancelled.
    /// A topic uses it to look for stored copies no subscription points at any more.
    /// </summary>
    public Action<long>? MessageRemoved { get; set; }

    // The messages of this subscription that are their only stored form (StoredMessage.StoredAlone):
    // a message only this subscription got is stored as its row alone, with no copy in the topic, so
    // the topic counts these towards its size (MaxSizeInMegabytes) along with its copies. Counted from
    // the database at load, then kept as messages arrive (counted by the topic's commit, under its
    // send lock) and leave (under _gate); Interlocked either way, read by the topic's sends.
    private long _storedAloneCount;
    private long _storedAloneBytes;

    /// <summary>This subscription's messages stored as its rows alone (no topic copy), and their bytes.</summary>
    public StoredAloneTally StoredAlone => new(Interlocked.Read(ref _storedAloneCount), Interlocked.Read(ref _storedAloneBytes));

    /// <summary>
    /// Counts the messages of a fan-out stored as this subscription's rows alone, before
    /// <see cref="AcceptFanOut"/> admits them: the topic does it in the same step as it releases the
    /// send's quota reservation. On a subscription deleted meanwhile the count is moot: the topic no
    /// longer sums it.
    /// </summary>
    public void CountStoredAloneArrivals(IReadOnlyList<StoredMessage> messages)
    {
        long count = 0, bytes = 0;
        foreach (var message in messages)
        {
            if (message.StoredAlone)
            {
                count++;
                bytes += message.PayloadSize;
            }
        }
        if (count > 0)
        {
            CountStoredAlone(count, bytes);
        }
    }

    private void CountStoredAlone(long count, long bytes)
    {
        Interlocked.Add(ref _storedAloneCount, count);
        Interlocked.Add(ref _storedAloneBytes, bytes);
    }

    private void RemoveStored(SubQueueState sub, StoredMessage message)
    {
        if (sub.Messages.ContainsKey(message.SequenceNumber))
        {
            sub.Remove(message);
            ForgetScheduledLocked(message);
            ForgetDeferredLocked(message);
            MessageLeftLocked(message.SequenceNumber, message.StoredAlone, message.PayloadSize);
            ClearDueTimesWhenNoneLiveLocked();
        }
    }

    /// <summary>A message left the entity for good (its delete committed), from memory or from the database only.</summary>
    private void MessageLeftLocked(long sequenceNumber, bool storedAlone, int payloadSize)
    {
        if (storedAlone)
        {
            CountStoredAlone(-1, -payloadSize);
        }
        _implicitHeld.Remove(sequenceNumber);
        MessageRemoved?.Invoke(sequenceNumber);
    }

    /// <summary>A message that stays gets a new payload (a settlement or dead-lettering modified it): a message stored alone changes its topic's size.</summary>
    private void ReplacePayloadLocked(StoredMessage message, byte[] payload)
    {
        if (message.StoredAlone)
        {
            CountStoredAlone(0, payload.Length - message.PayloadSize);
        }
        message.ReplacePayload(payload);
    }

    /// <summary>
    /// Set by <see cref="MarkDeleted"/> (under <see cref="_gate"/>): the entity was deleted, not just
    /// unloaded. Only a deleted subscription's rows may be dropped; an unloaded one's belong to the
    /// container's next owner.
    /// </summary>
    private bool _deleted;

    /// <summary>What became of a fan-out handed to a subscription.</summary>
    public enum FanOutOutcome
    {
        /// <summary>The subscription took the messages.</summary>
        Accepted,

        /// <summary>The subscription was deleted: nothing taken, and its rows must not outlive it.</summary>
        Deleted,

        /// <summary>
        /// This broker stopped serving it (container closing, lost, node stopping): nothing taken in
        /// memory, but the committed rows stay; whoever loads the container next serves them.
        /// </summary>
        Unloaded,
    }

    /// <summary>
    /// Takes messages its topic committed for this subscription (in the order given). Takes
    /// nothing when the subscription is no longer served here, and says whether it was deleted
    /// (the caller then removes the rows it wrote) or only unloaded (the rows stay).
    /// </summary>
    public FanOutOutcome AcceptFanOut(IReadOnlyList<StoredMessage> messages, int countedAhead)
    {
        bool main = false, deadLetter = false;
        List<MessageUpdate>? uncount = null;
        lock (_gate)
        {
            _preCountedSending -= countedAhead;
            if (_deleted || _unloaded is not null)
            {
                // Not admitted: the room reserved for its implicit messages goes back.
                foreach (var message in messages)
                {
                    if (message.Implicit)
                    {
                        _implicitReservedBytes -= message.PayloadSize;
                    }
                }
                return _deleted ? FanOutOutcome.Deleted : FanOutOutcome.Unloaded;
            }
            foreach (var message in messages)
            {
                // A subscription's sequence numbers are its topic's: it learns the last one from what
                // arrives (a purge stops at it, so what arrives after the purge began stays).
                _nextSequence = Math.Max(_nextSequence, message.SequenceNumber + 1);
                if (message.SubQueue == SubQueue.DeadLetter)
                {
                    deadLetter |= AdmitLocked(_deadLetter, message);
                    continue;
                }
                if (message.State == StoredMessageState.Scheduled)
                {
                    AdmitScheduledLocked(message);
                }
                else if (message.Implicit)
                {
                    AdmitImplicitLocked(message);
                    main = true;
                }
                else
                {
                    main |= AdmitArrivalLocked(message, ref uncount);
                }
            }
        }
        WriteBackCounts(uncount);
        if (main)
        {
            _main.SignalArrived();
        }
        if (deadLetter)
        {
            _deadLetter.SignalArrived();
        }
        if (Settings.ForwardTo is not null || Settings.ForwardDeadLetteredMessagesTo is not null)
        {
            StartForwarding();
        }
        return FanOutOutcome.Accepted;
    }

    /// <summary>
    /// Cancels those of <paramref name="sequenceNumbers"/> that are scheduled here and not yet
    /// visible, ignoring the others (a topic asks every subscription). Returns how many it cancelled.
    /// </summary>
    public async Task<int> CancelScheduledIfHeldAsync(IReadOnlyCollection<long> sequenceNumbers)
    {
        var now = NowMs;
        var cancelled = new List<StoredMessage>();
        var stored = await FindStoredScheduledAsync(sequenceNumbers, now).ConfigureAwait(false);
        Task? storedDeleted = null;
        lock (_gate)
        {
            ThrowIfNotServing();
            foreach (var sequence in sequenceNumbers)
            {
                if (_main.Messages.TryGetValue(sequence, out var message) && !message.Settling
                    && message.State == StoredMessageState.Scheduled && message.ScheduledAtMs > now)
                {
                    message.Settling = true;
                    cancelled.Add(message);
                }
            }
            // Read back into memory since they were looked up: cancelled there, as the others.
            stored = [.. stored.Where(r => !_main.Messages.ContainsKey(r.SequenceNumber))];
            if (stored.Count > 0)
            {
                storedDeleted = DeleteStoredScheduledLocked(stored);
            }
        }
        if (storedDeleted is not null)
        {
            await storedDeleted.ConfigureAwait(false);
        }
        if (cancelled.Count == 0)
        {
            return stored.Count;
        }
        await _commits.CommitAsync(
            batch => batch.Deletes.AddRange(cancelled.Select(m => new MessageKey(Id, m.SequenceNumber))),
            onCommitted: () =>
            {
                lock (_gate)
                {
                    cancelled.ForEach(m => RemoveStored(_main, m));
                }
            },
            onFailed: _ =>
            {
                lock (_gate)
                {
                    cancelled.ForEach(m => m.Settling = false);
                }
            }).ConfigureAwait(false);
        return cancelled.Count + stored.Count;
    }
}
