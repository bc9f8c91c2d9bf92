using Farm.Broker.Entities;
using Farm.ContainerStore.Containers;

namespace Farm.Broker.Topics;

// Subscriptions that follow the topic without rows of their own (QueueEntity.Follower.cs has the
// model). The topic gives each subscription a slot, a bit in its copies' memberships, once (stored
// with the subscription's state, with the sequence number it follows from), decides at each send
// which of its messages a subscription gets that way, and tells the subscriptions how far its sends
// have been handed over (their done marks stay below the first send that has not).
internal sealed partial class TopicEntity
{
    /// <summary>The subscriptions by slot (null: a free slot); replaced as a whole, under the send lock.</summary>
    private Subscription?[] _bySlot = [];

    // The first sequence number of every send accepted and not yet handed to the subscriptions (or
    // failed), and the topic's next sequence number as of the last accept: the lowest not handed over
    // is the first of these. Guarded by its own lock, taken last (subscriptions ask under theirs).
    private readonly object _unhandedGate = new();
    private readonly SortedSet<long> _unhanded = [];
    // Of each unhanded send that took its numbers: the first after them (the next send's first).
    private readonly Dictionary<long, long> _unhandedEnds = [];
    private long _unhandedFloor = 1;

    /// <summary>
    /// Called, without ordering, between a send's accept and its fan-out with its first sequence
    /// number: a test holds a send there so a later one commits and is settled before it.
    /// </summary>
    internal Action<long>? AcceptedForTests { get; set; }

    /// <summary>The lowest sequence number whose send is not handed to the subscriptions yet (its next one when none is).</summary>
    private long LowestUnhanded()
    {
        lock (_unhandedGate)
        {
            return _unhanded.Count > 0 ? _unhanded.Min : _unhandedFloor;
        }
    }

    /// <summary>
    /// The end of the lowest send not handed over yet (its next one when none is): a subscription
    /// holding a message below it has every message below that one too (the lowest unhanded send
    /// goes to each subscription whole), so its delivery mark may count it. Without ordering a
    /// later send's messages can arrive first; they lie above this.
    /// </summary>
    private long LowestUnhandedEnd()
    {
        lock (_unhandedGate)
        {
            if (_unhanded.Count == 0)
            {
                return _unhandedFloor;
            }
            var first = _unhanded.Min;
            return _unhandedEnds.TryGetValue(first, out var end) ? end : first;
        }
    }

    /// <summary>Under the send lock, before a send takes sequence numbers from <paramref name="first"/> on.</summary>
    private void SendStarting(long first)
    {
        lock (_unhandedGate)
        {
            _unhanded.Add(first);
        }
    }

    /// <summary>Under the send lock, once the send took its sequence numbers (none: <paramref name="next"/> is still its first).</summary>
    private void SendNumbered(long first, long next)
    {
        lock (_unhandedGate)
        {
            _unhandedFloor = Math.Max(_unhandedFloor, next);
            if (next == first)
            {
                _unhanded.Remove(first);
            }
            else
            {
                _unhandedEnds[first] = next;
            }
        }
    }

    /// <summary>The send from <paramref name="first"/> was handed to the subscriptions, or failed.</summary>
    private void SendHanded(long first)
    {
        lock (_unhandedGate)
        {
            _unhanded.Remove(first);
            _unhandedEnds.Remove(first);
        }
    }

    /// <summary>
    /// Makes followers of the subscriptions that are not yet, when the store keeps them: the loaded
    /// ones that had a slot follow at once; the others get the lowest free slot, from the topic's next
    /// sequence number, once that is committed (until then, and if it fails, they keep rows). The
    /// task completes then (never failing).
    /// </summary>
    private Task StartFollowing(IEnumerable<(Subscription Subscription, FollowerState? Loaded)> subscriptions)
    {
        if (!_commits.Database.FollowsTopics)
        {
            return Task.CompletedTask;
        }
        var starting = new List<(Subscription Subscription, FollowerState Follower)>();
        lock (_sendGate)
        {
            var bySlot = _bySlot.ToList();
            foreach (var (subscription, loaded) in subscriptions)
            {
                if (loaded is not null)
                {
                    while (bySlot.Count <= loaded.Slot)
                    {
                        bySlot.Add(null);
                    }
                    bySlot[loaded.Slot] = subscription;
                    subscription.Queue.Follow(loaded, LowestUnhanded);
                }
            }
            foreach (var (subscription, loaded) in subscriptions)
            {
                if (loaded is null)
                {
                    var slot = bySlot.IndexOf(null);
                    if (slot < 0)
                    {
                        slot = bySlot.Count;
                        bySlot.Add(null);
                    }
                    bySlot[slot] = subscription;
                    starting.Add((subscription, new FollowerState(slot, _nextSequence, _nextSequence - 1)));
                }
            }
            Volatile.Write(ref _bySlot, [.. bySlot]);
            if (starting.Count == 0)
            {
                return Task.CompletedTask;
            }
            // Queued under the send lock: every send that sees these followers commits after them.
            return _commits.CommitAsync(
                    batch =>
                    {
                        foreach (var (subscription, follower) in starting)
                        {
                            batch.Followers[subscription.Id] = (follower.Slot, follower.FollowFrom);
                        }
                    },
                    onCommitted: () => starting.ForEach(s => s.Subscription.Queue.Follow(s.Follower, LowestUnhanded)),
                    onFailed: _ => { })
                .ContinueWith(static t => _ = t.Exception, TaskContinuationOptions.ExecuteSynchronously);
        }
    }

    /// <summary>Frees a removed subscription's slot (under the send lock). Its bits stay on old copies: the slot's next owner follows from later.</summary>
    private void FreeSlotLocked(Subscription removed)
    {
        var index = Array.IndexOf(_bySlot, removed);
        if (index >= 0)
        {
            var bySlot = (Subscription?[])_bySlot.Clone();
            bySlot[index] = null;
            Volatile.Write(ref _bySlot, bySlot);
        }
    }

    /// <summary>
    /// Turns the rows of a send that can go without into memberships: a follower's row for a message
    /// that has a copy, unchanged, active in the main queue, neither scheduled nor expiring, as far as
    /// the follower has room in memory for it (<see cref="QueueEntity.ReserveImplicit"/>). Returns each
    /// copy's membership (its sequence number to the bits of the followers that got it so).
    /// </summary>
    /// <param name="markable">
    /// No earlier send is on its way to the subscriptions: a delivery counted at send may be counted by
    /// the subscription's delivery mark (nothing below it can arrive later, undelivered). Else it is
    /// counted when delivered, as any first delivery.
    /// </param>
    private static Dictionary<long, byte[]>? MakeImplicit(List<Accepted> copies, Subscription[] subscriptions, FanOut fanOut, bool markable)
    {
        if (copies.Count == 0)
        {
            return null;
        }
        var copied = copies.Select(c => c.SequenceNumber).ToHashSet();
        Dictionary<long, byte[]>? members = null;
        var eligible = new List<int>();
        var sizes = new List<int>();
        for (var s = 0; s < subscriptions.Length; s++)
        {
            if (fanOut.Rows[s] is not { } rows || subscriptions[s].Queue.Follower is not { } follower)
            {
                continue;
            }
            var deliveries = fanOut.Deliveries[s]!;
            eligible.Clear();
            sizes.Clear();
            for (var r = 0; r < rows.Count; r++)
            {
                var row = rows[r];
                if (row.Payload is null && row.SubQueue == SubQueue.Main && row.State == StoredMessageState.Active
                    && row.ScheduledAtMs is null && row.ExpiresAtMs is null && row.SequenceNumber >= follower.FollowFrom
                    && copied.Contains(row.SequenceNumber))
                {
                    eligible.Add(r);
                    sizes.Add(deliveries[r].PayloadSize);
                }
            }
            if (eligible.Count == 0)
            {
                continue;
            }
            var granted = subscriptions[s].Queue.ReserveImplicit(sizes);
            if (granted == 0)
            {
                continue;
            }
            var implicitRows = new HashSet<int>();
            var uncounted = 0;
            for (var i = 0; i < granted; i++)
            {
                var r = eligible[i];
                var delivery = deliveries[r];
                delivery.Implicit = true;
                if (delivery.DurableCountAhead && markable)
                {
                    // A receiver waits for it with nothing before it: the subscription's delivery mark,
                    // written with the send, counts the delivery its row would have carried.
                    fanOut.Marks[s] = Math.Max(fanOut.Marks[s], delivery.SequenceNumber);
                }
                else if (delivery.DurableCountAhead)
                {
                    delivery.DurableCountAhead = false;
                    uncounted++;
                }
                implicitRows.Add(r);
                members ??= [];
                if (!members.TryGetValue(delivery.SequenceNumber, out var bits))
                {
                    bits = new byte[(subscriptions.Length + 7) / 8];
                    members[delivery.SequenceNumber] = bits;
                }
                var slot = follower.Slot;
                if (slot / 8 >= bits.Length)
                {
                    Array.Resize(ref bits, slot / 8 + 1);
                    members[delivery.SequenceNumber] = bits;
                }
                bits[slot / 8] |= (byte)(1 << (slot % 8));
            }
            if (uncounted > 0)
            {
                fanOut.CountedAhead[s] -= uncounted;
                subscriptions[s].Queue.EndCountedDeliveries(uncounted);
            }
            var kept = new List<MessageRecord>(rows.Count - granted);
            for (var r = 0; r < rows.Count; r++)
            {
                if (!implicitRows.Contains(r))
                {
                    kept.Add(rows[r]);
                }
            }
            fanOut.Rows[s] = kept.Count > 0 ? kept : null;
        }
        return members;
    }

    /// <summary>A send that made implicit messages failed: the room its followers reserved goes back.</summary>
    private static void EndImplicit(Subscription[] subscriptions, FanOut fanOut)
    {
        for (var s = 0; s < subscriptions.Length; s++)
        {
            if (fanOut.Deliveries[s] is { } deliveries)
            {
                var bytes = deliveries.Where(d => d.Implicit).Sum(d => (long)d.PayloadSize);
                subscriptions[s].Queue.EndImplicit(bytes);
            }
        }
    }

    /// <summary>
    /// Of the copies no row points at, those no follower still holds as an implicit message (a
    /// subscription that left the slot does not count: its slot's next owner follows from later).
    /// </summary>
    /// <remarks>Between two commits: no implicit message arrives or leaves meanwhile. One look per subscription, however many copies.</remarks>
    private List<UnreferencedCopy> NotHeldByFollowers(IReadOnlyList<UnreferencedCopy> unreferenced)
    {
        var named = unreferenced.Where(c => c.Members is not null).ToList();
        if (named.Count == 0)
        {
            return [.. unreferenced];
        }
        var held = new HashSet<long>();
        var (from, through) = (named.Min(c => c.SequenceNumber), named.Max(c => c.SequenceNumber));
        foreach (var subscription in Volatile.Read(ref _subscriptions))
        {
            subscription.Queue.AddImplicitHeldBetween(from, through, held);
        }
        return held.Count == 0 ? [.. unreferenced] : [.. unreferenced.Where(c => !held.Contains(c.SequenceNumber))];
    }

    /// <summary>The lowest implicit message active in a follower's main queue (long.MaxValue: none): the copy scan stops before it.</summary>
    private long LowestActiveImplicit()
    {
        var lowest = long.MaxValue;
        foreach (var subscription in Volatile.Read(ref _subscriptions))
        {
            lowest = Math.Min(lowest, subscription.Queue.LowestActiveImplicit);
        }
        return lowest;
    }
}
