using Farm.ContainerStore.Containers;

namespace Farm.Broker.Topics;

// A topic's stored copies (issue "Bounded memory"). Each message the topic accepts is stored once,
// as the topic's row, and every subscription that wants it gets a row pointing at it. The copies
// stay in the container database: the topic keeps only their count and bytes (for
// MaxSizeInMegabytes), so a subscription a million messages behind pins nothing in memory.
//
// A copy goes once no subscription row points at it. Finding those is an indexed query run between
// two commits (CommitQueue.ReadAsync), then one delete through the commit queue. The scan walks the
// copies in sequence order up to the lowest active message of any subscription's main queue (below
// it a copy can only be pointed at by a deferred, scheduled or dead-lettered row) and remembers how
// far it got. A pointer row that goes later below that mark (a deferred message completed, a dead
// letter received) names its sequence number for the next scan to look at again. Only the topic's
// own fan-out ever writes a pointer row, with its copy in the same transaction, so a copy found
// unreferenced between two commits stays unreferenced until it is deleted.
internal sealed partial class TopicEntity
{
    /// <summary>Most copies one scan looks at: it runs in the commit loop, between two commits.</summary>
    private const int MaxCopiesPerScan = 1024;

    // Guards the fields below. Taken last and never held while calling out: subscriptions report
    // released copies from inside their own lock.
    private readonly object _copiesGate = new();
    private long _copiesCount;
    private long _copiesBytes;

    /// <summary>Every copy up to here was deleted or still pointed at when the scan passed it.</summary>
    private long _scannedThrough;

    /// <summary>Copies at or below <see cref="_scannedThrough"/> whose last pointer may have gone since.</summary>
    private readonly HashSet<long> _recheck = [];

    private bool _collectionDue = true;
    private bool _collecting;

    /// <summary>Completes once the copies stored before the load are counted (sends wait for it: MaxSizeInMegabytes needs the total).</summary>
    private readonly TaskCompletionSource _copiesCounted = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>
    /// The messages the topic holds, each counted once, and their bytes: its stored copies, and the
    /// messages stored as one subscription's row alone (see <see cref="StoreAloneOrCopy"/>).
    /// </summary>
    public (long Count, long Bytes) GetCounts()
    {
        long count, bytes;
        lock (_copiesGate)
        {
            (count, bytes) = (_copiesCount, _copiesBytes);
        }
        foreach (var subscription in Volatile.Read(ref _subscriptions))
        {
            var alone = subscription.Queue.StoredAlone;
            count += alone.Count;
            bytes += alone.Bytes;
        }
        return (count, bytes);
    }

    /// <summary>
    /// Counts the copies stored up to <paramref name="through"/> while the topic serves; sends made
    /// meanwhile add theirs (all after it). No copy is deleted before the count is in.
    /// </summary>
    /// <remarks>On a thread of its own: SQLite's reads run synchronously, and the count takes as long as the topic is deep.</remarks>
    private void StartCountingCopies(long through)
    {
        if (through <= 0)
        {
            // Nothing was ever stored: nothing to count, and the first sends need not wait.
            _copiesCounted.TrySetResult();
            return;
        }
        _ = Task.Run(() => CountCopiesAsync(through));
    }

    private async Task CountCopiesAsync(long through)
    {
        while (true)
        {
            try
            {
                var (count, bytes) = await _commits.Database.CountActiveAsync(Id, SubQueue.Main, 0, through).ConfigureAwait(false);
                lock (_copiesGate)
                {
                    _copiesCount += count;
                    _copiesBytes += bytes;
                }
                _copiesCounted.TrySetResult();
                return;
            }
            catch (Exception) when (_unloaded is null)
            {
                // The database did not answer: try again shortly.
                await Task.Delay(_options.SweepInterval, _time).ConfigureAwait(false);
            }
            catch (Exception)
            {
                _copiesCounted.TrySetResult();
                return;
            }
        }
    }

    /// <summary>A send committed copies.</summary>
    private void CopiesStored(int count, long bytes)
    {
        if (count == 0)
        {
            return;
        }
        lock (_copiesGate)
        {
            _copiesCount += count;
            _copiesBytes += bytes;
        }
    }

    /// <summary>
    /// A subscription's row pointing at copy <paramref name="sequence"/> is gone (called after its
    /// delete committed): the copy may have no pointer left.
    /// </summary>
    private void OnCopyReleased(long sequence)
    {
        lock (_copiesGate)
        {
            if (sequence <= _scannedThrough)
            {
                _recheck.Add(sequence);
            }
            _collectionDue = true;
        }
    }

    /// <summary>A subscription's rows were purged (it was deleted): every copy may have lost its pointers; scan them all again.</summary>
    public void RescanCopies()
    {
        lock (_copiesGate)
        {
            _scannedThrough = 0;
            _recheck.Clear();
            _collectionDue = true;
        }
        MaybeCollectCopies();
    }

    private void MaybeCollectCopies()
    {
        lock (_copiesGate)
        {
            if (_collecting || !_collectionDue || !_copiesCounted.Task.IsCompleted || _unloaded is not null)
            {
                return;
            }
            _collecting = true;
            _collectionDue = false;
        }
        _ = CollectCopiesAsync();
    }

    private async Task CollectCopiesAsync()
    {
        long[] recheck = [];
        CopyScan? scan = null;
        var more = false;
        try
        {
            await _commits.ReadAsync(async database =>
            {
                long after, through;
                lock (_copiesGate)
                {
                    after = _scannedThrough;
                    recheck = [.. _recheck];
                    _recheck.Clear();
                }
                lock (_sendGate)
                {
                    through = _nextSequence - 1;
                }
                // A follower's active implicit messages still need their copies, as a row's do (no row says so).
                through = Math.Min(through, LowestActiveImplicit() - 1);
                var subscriptions = Volatile.Read(ref _subscriptions).Select(s => s.Id).ToArray();
                scan = await database.ScanCopiesAsync(Id, subscriptions, after, Math.Max(after, through), MaxCopiesPerScan, recheck).ConfigureAwait(false);
                // Between two commits: no implicit message arrives or leaves while this looks.
                scan = scan with { Unreferenced = NotHeldByFollowers(scan.Unreferenced) };
                lock (_copiesGate)
                {
                    // Set before this read ends: a pointer deleted by a later commit finds the new mark.
                    _scannedThrough = Math.Max(_scannedThrough, scan.ScannedThrough);
                    more = scan.ScannedThrough < through && scan.ScannedThrough > after;
                }
            }).ConfigureAwait(false);
            if (scan is { Unreferenced.Count: > 0 } found)
            {
                var keys = found.Unreferenced.Select(c => new MessageKey(Id, c.SequenceNumber)).ToList();
                var bytes = found.Unreferenced.Sum(c => c.PayloadSize);
                await _commits.CommitAsync(
                    batch => batch.CopyDeletes.AddRange(keys),
                    onCommitted: () =>
                    {
                        lock (_copiesGate)
                        {
                            _copiesCount -= keys.Count;
                            _copiesBytes -= bytes;
                        }
                    }).ConfigureAwait(false);
            }
        }
        catch (Exception)
        {
            // The database did not answer or the container closed: look again on a later sweep.
            lock (_copiesGate)
            {
                _recheck.UnionWith(recheck);
                _recheck.UnionWith(scan?.Unreferenced.Select(c => c.SequenceNumber) ?? []);
                _collectionDue = true;
            }
        }
        finally
        {
            lock (_copiesGate)
            {
                _collecting = false;
                _collectionDue |= more;
            }
        }
        if (more)
        {
            // A long stretch to scan (after a takeover or a subscription's delete): go on at once.
            MaybeCollectCopies();
        }
    }
}
