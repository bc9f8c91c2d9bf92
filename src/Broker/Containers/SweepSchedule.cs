using Farm.Broker.Entities;

namespace Farm.Broker.Containers;

/// <summary>
/// When each entity of a container is next due for the sweep (Unix ms), so that a sweep tick visits
/// the due entities only, not all of them: 15,000 quiet queues were 60,000 visits a second, a fifth
/// of an idle node's CPU. An entity is held for one time at a time (see
/// <see cref="QueueEntity.ScheduleSweep"/>): it adds an entry only when it is due sooner than it is
/// held for, and an entry that is not the one it is held for any more is passed by when it comes due.
/// </summary>
internal sealed class SweepSchedule
{
    private readonly Lock _gate = new();
    private readonly PriorityQueue<QueueEntity, long> _due = new();

    /// <summary>Entries held, the stale ones included (for tests).</summary>
    public int Count
    {
        get
        {
            lock (_gate)
            {
                return _due.Count;
            }
        }
    }

    public void Add(QueueEntity entity, long dueMs)
    {
        lock (_gate)
        {
            _due.Enqueue(entity, dueMs);
        }
    }

    /// <summary>
    /// Moves the entities due at <paramref name="nowMs"/> into <paramref name="due"/>, each claimed
    /// (no longer held for a time: what its sweep schedules next adds a new entry).
    /// </summary>
    public void TakeDue(long nowMs, List<QueueEntity> due)
    {
        lock (_gate)
        {
            while (_due.TryPeek(out var entity, out var at) && at <= nowMs)
            {
                _due.Dequeue();
                if (entity.TryClaimSweep(at))
                {
                    due.Add(entity);
                }
            }
        }
    }
}
