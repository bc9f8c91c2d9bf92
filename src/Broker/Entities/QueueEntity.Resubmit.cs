using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

// Resubmitting dead-lettered messages (an explorer's "resubmit"): each goes back to the queue as a
// new message (a subscription's: in place, see CommitReinstateAsync) with the same body and properties (a new sequence number and enqueued time, a fresh
// delivery count and time to live), and leaves the dead-letter queue, in one transaction: a crash
// leaves it in one place or the other, never both, never neither. Duplicate detection does not see
// resubmits (the same MessageId coming back on purpose is not a duplicate).
internal sealed partial class QueueEntity
{
    /// <summary>
    /// Resubmits the dead-lettered messages <paramref name="sequenceNumbers"/> names (all or none),
    /// or else up to <paramref name="maxMessages"/>, lowest sequence number first, reading stored
    /// ones back as it goes. Returns how many went back and whether more dead letters are left.
    /// </summary>
    public async Task<(int Resubmitted, bool More)> ResubmitDeadLettersAsync(IReadOnlyList<long> sequenceNumbers, int maxMessages, CancellationToken cancellationToken)
    {
        // A subscription's dead letters share their topic's stored body: they go back in place.
        Func<List<StoredMessage>, Task> commit = CopiesOf != 0 ? CommitReinstateAsync : CommitResubmitAsync;
        if (sequenceNumbers.Count > 0)
        {
            var named = TakeNamedDeadLetters(sequenceNumbers);
            await commit(named).ConfigureAwait(false);
            return (named.Count, HasDeadLetters());
        }
        var resubmitted = await TakeAndApplyAsync(_deadLetter, long.MaxValue, maxMessages, commit, cancellationToken).ConfigureAwait(false);
        return (resubmitted, HasDeadLetters());
    }

    private bool HasDeadLetters()
    {
        lock (_gate)
        {
            return _deadLetter.Available.Count > 0 || _deadLetter.StoredCount > 0 || _deadLetter.TailPending;
        }
    }

    /// <summary>Takes the named dead letters for resubmitting, after checking every one of them is there and free.</summary>
    private List<StoredMessage> TakeNamedDeadLetters(IReadOnlyList<long> sequenceNumbers)
    {
        lock (_gate)
        {
            ThrowIfNotServing();
            var taken = new List<StoredMessage>();
            foreach (var sequence in sequenceNumbers.Distinct())
            {
                if (!_deadLetter.Messages.TryGetValue(sequence, out var message))
                {
                    throw FarmErrors.MessageNotFound(Name, sequence, sequence > _deadLetter.Frontier && (_deadLetter.StoredCount > 0 || _deadLetter.TailPending)
                        ? "is past the dead-letter queue's message cache, in its database only: resubmit by count, which reads it back in order"
                        : "is not in the dead-letter queue");
                }
                if (message.IsLocked || message.Settling || !_deadLetter.Available.Contains(sequence))
                {
                    throw FarmErrors.MessageNotFound(Name, sequence, "is held by a receiver of the dead-letter queue");
                }
                taken.Add(message);
            }
            foreach (var message in taken)
            {
                _deadLetter.Available.Remove(message.SequenceNumber);
                message.Settling = true;
            }
            return taken;
        }
    }

    /// <summary>
    /// One commit: the new messages in, the dead letters out. Sequence numbers are handed out and
    /// the commit queued under the lock, as a send does, so commits follow sequence order.
    /// </summary>
    private Task CommitResubmitAsync(List<StoredMessage> deadLetters)
    {
        if (deadLetters.Count == 0)
        {
            return Task.CompletedTask;
        }
        lock (_gate)
        {
            var now = NowMs;
            var settings = Settings;
            var fresh = new List<StoredMessage>(deadLetters.Count);
            var records = new List<MessageRecord>(deadLetters.Count);
            foreach (var deadLetter in deadLetters)
            {
                var parsed = deadLetter.ParseMessage();
                var message = new StoredMessage
                {
                    SequenceNumber = _nextSequence++,
                    Payload = deadLetter.Payload,
                    PayloadSize = deadLetter.PayloadSize,
                    EnqueuedAtMs = now,
                    State = StoredMessageState.Active,
                    ExpiresAtMs = ExpiryOf(parsed, settings, now),
                };
                fresh.Add(message);
                records.Add(new MessageRecord
                {
                    EntityId = Id,
                    SequenceNumber = message.SequenceNumber,
                    State = StoredMessageState.Active,
                    EnqueuedAtMs = now,
                    ExpiresAtMs = message.ExpiresAtMs,
                    MessageId = parsed.MessageId is { Length: > 0 } id ? id : null,
                    Payload = message.Payload,
                    PayloadSize = message.PayloadSize,
                });
            }
            var nextSequence = _nextSequence;
            return _commits.CommitAsync(
                batch =>
                {
                    batch.Inserts.AddRange(records);
                    WriteRemovals(batch, deadLetters);
                    batch.SequenceCounters[Id] = Math.Max(batch.SequenceCounters.GetValueOrDefault(Id), nextSequence);
                },
                onCommitted: () =>
                {
                    lock (_gate)
                    {
                        deadLetters.ForEach(m => RemoveStored(_deadLetter, m));
                        fresh.ForEach(m => AdmitLocked(_main, m));
                    }
                    _main.SignalArrived();
                    if (Settings.ForwardTo is not null)
                    {
                        StartForwarding();
                    }
                },
                onFailed: _ => deadLetters.ForEach(Unsettle));
        }
    }

    /// <summary>
    /// A subscription's resubmit: its dead letters are copies of topic messages whose body the topic
    /// stores once for every subscription, so each goes back to this subscription alone (the topic's
    /// other subscriptions do not see it again) under its own sequence number, active, with a fresh
    /// delivery count and no dead-letter reason: one row update, in one commit. It keeps its time to
    /// live (the topic's copy expires when it does).
    /// </summary>
    private Task CommitReinstateAsync(List<StoredMessage> deadLetters)
    {
        if (deadLetters.Count == 0)
        {
            return Task.CompletedTask;
        }
        var updates = deadLetters.Select(m => m.Written(Id, new MessageUpdate(Id, m.SequenceNumber, SubQueue.Main, StoredMessageState.Active, 0, null, null, null, null))).ToList();
        return _commits.CommitAsync(
            batch => batch.Updates.AddRange(updates),
            onCommitted: () =>
            {
                lock (_gate)
                {
                    foreach (var message in deadLetters)
                    {
                        // Not RemoveStored: the message does not leave the entity, so its topic must not hear it is gone.
                        _deadLetter.Remove(message);
                        message.SubQueue = SubQueue.Main;
                        message.State = StoredMessageState.Active;
                        message.DeliveryCount = 0;
                        message.DeadLetterReason = null;
                        message.DeadLetterDescription = null;
                        message.Settling = false;
                        // At or below the frontier a message must be in memory (a read-back starts after
                        // it): when it does not fit, the frontier moves below it and it is read back in order.
                        if (message.SequenceNumber <= _main.Frontier && OverBudget(ActiveBytesLocked(_main), message.PayloadSize))
                        {
                            LowerFrontierLocked(_main, message.SequenceNumber - 1);
                        }
                        AdmitLocked(_main, message);
                    }
                }
                _main.SignalArrived();
            },
            onFailed: _ => deadLetters.ForEach(Unsettle));
    }
}
