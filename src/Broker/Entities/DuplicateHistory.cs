using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

/// <summary>
/// The MessageIds an entity with duplicate detection has seen within its window, with when each
/// is forgotten. Guarded by its entity's lock. The database keeps the same history (written with
/// each send), so a takeover loads it back.
/// </summary>
internal sealed class DuplicateHistory
{
    private readonly Dictionary<string, long> _seenUntil = new(StringComparer.Ordinal);
    private readonly PriorityQueue<string, long> _expiry = new();

    public void Load(IEnumerable<DuplicateRecord> records)
    {
        foreach (var record in records)
        {
            Remember(record.MessageId, record.ExpiresAtMs);
        }
    }

    /// <summary>
    /// False when <paramref name="messageId"/> was seen within the window (a duplicate); otherwise
    /// remembers it until now + window and returns the row to store with the send.
    /// </summary>
    public bool TryRemember(long entityId, string messageId, long now, TimeSpan window, out DuplicateRecord record)
    {
        record = null!;
        if (_seenUntil.TryGetValue(messageId, out var seenUntil) && seenUntil > now)
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
            _seenUntil.Remove(record.MessageId);
        }
    }

    /// <summary>Forgets the ids whose window has passed.</summary>
    public void Prune(long now)
    {
        while (_expiry.TryPeek(out var id, out var expires) && expires <= now)
        {
            _expiry.Dequeue();
            if (_seenUntil.TryGetValue(id, out var current) && current <= now)
            {
                _seenUntil.Remove(id);
            }
        }
    }

    private void Remember(string messageId, long until)
    {
        _seenUntil[messageId] = until;
        _expiry.Enqueue(messageId, until);
    }
}
