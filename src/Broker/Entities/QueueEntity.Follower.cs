using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

// A subscription that follows its topic (perf/README "Session 52"). A message the topic's fan-out
// hands it unchanged while it has room in memory gets no row of its own: the topic's copy names the
// subscription in its membership (a bit at the subscription's slot) in the send's own commit, and
// the subscription holds the message in memory (implicit). A fan-out of 1,000 subscriptions then
// writes one membership instead of 1,000 rows, and completing in order deletes none:
//
// - The done mark: every implicit message at or below it was settled. A removal (complete,
//   receive-and-delete, purge) writes the mark up to just below the lowest implicit message still
//   held here (and below the topic's lowest send not handed to its subscriptions yet, which may
//   still bring one); one write per subscription and commit.
// - A removal above the mark writes a tombstone: the message's membership must not bring it back.
//   Tombstones go once the mark passes them.
// - An implicit message's first write (a delivery count, a deferral, a dead-lettering) inserts its
//   row (MessageUpdate.InsertIfMissing); the row then overrides the membership.
// - A row this subscription has at a sequence number its copy's membership names overrides that
//   membership, so deleting such a row above the mark also writes a tombstone; the fan-out's own
//   rows are known not to (StoredMessage.WithoutMembership).
//
// Implicit messages are always in memory here (the topic reserves room for them, ReserveImplicit)
// until they leave; a load reads them all back from the memberships. The store must keep followers
// (IContainerDatabase.FollowsTopics).
internal sealed partial class QueueEntity
{
    /// <summary>This subscription's slot and start in its topic's memberships, and its done mark as loaded (null: not a follower).</summary>
    private FollowerState? _follower;

    /// <summary>Implicit messages held here that have not left (guarded by the entity lock).</summary>
    private readonly SortedSet<long> _implicitHeld = [];

    /// <summary>Implicit messages whose removal is written in the commit group <see cref="_leavingGroup"/>.</summary>
    private readonly HashSet<long> _leaving = [];
    private long _leavingGroup = -1;

    /// <summary>What <see cref="LowestStayingLocked"/> found in the commit group <see cref="_lowestStayingGroup"/>.</summary>
    private long _lowestStaying;
    private long _lowestStayingGroup = -2;

    /// <summary>Bytes the topic's fan-outs reserved for implicit messages not admitted yet (see <see cref="ReserveImplicit"/>).</summary>
    private long _implicitReservedBytes;

    /// <summary>
    /// The topic's lowest sequence number whose send has not been handed to its subscriptions yet
    /// (its next sequence number when none): the done mark stays below it.
    /// </summary>
    private Func<long>? _lowestUnhanded;

    /// <summary>
    /// The end of the topic's lowest send not handed over yet: a subscription's delivery mark counts
    /// only first deliveries below it (a topic without ordering can hand a later send over first;
    /// what lies above is counted by its row). Null in a queue, whose sends arrive in order.
    /// </summary>
    private Func<long>? _deliveryMarkBound;

    /// <summary>Bounds this subscription's delivery mark by its topic's sends (<see cref="_deliveryMarkBound"/>).</summary>
    public void BoundDeliveryMarkBy(Func<long> lowestUnhandedEnd)
    {
        lock (_gate)
        {
            _deliveryMarkBound = lowestUnhandedEnd;
        }
    }

    /// <summary>The follower state (slot, start and the done mark as loaded), or null.</summary>
    public FollowerState? Follower
    {
        get
        {
            lock (_gate)
            {
                return _follower;
            }
        }
    }

    /// <summary>
    /// The subscription follows its topic from now: <paramref name="follower"/> is durable (loaded, or
    /// its slot committed). <paramref name="lowestUnhanded"/> is the topic's, see <see cref="_lowestUnhanded"/>.
    /// </summary>
    public void Follow(FollowerState follower, Func<long> lowestUnhanded)
    {
        lock (_gate)
        {
            _lowestUnhanded = lowestUnhanded;
            _follower = follower;
        }
    }

    /// <summary>
    /// The lowest implicit message held here that is active in the main queue (long.MaxValue: none):
    /// the topic's copies from it on are still needed, as a row's lowest active message says for rows.
    /// The others (deferred, dead-lettered) are found one by one (<see cref="AddImplicitHeldBetween"/>).
    /// </summary>
    public long LowestActiveImplicit
    {
        get
        {
            lock (_gate)
            {
                if (_implicitHeld.Count == 0)
                {
                    return long.MaxValue;
                }
                // Usually the lowest held is active: Min walks the tree, an enumeration allocates (a
                // copy scan asks every subscription).
                if (_main.Messages.TryGetValue(_implicitHeld.Min, out var lowest) && lowest.State == StoredMessageState.Active)
                {
                    return _implicitHeld.Min;
                }
                foreach (var sequence in _implicitHeld)
                {
                    if (_main.Messages.TryGetValue(sequence, out var message) && message.State == StoredMessageState.Active)
                    {
                        return sequence;
                    }
                }
                return long.MaxValue;
            }
        }
    }

    /// <summary>The implicit messages held here from <paramref name="from"/> through <paramref name="through"/> (their copies are still needed).</summary>
    public void AddImplicitHeldBetween(long from, long through, HashSet<long> held)
    {
        lock (_gate)
        {
            if (_implicitHeld.Count > 0 && from <= through)
            {
                held.UnionWith(_implicitHeld.GetViewBetween(from, through));
            }
        }
    }

    /// <summary>
    /// For a fan-out to this follower: how many of the messages of <paramref name="sizes"/> (in order)
    /// may come without a row, held in memory: none while messages wait in the database only (they
    /// come first), and no more than the message cache has room for. The room is held until the
    /// messages arrive (<see cref="AdmitImplicitLocked"/>), or given back by <see cref="EndImplicit"/>
    /// when the send failed (or by <see cref="AcceptFanOut"/> when the subscription went meanwhile).
    /// </summary>
    public int ReserveImplicit(IReadOnlyList<int> sizes)
    {
        lock (_gate)
        {
            if (_follower is null || _unloaded is not null || _deleted || _main.StoredCount > 0 || _main.TailPending)
            {
                return 0;
            }
            var granted = 0;
            var active = ActiveBytesLocked(_main) + _implicitReservedBytes;
            while (granted < sizes.Count && !OverBudget(active, sizes[granted]))
            {
                active += sizes[granted];
                _implicitReservedBytes += sizes[granted];
                granted++;
            }
            return granted;
        }
    }

    /// <summary>A fan-out's commit wrote this subscription's delivery mark (implicit messages counted as delivered at send).</summary>
    public void NoteDeliveryMark(long mark) => RaiseDeliveredThrough(_main, mark);

    /// <summary>A send that reserved room here for implicit messages (<see cref="ReserveImplicit"/>) failed: the room goes back.</summary>
    public void EndImplicit(long bytes)
    {
        if (bytes > 0)
        {
            lock (_gate)
            {
                _implicitReservedBytes -= bytes;
            }
        }
    }

    /// <summary>An implicit message arrived (its send committed): into memory, where its reservation made room.</summary>
    private void AdmitImplicitLocked(StoredMessage message)
    {
        _implicitReservedBytes -= message.PayloadSize;
        _implicitHeld.Add(message.SequenceNumber);
        _main.Add(message);
        _main.Available.Add(message.SequenceNumber);
        if (_main.StoredCount == 0 && !_main.TailPending)
        {
            _main.Frontier = Math.Max(_main.Frontier, message.SequenceNumber);
        }
    }

    /// <summary>
    /// An implicit message's row committed (a deferral or dead-lettering wrote it): the row keeps the
    /// message from now on, so the done mark may pass it (a message parked for days would hold every
    /// later complete to a tombstone). Its removal still writes a tombstone, which the mark takes.
    /// </summary>
    private void RowCommittedLocked(StoredMessage message)
    {
        if (message.Implicit)
        {
            _implicitHeld.Remove(message.SequenceNumber);
        }
    }

    /// <summary>A message that leaves the entity for good, as its removal writes it.</summary>
    private readonly record struct Removal(long SequenceNumber, bool Implicit, bool RowMayExist, bool MayHaveMembership)
    {
        public static Removal Of(StoredMessage message) =>
            new(message.SequenceNumber, message.Implicit, !message.Implicit || message.RowMayExist, !message.WithoutMembership);
    }

    private void WriteRemoval(ContainerWriteBatch batch, StoredMessage message)
    {
        // A queue's complete, on its hottest path: its delete, nothing allocated on the way.
        if (Volatile.Read(ref _follower) is null)
        {
            batch.Deletes.Add(new MessageKey(Id, message.SequenceNumber));
            return;
        }
        WriteRemovals(batch, [Removal.Of(message)]);
    }

    private void WriteRemovals(ContainerWriteBatch batch, IEnumerable<StoredMessage> messages)
    {
        if (Volatile.Read(ref _follower) is null)
        {
            foreach (var message in messages)
            {
                batch.Deletes.Add(new MessageKey(Id, message.SequenceNumber));
            }
            return;
        }
        WriteRemovals(batch, messages.Select(Removal.Of).ToList());
    }

    /// <summary>
    /// Writes the removal of messages from this entity (called in the commit loop, as its commit's
    /// write). A queue or a subscription that does not follow deletes their rows (the overloads
    /// above); a follower (it never stops being one) writes its done mark and what it passes (see
    /// the top of this file).
    /// </summary>
    private void WriteRemovals(ContainerWriteBatch batch, IReadOnlyList<Removal> removals)
    {
        lock (_gate)
        {
            var follower = _follower!;
            var group = _commits.GroupNumber;
            if (_leavingGroup != group)
            {
                _leaving.Clear();
                _leavingGroup = group;
            }
            foreach (var removal in removals)
            {
                if (removal.Implicit)
                {
                    _leaving.Add(removal.SequenceNumber);
                }
            }
            var done = DoneThroughLocked(follower);
            var writeMark = done > follower.DoneThrough;
            foreach (var removal in removals)
            {
                var key = new MessageKey(Id, removal.SequenceNumber);
                if (removal.SequenceNumber <= done || removal.SequenceNumber < follower.FollowFrom)
                {
                    // No membership can bring it back: only a row to go, if it has one.
                    if (removal.Implicit)
                    {
                        if (removal.RowMayExist)
                        {
                            // It may or may not have its row: a tombstone replaces either, and the mark
                            // written in this commit takes it.
                            batch.Tombstones.Add(key);
                            writeMark = true;
                        }
                    }
                    else
                    {
                        batch.Deletes.Add(key);
                    }
                }
                else if (removal.Implicit || removal.MayHaveMembership)
                {
                    batch.Tombstones.Add(key);
                }
                else
                {
                    batch.Deletes.Add(key);
                }
            }
            if (writeMark)
            {
                batch.DoneThrough[Id] = Math.Max(batch.DoneThrough.GetValueOrDefault(Id), done);
            }
        }
    }

    /// <summary>
    /// The done mark this commit may write: just below the lowest implicit message held here that is
    /// not leaving in this commit group, and below the topic's lowest send not handed over yet.
    /// Never below the mark as loaded.
    /// </summary>
    private long DoneThroughLocked(FollowerState follower)
    {
        var lowest = Math.Min(_lowestUnhanded?.Invoke() ?? 0, LowestStayingLocked());
        return Math.Max(follower.DoneThrough, lowest - 1);
    }

    /// <summary>The lowest implicit message held here and not leaving in this commit group (long.MaxValue: none).</summary>
    /// <remarks>
    /// Held messages change only between groups (their commits' callbacks), and within one group the
    /// leaving ones only grow: the answer is kept for the group and looked for again, from where it
    /// was, only once it is leaving too. Completes in order (each the lowest) would otherwise walk
    /// every leaving message for each one, with an enumerator allocated each time.
    /// </remarks>
    private long LowestStayingLocked()
    {
        if (_lowestStayingGroup == _leavingGroup && !_leaving.Contains(_lowestStaying))
        {
            return _lowestStaying;
        }
        var from = _lowestStayingGroup == _leavingGroup ? _lowestStaying : long.MinValue;
        var lowest = long.MaxValue;
        if (_implicitHeld.Count > 0 && from <= _implicitHeld.Max)
        {
            foreach (var sequence in from == long.MinValue ? _implicitHeld : _implicitHeld.GetViewBetween(from, _implicitHeld.Max))
            {
                if (!_leaving.Contains(sequence))
                {
                    lowest = sequence;
                    break;
                }
            }
        }
        (_lowestStayingGroup, _lowestStaying) = (_leavingGroup, lowest);
        return lowest;
    }
}
