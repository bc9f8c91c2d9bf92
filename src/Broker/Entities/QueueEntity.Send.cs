using Farm.Broker.Telemetry;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Broker.Entities;

internal sealed partial class QueueEntity
{
    /// <summary>
    /// Stores the messages as one atomic batch and returns their sequence numbers once durable
    /// (0 for a message dropped by duplicate detection). Messages become visible to receivers
    /// only after the commit. A message whose MessageId is in flight in another send that has not
    /// committed yet waits for that send's outcome: a duplicate of a committed message, or stored
    /// by this send if the other failed (never acknowledged as a duplicate of nothing).
    /// </summary>
    /// <summary>How many of a send's messages were stored (duplicates dropped by detection answer 0).</summary>
    internal static int StoredCount(long[] sequenceNumbers)
    {
        var stored = 0;
        foreach (var sequence in sequenceNumbers)
        {
            stored += sequence != 0 ? 1 : 0;
        }
        return stored;
    }

    public async Task<long[]> SendAsync(IReadOnlyList<Message> messages, string? deadLetterSource = null, SendName? name = null, CommitsWithSend? with = null, ForwardOrigin? origin = null)
    {
        var payloads = SendValidation.Payloads(messages, _options);
        if (!_tailsCounted.Task.IsCompleted)
        {
            // Just taken over: MaxSizeInMegabytes needs the stored tail's size.
            await Task.WhenAny(_tailsCounted.Task, Unloaded).ConfigureAwait(false);
        }
        var lookup = new DuplicateLookup();
        try
        {
            while (true)
            {
                var (waitFor, commit, results) = TrySend(messages, payloads, deadLetterSource, name, origin, lookup, with);
                if (waitFor is null)
                {
                    if (commit is not null)
                    {
                        await commit.ConfigureAwait(false);
                        Counters.AddSent(StoredCount(results!));
                    }
                    return results!;
                }
                // An earlier send of one of the ids, or a lookup of ids that left memory: whatever the
                // outcome, look again from the start, so the batch stays atomic. An entity unloaded
                // meanwhile answers the next look with its reason.
                await Task.WhenAny(waitFor, Unloaded).ConfigureAwait(false);
            }
        }
        finally
        {
            if (lookup.Stamp is not null)
            {
                lock (_gate)
                {
                    _duplicates.EndLookup(lookup);
                }
            }
        }
    }

    /// <summary>
    /// Accepts the batch and queues its commit (under the lock, so commits follow sequence order),
    /// or returns the outcome of an earlier send to wait for first.
    /// </summary>
    private (Task? WaitFor, Task? Commit, long[]? Results) TrySend(IReadOnlyList<Message> messages, byte[][] payloads, string? deadLetterSource, SendName? name, ForwardOrigin? origin, DuplicateLookup lookup, CommitsWithSend? with)
    {
        long total = payloads.Sum(p => (long)p.Length);
        var now = NowMs;
        var settings = Settings;
        var results = new long[messages.Count];
        var stored = new List<StoredMessage>(messages.Count);
        var records = new List<MessageRecord>(messages.Count);
        var duplicates = new List<DuplicateRecord>();
        long nextSequence;
        lock (_gate)
        {
            ThrowIfNotServing();
            if (settings.RequiresDuplicateDetection && DuplicateCheckFirst(messages, now, lookup) is { } pending)
            {
                return (pending, null, null);
            }
            // Sends accepted but not committed yet count: concurrent sends cannot overshoot the limit together.
            SendValidation.EnsureRoom("queue", Name, TotalBytes + _sendingBytes, total, settings.MaxSizeInMegabytes, _commits, _options);
            var preCount = PreCountBudgetLocked(settings);
            var preCounted = 0;
            for (var i = 0; i < messages.Count; i++)
            {
                var message = messages[i];
                if (settings.RequiresDuplicateDetection && message.MessageId.Length > 0)
                {
                    if (!_duplicates.TryRemember(Id, message.MessageId, now, settings.DuplicateDetectionHistoryTimeWindow, lookup, out var remembered))
                    {
                        continue;
                    }
                    duplicates.Add(remembered);
                    if (_duplicates.OverBudget)
                    {
                        // The next tick moves the oldest ids into the filters.
                        SweepBy(now);
                    }
                }

                var sequence = _nextSequence++;
                results[i] = sequence;
                long? scheduledAt = message.ScheduledEnqueueTime is { } s ? s.ToDateTimeOffset().ToUnixTimeMilliseconds() : null;
                var visibleAt = Math.Max(now, scheduledAt ?? now);
                var expiresAt = ExpiryOf(message, settings, visibleAt);
                var state = scheduledAt > now ? StoredMessageState.Scheduled : StoredMessageState.Active;
                // A receiver waits for it: its delivery is counted by this insert, not by a write of its own.
                var countedAhead = state == StoredMessageState.Active && preCounted < preCount;
                if (countedAhead)
                {
                    preCounted++;
                }
                stored.Add(new StoredMessage
                {
                    SequenceNumber = sequence,
                    Payload = payloads[i],
                    EnqueuedAtMs = now,
                    PayloadSize = payloads[i].Length,
                    State = state,
                    ScheduledAtMs = state == StoredMessageState.Scheduled ? scheduledAt : null,
                    ExpiresAtMs = expiresAt,
                    DeadLetterSource = deadLetterSource,
                    DurableCountAhead = countedAhead,
                    // Handed to the waiting receiver as it came: its delivery parses nothing.
                    SharedParse = countedAhead ? new SharedParse(message) : null,
                });
                records.Add(new MessageRecord
                {
                    EntityId = Id,
                    SequenceNumber = sequence,
                    State = state,
                    DeliveryCount = countedAhead ? 1 : 0,
                    EnqueuedAtMs = now,
                    ScheduledAtMs = state == StoredMessageState.Scheduled ? scheduledAt : null,
                    ExpiresAtMs = expiresAt,
                    MessageId = message.MessageId.Length > 0 ? message.MessageId : null,
                    DeadLetterSource = deadLetterSource,
                    Payload = payloads[i],
                    PayloadSize = payloads[i].Length,
                });
            }
            nextSequence = _nextSequence;

            if (records.Count == 0)
            {
                return (null, null, results);
            }
            var outcome = _inFlightIds.Add(duplicates);
            _sendingBytes += total;
            _preCountedSending += preCounted;
            var sends = SendRecords.For(name, origin, Id, results, now);
            // Taken under the lock, with the commit it joins: nothing else can take it in between.
            var joined = with is not null && ReferenceEquals(with.Commits, _commits) && with.TryTake() ? with : null;
            var commit = QueueCommit(records, stored, duplicates, sends, nextSequence, outcome, total, preCounted, joined);
            return (null, commit, results);
        }
    }

    /// <summary>When a message visible from <paramref name="visibleAt"/> expires: its own TimeToLive, or the entity's default when shorter; null for never.</summary>
    private static long? ExpiryOf(Message message, QueueSettings settings, long visibleAt)
    {
        var ttl = settings.DefaultMessageTimeToLive;
        if (message.TimeToLive is { } messageTtl && messageTtl.ToTimeSpan() is var t && t > TimeSpan.Zero && t < ttl)
        {
            ttl = t;
        }
        return ttl >= QueueSettings.InfiniteTimeToLive ? null : visibleAt + (long)ttl.TotalMilliseconds;
    }

    /// <summary>What a send with duplicate detection must wait for before it is looked at again: an earlier send of one of its ids, or a database lookup of ids that left memory.</summary>
    private Task? DuplicateCheckFirst(IReadOnlyList<Message> messages, long now, DuplicateLookup lookup) =>
        _inFlightIds.WaitingFor(messages) ?? _duplicates.StartLookup(messages, now, lookup);

    /// <summary>
    /// How many messages of a send may be stored already counted as delivered: as many as the
    /// peek-lock receivers waiting now will take at once, less what is available before them and
    /// what other sends in flight counted. A message handed straight on then costs no write of its
    /// delivery count (one commit fewer per message at low rates). The price: a crash between the
    /// send and the delivery leaves that message counted once more than it was delivered, so it is
    /// never done where one delivery is all it gets (MaxDeliveryCount 1), nor where the message
    /// could leave memory (a paged queue), which would forget that its row is ahead.
    /// </summary>
    private int PreCountBudgetLocked(QueueSettings settings)
    {
        if (settings.MaxDeliveryCount <= 1 || settings.ForwardTo is not null || _main.StoredCount > 0 || _main.TailPending)
        {
            return 0;
        }
        return Math.Max(0, _main.WaitingPeekLockCredit - _main.Available.Count - _preCountedSending);
    }

    /// <summary>
    /// For a topic's fan-out to this subscription: how many of up to <paramref name="wanted"/>
    /// messages it may store counted as delivered (see <see cref="PreCountBudgetLocked"/>), held
    /// until <see cref="EndCountedDeliveries"/> gives them back (what the fan-out did not use at
    /// once, the rest when its commit ends).
    /// </summary>
    public int ReserveCountedDeliveries(int wanted)
    {
        lock (_gate)
        {
            if (_unloaded is not null || _deleted)
            {
                return 0;
            }
            var granted = Math.Min(wanted, PreCountBudgetLocked(Settings));
            _preCountedSending += granted;
            return granted;
        }
    }

    public void EndCountedDeliveries(int count)
    {
        if (count > 0)
        {
            lock (_gate)
            {
                _preCountedSending -= count;
            }
        }
    }

    /// <summary>
    /// Admits a committed arrival to the main sub-queue. One stored counted as delivered that is
    /// stored only after all (the cache filled meanwhile) goes into <paramref name="uncount"/>:
    /// memory cannot remember that its row is ahead, so the row gives back the count it got for nothing.
    /// </summary>
    private bool AdmitArrivalLocked(StoredMessage message, ref List<MessageUpdate>? uncount)
    {
        if (AdmitLocked(_main, message))
        {
            return true;
        }
        if (message.DurableCountAhead)
        {
            (uncount ??= []).Add(message.ToDeliveryCountUpdate(Id));
        }
        return false;
    }

    /// <summary>Writes back the counts <see cref="AdmitArrivalLocked"/> collected, in the background.</summary>
    private void WriteBackCounts(List<MessageUpdate>? uncount)
    {
        if (uncount is not null)
        {
            _ = _commits.CommitAsync(batch => batch.Updates.AddRange(uncount))
                .ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.OnlyOnFaulted);
        }
    }

    private Task QueueCommit(
        List<MessageRecord> records, List<StoredMessage> stored, List<DuplicateRecord> duplicates, SendRecords? sends, long nextSequence, InFlightIds.Outcome? outcome, long bytes, int preCounted,
        CommitsWithSend? with)
    {
        return _commits.CommitAsync(
            batch =>
            {
                batch.Inserts.AddRange(records);
                batch.SequenceCounters[Id] = Math.Max(batch.SequenceCounters.GetValueOrDefault(Id), nextSequence);
                batch.Duplicates.AddRange(duplicates);
                sends?.WriteTo(batch.Sends);
                with?.Write(batch);
            },
            onCommitted: () =>
            {
                with?.OnCommitted();
                List<MessageUpdate>? uncount = null;
                lock (_gate)
                {
                    _sendingBytes -= bytes;
                    _preCountedSending -= preCounted;
                    foreach (var message in stored)
                    {
                        if (message.State == StoredMessageState.Scheduled)
                        {
                            AdmitScheduledLocked(message);
                        }
                        else
                        {
                            AdmitArrivalLocked(message, ref uncount);
                        }
                    }
                    _inFlightIds.Complete(outcome);
                }
                WriteBackCounts(uncount);
                _main.SignalArrived();
                if (Settings.ForwardTo is not null)
                {
                    // Arrived here at the end of a send's forwarding walk (its hop limit, or a loop):
                    // forward on now, where the hop limit is enforced, rather than at the next sweep.
                    StartForwarding();
                }
            },
            onFailed: e =>
            {
                with?.OnFailed(e);
                // Forget the ids so a retry of this send (or a duplicate waiting for it) stores it.
                lock (_gate)
                {
                    _sendingBytes -= bytes;
                    _preCountedSending -= preCounted;
                    _duplicates.Forget(duplicates);
                    _inFlightIds.Complete(outcome);
                }
            },
            bytes);
    }

    /// <summary>Removes scheduled messages that are not visible yet.</summary>
    public async Task CancelScheduledAsync(IReadOnlyList<long> sequenceNumbers)
    {
        var now = NowMs;
        var cancelled = new List<StoredMessage>();
        var stored = (await FindStoredScheduledAsync(sequenceNumbers, now).ConfigureAwait(false)).ToDictionary(r => r.SequenceNumber);
        Task? storedDeleted = null;
        lock (_gate)
        {
            ThrowIfNotServing();
            // Read back into memory since they were looked up: cancelled there, as the others.
            stored = stored.Values.Where(r => !_main.Messages.ContainsKey(r.SequenceNumber)).ToDictionary(r => r.SequenceNumber);
            foreach (var sequence in sequenceNumbers)
            {
                if (stored.ContainsKey(sequence))
                {
                    continue;
                }
                if (!_main.Messages.TryGetValue(sequence, out var message) || message.Settling)
                {
                    throw FarmErrors.MessageNotFound(Name, sequence, "does not exist");
                }
                if (message.State != StoredMessageState.Scheduled || message.ScheduledAtMs <= now)
                {
                    throw FarmErrors.MessageNotFound(Name, sequence, "is not a scheduled message waiting for its time");
                }
            }
            foreach (var sequence in sequenceNumbers.Distinct().Where(s => !stored.ContainsKey(s)))
            {
                var message = _main.Messages[sequence];
                message.Settling = true;
                cancelled.Add(message);
            }
            if (stored.Count > 0)
            {
                storedDeleted = DeleteStoredScheduledLocked([.. stored.Values]);
            }
        }
        if (storedDeleted is not null)
        {
            await storedDeleted.ConfigureAwait(false);
        }
        if (cancelled.Count == 0)
        {
            return;
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
    }

    public Task<long[]?> FindRecordedSendAsync(SendName name, long sinceMs, CancellationToken cancellationToken) =>
        name.FindRecordAsync(_commits.Database, Id, sinceMs, cancellationToken);
}
