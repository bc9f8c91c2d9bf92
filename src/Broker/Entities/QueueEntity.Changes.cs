using Farm.Broker.Telemetry;
using Farm.ContainerStore.Containers;
using Google.Protobuf;

namespace Farm.Broker.Entities;

// State changes the broker makes on its own (lock expiry, MaxDeliveryCount, TTL): each is a write
// plus what to do in memory once it committed or failed.
internal sealed partial class QueueEntity
{
    private sealed record PendingChange(Action<ContainerWriteBatch> Write, Action OnCommitted, Action<Exception> OnFailed);

    /// <summary>Queues background changes; the sweep and receives do not wait for them.</summary>
    private void Flush(List<PendingChange> changes)
    {
        foreach (var change in changes)
        {
            _ = _commits.CommitAsync(change.Write, change.OnCommitted, change.OnFailed)
                .ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.OnlyOnFaulted);
        }
    }

    /// <summary>Drops a peek-lock: the message is available again, deferred again, or dead-lettered
    /// when it used up MaxDeliveryCount. Returns true when it became available.</summary>
    private bool ReleaseLockLocked(StoredMessage message, List<PendingChange> changes)
    {
        if (message.LockToken is { } token)
        {
            _locks.Remove(token);
        }
        message.LockToken = null;
        if (message.SubQueue == SubQueue.Main && message.DeliveryCount >= Settings.MaxDeliveryCount)
        {
            DeadLetterLocked(message, MaxDeliveryCountExceeded,
                $"Message could not be consumed after {message.DeliveryCount} delivery attempts.", null, changes);
            return false;
        }
        if (message.State == StoredMessageState.Deferred)
        {
            return false;
        }
        SubQueueOf(message.SubQueue == SubQueue.DeadLetter).Available.Add(message.SequenceNumber);
        return true;
    }

    private void DeadLetterLocked(StoredMessage message, string reason, string? description, Contracts.V1.Message? modified, List<PendingChange> changes)
    {
        message.Settling = true;
        _main.Available.Remove(message.SequenceNumber);
        var payload = modified?.ToPayload();
        var update = message.Written(Id, new MessageUpdate(Id, message.SequenceNumber, SubQueue.DeadLetter, StoredMessageState.Active,
            message.DeliveryCount, reason, description, null, payload));
        changes.Add(new PendingChange(
            batch => batch.Updates.Add(update),
            () =>
            {
                lock (_gate)
                {
                    RowCommittedLocked(message);
                    _main.Remove(message);
                    ForgetDeferredLocked(message);
                    message.SubQueue = SubQueue.DeadLetter;
                    message.State = StoredMessageState.Active;
                    message.DeadLetterReason = reason;
                    message.DeadLetterDescription = description;
                    if (payload is not null)
                    {
                        ReplacePayloadLocked(message, payload);
                    }
                    message.Settling = false;
                    AdmitLocked(_deadLetter, message);
                }
                _deadLetter.SignalArrived();
                BrokerMetrics.RecordDeadLettered(Name, reason);
            },
            _ => Unsettle(message)));
    }

    private void ExpireLocked(StoredMessage message, List<PendingChange> changes)
    {
        Counters.AddExpired();
        if (Settings.DeadLetteringOnMessageExpiration)
        {
            DeadLetterLocked(message, TtlExpired, TtlExpiredDescription, null, changes);
            return;
        }
        message.Settling = true;
        _main.Available.Remove(message.SequenceNumber);
        changes.Add(new PendingChange(
            batch => WriteRemoval(batch, message),
            () =>
            {
                lock (_gate)
                {
                    RemoveStored(_main, message);
                }
            },
            _ => Unsettle(message)));
    }

    /// <summary>
    /// Deletes messages taken out of <paramref name="sub"/> (marked settling): they leave memory once
    /// the delete committed; if it failed, <paramref name="onFailed"/> runs (by default they are
    /// available again as they were). Receive-and-delete, forwarding and purging use it.
    /// </summary>
    private Task DeleteTakenAsync(SubQueueState sub, List<StoredMessage> taken, Action? onFailed = null)
    {
        return _commits.CommitAsync(
            batch => WriteRemovals(batch, taken),
            onCommitted: () =>
            {
                lock (_gate)
                {
                    taken.ForEach(m => RemoveStored(sub, m));
                }
            },
            onFailed: _ => (onFailed ?? (() => taken.ForEach(Unsettle)))());
    }

    /// <summary>A write about this message failed: put it back where a receiver can find it.</summary>
    private void Unsettle(StoredMessage message)
    {
        var arrived = false;
        lock (_gate)
        {
            message.Settling = false;
            var sub = SubQueueOf(message.SubQueue == SubQueue.DeadLetter);
            if (!message.IsLocked && message.State == StoredMessageState.Active && sub.Messages.ContainsKey(message.SequenceNumber))
            {
                sub.Available.Add(message.SequenceNumber);
                arrived = true;
            }
        }
        if (arrived)
        {
            SubQueueOf(message.SubQueue == SubQueue.DeadLetter).SignalArrived();
        }
    }
}
