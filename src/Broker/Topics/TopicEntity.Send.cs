using Farm.Broker.Telemetry;
using Farm.Broker.Entities;
using Farm.Broker.Rules;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Broker.Topics;

internal sealed partial class TopicEntity
{
    /// <summary>One message the topic accepted: its sequence number and what the broker assigned.</summary>
    private sealed record Accepted(int Index, long SequenceNumber, Message Message, byte[] Payload, StoredMessageState State, long? ScheduledAtMs, long VisibleAtMs);

    /// <summary>What one send writes and, once committed, hands to each subscription.</summary>
    private sealed class FanOut(int subscriptions)
    {
        public List<StoredMessage>?[] Deliveries { get; } = new List<StoredMessage>?[subscriptions];
        public List<MessageRecord>?[] Rows { get; } = new List<MessageRecord>?[subscriptions];

        /// <summary>Deliveries stored counted as delivered, per subscription (QueueEntity.ReserveCountedDeliveries).</summary>
        public int[] CountedAhead { get; } = new int[subscriptions];

        /// <summary>
        /// Per subscription, the delivery mark the send writes (0: none): the highest of its implicit
        /// messages counted as delivered, which have no row to carry the count (MakeImplicit).
        /// </summary>
        public long[] Marks { get; } = new long[subscriptions];

        /// <summary>Gives every subscription back the counted deliveries it holds for this fan-out (its commit failed).</summary>
        public void EndCountedDeliveries(Subscription[] subscriptions)
        {
            for (var s = 0; s < subscriptions.Length; s++)
            {
                subscriptions[s].Queue.EndCountedDeliveries(CountedAhead[s]);
            }
        }
    }

    /// <summary>
    /// Stores the messages once and fans them out to every subscription whose rules match, as one
    /// atomic batch; returns their sequence numbers once durable (0 for a duplicate). A message no
    /// subscription wants is accepted and dropped, as in Azure Service Bus.
    /// </summary>
    public async Task<long[]> SendAsync(IReadOnlyList<Message> messages, string? deadLetterSource = null, SendName? name = null, CommitsWithSend? with = null, ForwardOrigin? origin = null)
    {
        var payloads = SendValidation.Payloads(messages, _options);
        if (!_copiesCounted.Task.IsCompleted)
        {
            // Just taken over: MaxSizeInMegabytes needs the stored copies' size.
            await Task.WhenAny(_copiesCounted.Task, _unloadedSignal.Task).ConfigureAwait(false);
        }
        var lookup = new DuplicateLookup();
        try
        {
            while (true)
            {
                var (waitFor, commit, results) = TrySend(messages, payloads, deadLetterSource, name, origin, lookup, with);
                if (waitFor is null)
                {
                    await commit!.ConfigureAwait(false);
                    Counters.AddSent(QueueEntity.StoredCount(results!));
                    return results!;
                }
                // A MessageId of this batch is in a send that has not committed yet, or left memory
                // and is looked up: wait for that, then look again from the start (a duplicate of a
                // committed message, or stored here if it failed), so the batch stays atomic.
                await Task.WhenAny(waitFor, _unloadedSignal.Task).ConfigureAwait(false);
            }
        }
        finally
        {
            if (lookup.Stamp is not null)
            {
                lock (_sendGate)
                {
                    _duplicates.EndLookup(lookup);
                }
            }
        }
    }

    private (Task? WaitFor, Task? Commit, long[]? Results) TrySend(IReadOnlyList<Message> messages, byte[][] payloads, string? deadLetterSource, SendName? name, ForwardOrigin? origin, DuplicateLookup lookup, CommitsWithSend? with)
    {
        var total = payloads.Sum(p => (long)p.Length);
        var settings = Settings;
        var now = NowMs;
        var results = new long[messages.Count];
        var sends = SendRecords.For(name, origin, Id, results, now);
        var duplicates = new List<DuplicateRecord>();
        List<Accepted> accepted;
        Subscription[] subscriptions;
        FanOut fanOut;
        InFlightIds.Outcome? outcome;
        Task commit;
        if (settings.SupportOrdering)
        {
            lock (_sendGate)
            {
                ThrowIfNotServing();
                if (settings.RequiresDuplicateDetection
                    && (_inFlightIds.WaitingFor(messages) ?? _duplicates.StartLookup(messages, now, lookup)) is { } pending)
                {
                    return (pending, null, null);
                }
                accepted = AcceptLocked(messages, payloads, total, settings, now, results, duplicates, lookup);
                outcome = _inFlightIds.Add(duplicates);
                subscriptions = _subscriptions;
                try
                {
                    fanOut = Evaluate(accepted, subscriptions, settings, now, parallel: false, deadLetterSource);
                    // Queued before the lock is let go: commits follow sequence order.
                    commit = Commit(accepted, subscriptions, fanOut, duplicates, sends, outcome, total, with);
                }
                catch when (accepted.Count > 0)
                {
                    SendHanded(accepted[0].SequenceNumber);
                    throw;
                }
            }
        }
        else
        {
            lock (_sendGate)
            {
                ThrowIfNotServing();
                if (settings.RequiresDuplicateDetection
                    && (_inFlightIds.WaitingFor(messages) ?? _duplicates.StartLookup(messages, now, lookup)) is { } pending)
                {
                    return (pending, null, null);
                }
                accepted = AcceptLocked(messages, payloads, total, settings, now, results, duplicates, lookup);
                outcome = _inFlightIds.Add(duplicates);
                subscriptions = _subscriptions;
            }
            try
            {
                if (accepted.Count > 0)
                {
                    AcceptedForTests?.Invoke(accepted[0].SequenceNumber);
                }
                fanOut = Evaluate(accepted, subscriptions, settings, now, parallel: subscriptions.Length >= ParallelFanOutThreshold, deadLetterSource);
                commit = Commit(accepted, subscriptions, fanOut, duplicates, sends, outcome, total, with);
            }
            catch when (accepted.Count > 0)
            {
                SendHanded(accepted[0].SequenceNumber);
                throw;
            }
        }
        return (null, commit, results);
    }

    private List<Accepted> AcceptLocked(
        IReadOnlyList<Message> messages, byte[][] payloads, long total, TopicSettings settings, long now, long[] results, List<DuplicateRecord> duplicates, DuplicateLookup lookup)
    {
        ThrowIfNotServing();
        // Sends accepted but not committed yet count: concurrent sends cannot overshoot the limit together.
        var (_, stored) = GetCounts();
        SendValidation.EnsureRoom("topic", Name, stored + _sendingBytes, total, settings.MaxSizeInMegabytes, _commits, _options);
        _sendingBytes += total;
        var accepted = new List<Accepted>(messages.Count);
        var first = _nextSequence;
        SendStarting(first);
        try
        {
            AcceptEachLocked(messages, payloads, settings, now, results, duplicates, lookup, accepted);
        }
        finally
        {
            SendNumbered(first, _nextSequence);
        }
        return accepted;
    }

    private void AcceptEachLocked(
        IReadOnlyList<Message> messages, byte[][] payloads, TopicSettings settings, long now, long[] results, List<DuplicateRecord> duplicates, DuplicateLookup lookup, List<Accepted> accepted)
    {
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
            }
            var sequence = _nextSequence++;
            results[i] = sequence;
            long? scheduledAt = message.ScheduledEnqueueTime is { } s ? s.ToDateTimeOffset().ToUnixTimeMilliseconds() : null;
            var state = scheduledAt > now ? StoredMessageState.Scheduled : StoredMessageState.Active;
            accepted.Add(new Accepted(i, sequence, message, payloads[i], state,
                state == StoredMessageState.Scheduled ? scheduledAt : null, Math.Max(now, scheduledAt ?? now)));
        }
    }

    /// <summary>Runs every subscription's rules on every accepted message: what each one gets, and the rows to write.</summary>
    private static FanOut Evaluate(List<Accepted> accepted, Subscription[] subscriptions, TopicSettings settings, long now, bool parallel, string? deadLetterSource)
    {
        var fanOut = new FanOut(subscriptions.Length);
        if (accepted.Count == 0 || subscriptions.Length == 0)
        {
            return fanOut;
        }
        var enqueuedAt = DateTimeOffset.FromUnixTimeMilliseconds(now);
        var ruleMessages = accepted.Select(a => new RuleMessage(a.Message, a.SequenceNumber, enqueuedAt) { Size = a.Payload.Length }).ToArray();
        // The subscriptions that get a message unchanged share its payload, and its one parse when delivered.
        var parses = new SharedParse[accepted.Count];
        for (var m = 0; m < parses.Length; m++)
        {
            parses[m] = new SharedParse();
        }
        if (parallel)
        {
            Parallel.For(0, subscriptions.Length, s => EvaluateOne(s));
        }
        else
        {
            for (var s = 0; s < subscriptions.Length; s++)
            {
                EvaluateOne(s);
            }
        }
        return fanOut;

        void EvaluateOne(int s)
        {
            var subscription = subscriptions[s];
            var rules = subscription.Rules;
            var subscriptionSettings = subscription.Settings;
            List<StoredMessage>? deliveries = null;
            List<MessageRecord>? rows = null;
            // Receivers waiting on the subscription: that many deliveries are counted by these rows.
            var countable = subscription.Queue.ReserveCountedDeliveries(accepted.Count);
            var counted = 0;
            for (var m = 0; m < accepted.Count; m++)
            {
                var message = accepted[m];
                Message? stored;
                string? failure = null;
                try
                {
                    stored = rules.Evaluate(ruleMessages[m]).MessageFor(message.Message);
                }
                catch (RuleEvaluationException e)
                {
                    if (!subscriptionSettings.DeadLetteringOnFilterEvaluationExceptions)
                    {
                        continue;
                    }
                    stored = message.Message;
                    failure = $"Rule '{e.RuleName}' could not be evaluated: {e.Message}";
                }
                if (stored is null)
                {
                    continue;
                }
                var ownPayload = ReferenceEquals(stored, message.Message) ? null : stored.ToPayload();
                var size = ownPayload?.Length ?? message.Payload.Length;
                var deadLetter = failure is not null;
                long? expiresAt = null;
                if (!deadLetter)
                {
                    var ttl = Min(settings.DefaultMessageTimeToLive, subscriptionSettings.DefaultMessageTimeToLive);
                    if (stored.TimeToLive?.ToTimeSpan() is { } own && own > TimeSpan.Zero && own < ttl)
                    {
                        ttl = own;
                    }
                    expiresAt = ttl >= QueueSettings.InfiniteTimeToLive ? null : message.VisibleAtMs + (long)ttl.TotalMilliseconds;
                }
                var state = deadLetter ? StoredMessageState.Active : message.State;
                var scheduledAt = deadLetter ? null : message.ScheduledAtMs;
                var countedAhead = !deadLetter && state == StoredMessageState.Active && counted < countable;
                if (countedAhead)
                {
                    counted++;
                    if (ownPayload is null)
                    {
                        // A waiting receiver takes it at once: its delivery parses nothing (SharedParse.Offer).
                        parses[m].Offer(message.Message);
                    }
                }
                (deliveries ??= []).Add(new StoredMessage
                {
                    SequenceNumber = message.SequenceNumber,
                    Payload = ownPayload ?? message.Payload,
                    SharedParse = ownPayload is null ? parses[m] : null,
                    EnqueuedAtMs = now,
                    PayloadSize = size,
                    SubQueue = deadLetter ? SubQueue.DeadLetter : SubQueue.Main,
                    State = state,
                    ScheduledAtMs = scheduledAt,
                    ExpiresAtMs = expiresAt,
                    DeadLetterReason = deadLetter ? FilterEvaluationFailed : null,
                    DeadLetterDescription = failure,
                    DeadLetterSource = deadLetterSource,
                    DurableCountAhead = countedAhead,
                    // A row of its own unless the send makes it implicit (MakeImplicit): its copy does not name it.
                    WithoutMembership = true,
                });
                (rows ??= []).Add(new MessageRecord
                {
                    EntityId = subscription.Queue.Id,
                    SequenceNumber = message.SequenceNumber,
                    SubQueue = deadLetter ? SubQueue.DeadLetter : SubQueue.Main,
                    State = state,
                    DeliveryCount = countedAhead ? 1 : 0,
                    EnqueuedAtMs = now,
                    ScheduledAtMs = scheduledAt,
                    ExpiresAtMs = expiresAt,
                    MessageId = message.Message.MessageId.Length > 0 ? message.Message.MessageId : null,
                    DeadLetterReason = deadLetter ? FilterEvaluationFailed : null,
                    DeadLetterDescription = failure,
                    DeadLetterSource = deadLetterSource,
                    Payload = ownPayload,
                    PayloadSize = size,
                });
            }
            subscription.Queue.EndCountedDeliveries(countable - counted);
            fanOut.CountedAhead[s] = counted;
            fanOut.Deliveries[s] = deliveries;
            fanOut.Rows[s] = rows;
        }
    }

    private static TimeSpan Min(TimeSpan a, TimeSpan b) => a < b ? a : b;

    /// <summary>
    /// Decides how each accepted message is stored, and returns those that need a copy. A message
    /// exactly one subscription got is stored as that subscription's row alone, payload and all (as a
    /// queue stores it): no copy to write, scan for and delete later, which is most of what a topic
    /// with one subscription costs over a queue. A message several subscriptions got is stored once, as
    /// the topic's copy, and their rows point at it (a row a rule action changed carries its own
    /// payload as well). A scheduled message keeps its copy in every case: cancelling it looks the
    /// topic's copies up. The rows stored alone are marked so: their subscription counts them towards
    /// the topic's size in place of a copy.
    /// </summary>
    private static List<Accepted> StoreAloneOrCopy(List<Accepted> accepted, FanOut fanOut)
    {
        var rowsPerMessage = new Dictionary<long, int>(accepted.Count);
        foreach (var rows in fanOut.Rows)
        {
            foreach (var row in rows ?? [])
            {
                rowsPerMessage[row.SequenceNumber] = rowsPerMessage.GetValueOrDefault(row.SequenceNumber) + 1;
            }
        }
        var copies = new List<Accepted>(rowsPerMessage.Count);
        Dictionary<long, Accepted>? alone = null;
        foreach (var message in accepted)
        {
            if (!rowsPerMessage.TryGetValue(message.SequenceNumber, out var rows))
            {
                continue;
            }
            if (rows == 1 && message.State != StoredMessageState.Scheduled)
            {
                (alone ??= new Dictionary<long, Accepted>(accepted.Count)).Add(message.SequenceNumber, message);
            }
            else
            {
                copies.Add(message);
            }
        }
        if (alone is null)
        {
            return copies;
        }
        for (var s = 0; s < fanOut.Rows.Length; s++)
        {
            if (fanOut.Rows[s] is not { } rows)
            {
                continue;
            }
            // Evaluate adds a subscription's deliveries and rows in step: the same index is the same message.
            var deliveries = fanOut.Deliveries[s]!;
            for (var r = 0; r < rows.Count; r++)
            {
                if (alone.TryGetValue(rows[r].SequenceNumber, out var message))
                {
                    rows[r] = rows[r] with { Payload = rows[r].Payload ?? message.Payload };
                    deliveries[r].StoredAlone = true;
                }
            }
        }
        return copies;
    }

    /// <summary>
    /// Queues the batch: the topic's copies (of the messages several subscriptions got, see
    /// <see cref="StoreAloneOrCopy"/>), every subscription row, the sequence counter and duplicate
    /// history. Once durable, the copies are counted and each subscription takes its messages.
    /// </summary>
    /// <param name="reserved">The bytes the send counted against MaxSizeInMegabytes until it commits or fails.</param>
    /// <param name="sends">The named send's records (its results filled in by then), written with its messages.</param>
    private Task Commit(List<Accepted> accepted, Subscription[] subscriptions, FanOut fanOut, List<DuplicateRecord> duplicates, SendRecords? sends, InFlightIds.Outcome? outcome, long reserved, CommitsWithSend? with)
    {
        var copies = StoreAloneOrCopy(accepted, fanOut);
        var members = accepted.Count == 0 ? null : MakeImplicit(copies, subscriptions, fanOut, markable: LowestUnhanded() >= accepted[0].SequenceNumber);
        if (accepted.Count == 0)
        {
            lock (_sendGate)
            {
                _sendingBytes -= reserved;
            }
            return Task.CompletedTask;
        }
        var nextSequence = accepted[^1].SequenceNumber + 1;
        // Taken with the commit it joins (a send that stores nothing leaves it to its caller).
        var joined = with is not null && ReferenceEquals(with.Commits, _commits) && with.TryTake() ? with : null;
        return _commits.CommitAsync(
            batch =>
            {
                foreach (var copy in copies)
                {
                    batch.Inserts.Add(new MessageRecord
                    {
                        EntityId = Id,
                        SequenceNumber = copy.SequenceNumber,
                        EnqueuedAtMs = copy.VisibleAtMs,
                        MessageId = copy.Message.MessageId.Length > 0 ? copy.Message.MessageId : null,
                        Payload = copy.Payload,
                        PayloadSize = copy.Payload.Length,
                        Members = members?.GetValueOrDefault(copy.SequenceNumber),
                    });
                }
                foreach (var rows in fanOut.Rows)
                {
                    if (rows is not null)
                    {
                        batch.Inserts.AddRange(rows);
                    }
                }
                batch.SequenceCounters[Id] = Math.Max(batch.SequenceCounters.GetValueOrDefault(Id), nextSequence);
                for (var s = 0; s < subscriptions.Length; s++)
                {
                    if (fanOut.Marks[s] > 0)
                    {
                        var id = subscriptions[s].Queue.Id;
                        batch.DeliveryMarks[id] = Math.Max(batch.DeliveryMarks.GetValueOrDefault(id), fanOut.Marks[s]);
                    }
                }
                batch.Duplicates.AddRange(duplicates);
                sends?.WriteTo(batch.Sends);
                joined?.Write(batch);
            },
            onCommitted: () =>
            {
                joined?.OnCommitted();
                lock (_sendGate)
                {
                    // The send's bytes move from in flight to stored in one step, under the lock the
                    // quota check holds: a send checking meanwhile never finds them in neither place
                    // (a sixth 200 KB send into a 1 MB topic slipped through that gap).
                    CopiesStored(copies.Count, copies.Sum(c => (long)c.Payload.Length));
                    // Only messages that got no copy can be stored alone (none, in a wide fan-out).
                    if (copies.Count < accepted.Count)
                    {
                        for (var s = 0; s < subscriptions.Length; s++)
                        {
                            if (fanOut.Deliveries[s] is { } arriving)
                            {
                                subscriptions[s].Queue.CountStoredAloneArrivals(arriving);
                            }
                        }
                    }
                    _sendingBytes -= reserved;
                    _inFlightIds.Complete(outcome);
                }
                for (var s = 0; s < subscriptions.Length; s++)
                {
                    if (fanOut.Marks[s] > 0)
                    {
                        subscriptions[s].Queue.NoteDeliveryMark(fanOut.Marks[s]);
                    }
                    // Deleted since the fan-out read it: its rows must not outlive it. Only unloaded
                    // (container closing or lost, node stopping): the rows are acknowledged messages
                    // and stay for the next owner to load.
                    if (fanOut.Deliveries[s] is { } deliveries
                        && subscriptions[s].Queue.AcceptFanOut(deliveries, fanOut.CountedAhead[s]) == QueueEntity.FanOutOutcome.Deleted)
                    {
                        DropRows(subscriptions[s].Queue.Id, deliveries);
                    }
                }
                SendHanded(accepted[0].SequenceNumber);
                if (Volatile.Read(ref _deleted))
                {
                    // The topic was deleted while this send waited: its purge may have run first.
                    DropCopies(copies.Select(c => c.SequenceNumber));
                }
            },
            onFailed: e =>
            {
                joined?.OnFailed(e);
                // Forget the ids so a retry of this send is not taken for a duplicate.
                lock (_sendGate)
                {
                    _sendingBytes -= reserved;
                    _duplicates.Forget(duplicates);
                    _inFlightIds.Complete(outcome);
                }
                fanOut.EndCountedDeliveries(subscriptions);
                EndImplicit(subscriptions, fanOut);
                SendHanded(accepted[0].SequenceNumber);
            },
            reserved);
    }

    private void DropCopies(IEnumerable<long> sequenceNumbers)
    {
        var keys = sequenceNumbers.Select(s => new MessageKey(Id, s)).ToList();
        _ = _commits.CommitAsync(batch => batch.CopyDeletes.AddRange(keys))
            .ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.OnlyOnFaulted);
    }

    private void DropRows(long subscriptionId, List<StoredMessage> deliveries)
    {
        // An implicit message has no row: its copy's membership goes with the copy.
        var keys = deliveries.Where(d => !d.Implicit).Select(d => new MessageKey(subscriptionId, d.SequenceNumber)).ToList();
        _ = _commits.CommitAsync(batch => batch.Deletes.AddRange(keys), onCommitted: () => deliveries.ForEach(d => OnCopyReleased(d.SequenceNumber)))
            .ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.OnlyOnFaulted);
    }

    /// <summary>
    /// Cancels scheduled messages: every subscription drops its row; the topic's copy goes with the
    /// last. NotFound for a sequence number the topic does not hold.
    /// </summary>
    public async Task CancelScheduledAsync(IReadOnlyList<long> sequenceNumbers)
    {
        lock (_sendGate)
        {
            ThrowIfNotServing();
        }
        // The copies live in the database only: one indexed read tells which exist.
        var stored = await _commits.Database.ReadPayloadsAsync(Id, [.. sequenceNumbers]).ConfigureAwait(false);
        foreach (var sequence in sequenceNumbers)
        {
            if (!stored.ContainsKey(sequence))
            {
                throw FarmErrors.MessageNotFound(Name, sequence, "does not exist");
            }
        }
        var cancelled = 0;
        foreach (var subscription in Subscriptions)
        {
            cancelled += await subscription.Queue.CancelScheduledIfHeldAsync(sequenceNumbers).ConfigureAwait(false);
        }
        if (cancelled == 0)
        {
            throw FarmErrors.MessageNotFound(Name, sequenceNumbers[0], "is not a scheduled message waiting for its time");
        }
    }

    public Task<long[]?> FindRecordedSendAsync(SendName name, long sinceMs, CancellationToken cancellationToken) =>
        name.FindRecordAsync(_commits.Database, Id, sinceMs, cancellationToken);
}
