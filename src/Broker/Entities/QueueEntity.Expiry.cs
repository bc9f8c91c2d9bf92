using Farm.Broker.Containers;
using Farm.Broker.Telemetry;
using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

// Time to live of the messages past the message cache (issue "Bounded memory"). Memory expires the
// messages it holds through its TTL heap (SweepLocked); the ones only in the database expire there:
// the sweep asks the index messages_by_expiry for active messages after the frontier whose expiry
// passed, and deletes or dead-letters them in the very next commit, before any read-back could take
// them into memory (CommitQueue.ReadThenCommitAsync). A deep queue whose messages expire so shrinks
// on time, its dead-letter queue fills, and neither waits for a receiver to reach them.
internal sealed partial class QueueEntity
{
    public const string TtlExpiredDescription = "The message expired and was dead lettered.";

    /// <summary>How often a queue with messages in the database only looks for expired ones, when the last look found none.</summary>
    private static readonly TimeSpan StoredExpiryInterval = TimeSpan.FromSeconds(1);

    /// <summary>A look for expired stored messages is queued or running.</summary>
    private bool _expiringStored;

    /// <summary>When the next look is due (Unix ms): at once after one that found some, else a while later.</summary>
    private long _storedExpiryDueMs;

    private void MaybeExpireStoredLocked(long now)
    {
        // While the stored tail of a takeover is being counted the count and an expiry could cross: wait for it.
        if (_main.StoredCount <= 0 || _main.TailPending || _expiringStored || _unloaded is not null || now < _storedExpiryDueMs)
        {
            return;
        }
        _expiringStored = true;
        _ = ExpireStoredAsync(now);
    }

    /// <summary>Expires stored messages a batch at a time (each its own commit, so sends go between) until none is left.</summary>
    private async Task ExpireStoredAsync(long now)
    {
        try
        {
            var found = true;
            while (found && _unloaded is null)
            {
                found = false;
                await _commits.ReadThenCommitAsync(async database =>
                {
                    long after;
                    lock (_gate)
                    {
                        after = _main.Frontier;
                    }
                    var rows = await database.ReadExpiredAsync(Id, after, now, _options.MaxMessagesPerRefill, _options.MaxReceiveResponseBytes, CopiesOf).ConfigureAwait(false);
                    var expiring = ExpiringStoredRows(rows);
                    found = expiring.Count > 0;
                    return found ? ExpireStored(expiring, Settings.DeadLetteringOnMessageExpiration) : null;
                }).ConfigureAwait(false);
            }
        }
        catch (Exception)
        {
            // The database is unreachable, the write failed or the container closed: a later sweep tries again.
        }
        finally
        {
            lock (_gate)
            {
                _expiringStored = false;
                _storedExpiryDueMs = NowMs + (long)StoredExpiryInterval.TotalMilliseconds;
            }
        }
    }

    /// <summary>
    /// The rows that are still in the database only: after the frontier and not in memory (a
    /// scheduled message that came due is), in sequence order.
    /// </summary>
    private List<MessageRecord> ExpiringStoredRows(IReadOnlyList<MessageRecord> rows)
    {
        lock (_gate)
        {
            return _unloaded is not null ? []
                : [.. rows.Where(r => r.SequenceNumber > _main.Frontier && !_main.Messages.ContainsKey(r.SequenceNumber)).OrderBy(r => r.SequenceNumber)];
        }
    }

    /// <summary>
    /// Deletes the expired rows, or moves them to the dead-letter queue (reason TTLExpiredException),
    /// and once that committed takes them off the stored count. A subscription's row that points at a
    /// topic copy already gone is deleted either way: nothing could be delivered from it.
    /// </summary>
    private CommitQueue.FollowUpWrite ExpireStored(List<MessageRecord> rows, bool deadLetter) => new(
        batch =>
        {
            foreach (var row in rows)
            {
                if (deadLetter && row.Payload is not null)
                {
                    batch.Updates.Add(new MessageUpdate(Id, row.SequenceNumber, SubQueue.DeadLetter, StoredMessageState.Active,
                        row.DeliveryCountUnder(_main.DeliveredThrough), TtlExpired, TtlExpiredDescription, null, null));
                }
                else
                {
                    batch.Deletes.Add(new MessageKey(Id, row.SequenceNumber));
                }
            }
        },
        () =>
        {
            var deadLettered = false;
            lock (_gate)
            {
                foreach (var row in rows)
                {
                    _main.UncountStored(row.SequenceNumber, row.PayloadSize);
                    Counters.AddExpired();
                    if (deadLetter && row.Payload is not null)
                    {
                        var message = StoredMessage.FromRecord(row, _main.DeliveredThrough);
                        message.SubQueue = SubQueue.DeadLetter;
                        message.DeadLetterReason = TtlExpired;
                        message.DeadLetterDescription = TtlExpiredDescription;
                        // At or below the dead-letter queue's frontier a message must be in memory (a
                        // read-back starts after the frontier): when it does not fit, the frontier
                        // moves down below it instead, and it is counted as stored, to be read in order.
                        if (message.SequenceNumber <= _deadLetter.Frontier && OverBudget(ActiveBytesLocked(_deadLetter), message.PayloadSize))
                        {
                            LowerFrontierLocked(_deadLetter, message.SequenceNumber - 1);
                        }
                        AdmitLocked(_deadLetter, message);
                        BrokerMetrics.RecordDeadLettered(Name, TtlExpired);
                        deadLettered = true;
                    }
                    else
                    {
                        MessageLeftLocked(row.SequenceNumber, row.StoredAlone, row.PayloadSize);
                    }
                }
            }
            if (deadLettered)
            {
                _deadLetter.SignalArrived();
            }
        },
        static _ =>
        {
            // Nothing changed in memory before the commit: the rows stay stored, and the next look finds them again.
        });
}
