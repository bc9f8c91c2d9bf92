using System.Runtime.ExceptionServices;
using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>
/// The MessageIds an entity with duplicate detection has seen within its window. The database
/// keeps every one (written with each send); memory keeps the newest few thousand exactly and the
/// older ones only as Bloom filters (<see cref="IdFilter"/>, about 14 bits an id), so the window
/// can hold millions of ids (issue "Bounded memory"). An id the filters may hold is looked up in the
/// database by key (<see cref="StartLookup"/>); a new id costs no read. After a takeover the newest
/// ids are loaded and the rest are added to the filters by a scan in pages while the entity serves;
/// until it is done every id not in memory is looked up.
/// Guarded by its entity's lock (the queue's, or the topic's send lock).
/// </summary>
/// <param name="findStored">Which of the given ids the database holds within the window at the given time (Unix ms).</param>
internal sealed class DuplicateHistory(int capacity, Func<IReadOnlyCollection<string>, long, Task<IReadOnlyCollection<string>>> findStored)
{
    /// <summary>The largest filter: past this many ids a new one starts (each filter goes once its last id expired).</summary>
    private const int MaxFilterCapacity = 4 * 1024 * 1024;

    private readonly record struct Seen(long Until, long Stamp);

    private readonly Dictionary<string, Seen> _recent = new(StringComparer.Ordinal);
    private readonly PriorityQueue<string, long> _expiry = new();
    private readonly List<IdFilter> _filters = [];
    private readonly List<long> _lookupStamps = [];
    private long _stamp;

    /// <summary>False while ids of the window are in the database only and in no filter (after a load that read only the newest).</summary>
    private bool _complete = true;

    /// <summary>More ids are kept exactly than the budget: the next prune moves the oldest into the filters.</summary>
    public bool OverBudget => _recent.Count > capacity;

    /// <summary>
    /// When <see cref="Prune"/> next has something to do (Unix ms): now while more ids are kept
    /// exactly than the budget; otherwise when the first id or filter expires (an entry of an id
    /// remembered again later may come sooner: that prune just passes it). MaxValue when empty.
    /// </summary>
    public long NextPruneDueMs(long now)
    {
        if (OverBudget)
        {
            return now;
        }
        var due = _expiry.TryPeek(out _, out var expires) ? expires : long.MaxValue;
        foreach (var filter in _filters)
        {
            due = Math.Min(due, filter.LastExpiresAtMs);
        }
        return due;
    }

    /// <summary>Ids kept exactly, for tests of the bound.</summary>
    internal int InMemoryCount => _recent.Count;

    /// <summary>Ids kept in the filters, for tests.</summary>
    internal long FilteredCount => _filters.Sum(f => (long)f.Count);

    public void Load(IEnumerable<DuplicateRecord> records, bool complete)
    {
        foreach (var record in records)
        {
            Remember(record.MessageId, record.ExpiresAtMs);
        }
        _complete = complete;
    }

    /// <summary>
    /// Adds the ids of the window that the load left in the database to the filters, in pages of
    /// the memory budget, taking <paramref name="gate"/> (the entity's lock) for each page. Runs while
    /// the entity serves; a failed read is tried again until <paramref name="stopped"/>.
    /// </summary>
    public async Task FillFiltersAsync(IContainerDatabase database, long entityId, object gate, TimeProvider time, TimeSpan retryAfter, Func<bool> stopped)
    {
        var after = "";
        while (!stopped())
        {
            IReadOnlyList<DuplicateRecord> page;
            try
            {
                page = await database.ReadDuplicatesAsync(entityId, after, time.GetUtcNow().ToUnixTimeMilliseconds(), capacity).ConfigureAwait(false);
            }
            catch (Exception)
            {
                // The database did not answer: sends look their ids up meanwhile.
                await Task.Delay(retryAfter, time).ConfigureAwait(false);
                continue;
            }
            lock (gate)
            {
                foreach (var record in page)
                {
                    if (!_recent.ContainsKey(record.MessageId))
                    {
                        AddToFilter(record.MessageId, record.ExpiresAtMs);
                    }
                }
                if (page.Count < capacity)
                {
                    _complete = true;
                    return;
                }
            }
            after = page[^1].MessageId;
        }
    }

    /// <summary>
    /// Starts the database lookups this batch needs before it can be accepted: ids that are not in
    /// memory but may be in the window (a filter says maybe, or the filters are still being filled)
    /// and not yet looked up for this send. Null when none is needed (the usual case). The lookup is
    /// registered: until <see cref="EndLookup"/>, no id remembered after it started leaves memory,
    /// so one sent meanwhile by another send is seen in memory when the batch is accepted.
    /// </summary>
    public Task? StartLookup(IReadOnlyList<Message> messages, long now, DuplicateLookup lookup)
    {
        if (lookup.Failure is { } failure)
        {
            lookup.Failure = null;
            failure.Throw();
        }
        List<string>? ask = null;
        foreach (var message in messages)
        {
            var id = message.MessageId;
            if (id.Length > 0 && !lookup.WasChecked(id) && !IsRecent(id, now) && MayBeStored(id, now))
            {
                (ask ??= []).Add(id);
            }
        }
        if (ask is null)
        {
            return null;
        }
        if (lookup.Stamp is null)
        {
            lookup.Stamp = _stamp;
            _lookupStamps.Add(_stamp);
        }
        return LookUpAsync(ask, now, lookup);
    }

    private async Task LookUpAsync(List<string> ids, long now, DuplicateLookup lookup)
    {
        try
        {
            var stored = await findStored(ids, now).ConfigureAwait(false);
            lookup.Stored.UnionWith(stored);
            lookup.Checked.UnionWith(ids);
        }
        catch (Exception e)
        {
            // Thrown to the sender on its next try: a send is never accepted on a guess.
            lookup.Failure = ExceptionDispatchInfo.Capture(e);
        }
    }

    /// <summary>The send that registered <paramref name="lookup"/> is done with it.</summary>
    public void EndLookup(DuplicateLookup lookup)
    {
        if (lookup.Stamp is { } stamp)
        {
            _lookupStamps.Remove(stamp);
            lookup.Stamp = null;
        }
    }

    /// <summary>
    /// False when <paramref name="messageId"/> was seen within the window (a duplicate); otherwise
    /// remembers it until now + window and returns the row to store with the send.
    /// <see cref="StartLookup"/> must have found nothing left to look up for this batch.
    /// </summary>
    public bool TryRemember(long entityId, string messageId, long now, TimeSpan window, DuplicateLookup lookup, out DuplicateRecord record)
    {
        record = null!;
        if (IsRecent(messageId, now) || lookup.FoundStored(messageId))
        {
            return false;
        }
        var until = now + (long)window.TotalMilliseconds;
        Remember(messageId, until);
        record = new DuplicateRecord(entityId, messageId, until);
        return true;
    }

    /// <summary>A send that remembered these ids failed: a retry must be stored, not taken for a duplicate.</summary>
    public void Forget(IEnumerable<DuplicateRecord> records)
    {
        foreach (var record in records)
        {
            _recent.Remove(record.MessageId);
        }
    }

    /// <summary>
    /// Forgets the ids whose window has passed, and moves the oldest ids past the memory budget into
    /// the filters. An id whose send has not committed (<paramref name="inFlight"/>) or that was
    /// remembered after a lookup in progress began stays in memory until that is over.
    /// </summary>
    public void Prune(long now, Func<string, bool> inFlight)
    {
        var oldestLookup = _lookupStamps.Count == 0 ? long.MaxValue : _lookupStamps.Min();
        while (_expiry.TryPeek(out var id, out var expires))
        {
            if (!_recent.TryGetValue(id, out var seen) || seen.Until != expires)
            {
                // Forgotten, or remembered again later with another expiry (a later entry stands for it).
                _expiry.Dequeue();
                continue;
            }
            if (expires <= now)
            {
                _expiry.Dequeue();
                _recent.Remove(id);
                continue;
            }
            if (_recent.Count <= capacity || inFlight(id) || seen.Stamp > oldestLookup)
            {
                break;
            }
            _expiry.Dequeue();
            _recent.Remove(id);
            AddToFilter(id, expires);
        }
        // A loop, not RemoveAll with a lambda: that would allocate its closure on every sweep.
        for (var i = _filters.Count - 1; i >= 0; i--)
        {
            if (_filters[i].LastExpiresAtMs <= now)
            {
                _filters.RemoveAt(i);
            }
        }
    }

    private bool IsRecent(string id, long now) => _recent.TryGetValue(id, out var seen) && seen.Until > now;

    private bool MayBeStored(string id, long now)
    {
        if (!_complete)
        {
            return true;
        }
        foreach (var filter in _filters)
        {
            if (filter.LastExpiresAtMs > now && filter.MightContain(id))
            {
                return true;
            }
        }
        return false;
    }

    private void Remember(string messageId, long until)
    {
        _recent[messageId] = new Seen(until, ++_stamp);
        _expiry.Enqueue(messageId, until);
    }

    private void AddToFilter(string id, long expires)
    {
        if (_filters.Count == 0 || _filters[^1].IsFull)
        {
            // Each new filter twice the last: a long window of many ids needs few of them.
            var size = _filters.Count == 0 ? capacity : Math.Min(_filters[^1].Capacity * 2, MaxFilterCapacity);
            _filters.Add(new IdFilter(size));
        }
        _filters[^1].Add(id, expires);
    }
}

/// <summary>One send's database lookups of MessageIds its entity's memory could not answer for.</summary>
internal sealed class DuplicateLookup
{
    // Made on the first lookup: every send to a queue carries one of these, and few ever look up.
    private HashSet<string>? _checked;
    private HashSet<string>? _stored;

    /// <summary>The ids looked up in the database so far.</summary>
    public HashSet<string> Checked => _checked ??= new(StringComparer.Ordinal);

    /// <summary>The looked-up ids the database holds within the window: duplicates.</summary>
    public HashSet<string> Stored => _stored ??= new(StringComparer.Ordinal);

    /// <summary>Whether <paramref name="id"/> was looked up (without making the set).</summary>
    public bool WasChecked(string id) => _checked?.Contains(id) == true;

    /// <summary>Whether the lookup found <paramref name="id"/> stored (without making the set).</summary>
    public bool FoundStored(string id) => _stored?.Contains(id) == true;

    /// <summary>Set while registered with the history (see <see cref="DuplicateHistory.StartLookup"/>).</summary>
    public long? Stamp { get; set; }

    public ExceptionDispatchInfo? Failure { get; set; }
}
