namespace Farm.Broker.Entities;

// Deleting the messages of a queue, a subscription or a dead-letter queue (an explorer's purge).
// It goes through the receive-and-delete path, a batch at a time: every delete is an ordinary
// commit, read-backs bring the stored part in as they would for a receiver, a subscription's
// copies go as their pointers do. So it is as safe as receiving, and as deep as the backlog: a
// 10,000,000-message queue takes minutes, in calls of bounded work the client repeats.
internal sealed partial class QueueEntity
{
    /// <summary>
    /// Deletes up to <paramref name="maxMessages"/> of the messages a receiver could take now, with a
    /// sequence number up to <paramref name="throughSequence"/> (0: the last one handed out now).
    /// Locked, deferred and scheduled messages stay. Returns how many went, the bound used, and
    /// whether deletable messages up to it are left.
    /// </summary>
    public async Task<(int Deleted, long Through, bool More)> DeleteMessagesAsync(bool deadLetter, int maxMessages, long throughSequence, CancellationToken cancellationToken)
    {
        var sub = SubQueueOf(deadLetter);
        long through;
        lock (_gate)
        {
            ThrowIfNotServing();
            through = throughSequence > 0 ? throughSequence : _nextSequence - 1;
        }
        var deleted = await TakeAndApplyAsync(sub, through, maxMessages, taken => DeleteTakenAsync(sub, taken), cancellationToken).ConfigureAwait(false);
        lock (_gate)
        {
            return (deleted, through, HasAvailableThrough(sub, through) || HasStoredThrough(sub, through));
        }
    }

    /// <summary>
    /// Takes what a receiver could take, up to <paramref name="through"/>, lowest first, and hands each
    /// batch to <paramref name="apply"/> (one commit), until <paramref name="maxMessages"/> went or none
    /// is left; waits for read-backs while the next ones are in the database only. Returns how many went.
    /// </summary>
    private async Task<int> TakeAndApplyAsync(SubQueueState sub, long through, int maxMessages, Func<List<StoredMessage>, Task> apply, CancellationToken cancellationToken)
    {
        var done = 0;
        while (done < maxMessages)
        {
            // Take the wake-up signal before looking, so a read-back in between is not missed.
            var arrived = sub.WhenArrived;
            var (taken, storedLeft) = TakeAvailable(sub, through, Math.Min(maxMessages - done, _options.MaxMessagesPerReceive));
            if (taken.Count > 0)
            {
                await apply(taken).ConfigureAwait(false);
                done += taken.Count;
                continue;
            }
            if (!storedLeft)
            {
                break;
            }
            // The next ones are in the database: a read-back is on its way (or the next sweep starts one).
            await Task.WhenAny(arrived, Task.Delay(_options.SweepInterval, _time, cancellationToken)).ConfigureAwait(false);
            cancellationToken.ThrowIfCancellationRequested();
        }
        return done;
    }

    /// <summary>Takes available messages up to <paramref name="through"/>, lowest first (marked settling), for a purge or a resubmit; says whether stored ones up to it are left.</summary>
    private (List<StoredMessage> Taken, bool StoredLeft) TakeAvailable(SubQueueState sub, long through, int max)
    {
        var taken = new List<StoredMessage>();
        lock (_gate)
        {
            ThrowIfNotServing();
            while (taken.Count < max && HasAvailableThrough(sub, through))
            {
                var message = sub.Messages[sub.Available.Min];
                sub.Available.Remove(message.SequenceNumber);
                message.Settling = true;
                taken.Add(message);
            }
            MaybeRefillLocked(sub);
            return (taken, HasStoredThrough(sub, through));
        }
    }

    private static bool HasAvailableThrough(SubQueueState sub, long through) => sub.Available.Count > 0 && sub.Available.Min <= through;

    /// <summary>Messages stored only come after the frontier: some may be up to <paramref name="through"/>.</summary>
    private static bool HasStoredThrough(SubQueueState sub, long through) => (sub.StoredCount > 0 || sub.TailPending) && sub.Frontier < through;
}
