using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>
/// The lock tokens an entity settled a moment ago, and how, so a settlement sent again gets the
/// same answer instead of MessageLockLost: a client whose stream broke before the answer came
/// cannot tell a settlement that was done from one that was not, and sends it again by a Settle
/// call. A token is kept while its lock would still have held, at most <see cref="Retention"/>, and
/// at most <see cref="Capacity"/> per entity (the oldest go first), so memory stays bounded on a
/// busy entity; past that a repeat is told MessageLockLost, as Azure Service Bus tells every one.
/// Guarded by the entity lock.
/// </summary>
/// <remarks>
/// Every settlement adds an entry and almost none is ever looked up (only repeats are), so the
/// entries sit in a ring in the order they came, written in place: a dictionary of 16,384 tokens
/// cost a node 2-3% of its CPU at 27,000 completes/s in cache misses. A repeat scans the ring. The
/// ring grows while its oldest entry is still kept and goes once all have expired, so a quiet entity
/// holds nothing.
/// </remarks>
internal sealed class SettledLocks
{
    public static readonly TimeSpan Retention = TimeSpan.FromSeconds(10);
    public const int Capacity = 16_384;
    /// <summary>
    /// A quiet entity's ring: 16 entries of 40 bytes hold what 1 settlement a second keeps for the
    /// retention. 64 entries cost 2.5 KB per entity for nothing: 38 MB of a node serving 15,000
    /// queues at 1 msg/s each (gcdump, 2026-11-29). A busy entity's ring doubles as it needs.
    /// </summary>
    private const int InitialSize = 16;

    /// <summary>How a token was settled, and the commit that did it (its error, or null once done).</summary>
    public readonly record struct Settled(Disposition Disposition, Task<BrokerException?> Outcome);

    /// <summary>An entry's stamp is not kept: the one of [_oldest, _next) that maps to its place.</summary>
    private struct Entry
    {
        public Guid Token;
        public long ForgetAtMs;
        public Disposition Disposition;
        public Task<BrokerException?>? Outcome;
    }

    /// <summary>Entry of stamp s is at s &amp; (length - 1); null while nothing is kept.</summary>
    private Entry[]? _ring;

    /// <summary>The stamp the next entry gets; entries kept are those of [<see cref="_oldest"/>, <see cref="_next"/>).</summary>
    private long _next;
    private long _oldest;

    public int Count => (int)(_next - _oldest);

    /// <summary>Keeps <paramref name="token"/>'s settlement; returns its stamp, for <see cref="Committed"/> and <see cref="Forget"/>.</summary>
    public long Add(Guid token, Disposition disposition, Task<BrokerException?> outcome, long lockedUntilMs, long now)
    {
        Prune(now);
        _ring ??= new Entry[InitialSize];
        if (_next - _oldest == _ring.Length)
        {
            if (_ring.Length < Capacity)
            {
                Grow();
            }
            else
            {
                // Full: the oldest goes first.
                _oldest++;
            }
        }
        var stamp = _next++;
        _ring[stamp & (_ring.Length - 1)] = new Entry
        {
            Token = token,
            ForgetAtMs = Math.Min(lockedUntilMs, now + (long)Retention.TotalMilliseconds),
            Disposition = disposition,
            Outcome = outcome,
        };
        return stamp;
    }

    /// <summary>The latest settlement of <paramref name="token"/> still kept (a repeat asks: rare, so a scan).</summary>
    public Settled? Find(Guid token)
    {
        for (var stamp = _next - 1; stamp >= _oldest; stamp--)
        {
            ref var entry = ref _ring![stamp & (_ring.Length - 1)];
            if (entry.Token == token)
            {
                return new Settled(entry.Disposition, entry.Outcome!);
            }
        }
        return null;
    }

    /// <summary>
    /// The commit of the settlement <paramref name="stamp"/> kept succeeded: its entry keeps the
    /// shared <paramref name="done"/> from now on instead of that call's own outcome task, which can
    /// then die young. Kept for the retention, one task per settle call was about 80,000 live
    /// objects at 8,000 completes a second, promoted to the older generations for nothing.
    /// </summary>
    public void Committed(long stamp, Task<BrokerException?> outcome, Task<BrokerException?> done)
    {
        if (Kept(stamp) is { } index && ReferenceEquals(_ring![index].Outcome, outcome))
        {
            _ring[index].Outcome = done;
        }
    }

    /// <summary>A settlement whose commit failed was not done: a repeat must not be told it was.</summary>
    public void Forget(long stamp)
    {
        if (Kept(stamp) is { } index)
        {
            _ring![index].Token = Guid.Empty;
        }
    }

    /// <summary>Forgets the tokens whose time is up (the sweep and every add call it); lets the ring go once all are.</summary>
    public void Prune(long now)
    {
        while (_oldest < _next && _ring![_oldest & (_ring.Length - 1)].ForgetAtMs <= now)
        {
            _ring[_oldest & (_ring.Length - 1)] = default;
            _oldest++;
        }
        if (_oldest == _next)
        {
            _ring = null;
        }
    }

    /// <summary>Where the entry of <paramref name="stamp"/> is, if it is still kept.</summary>
    private int? Kept(long stamp) =>
        _ring is null || stamp < _oldest || stamp >= _next ? null : (int)(stamp & (_ring.Length - 1));

    /// <summary>Doubles the ring; each entry moves to its stamp's place in the larger one.</summary>
    private void Grow()
    {
        var larger = new Entry[_ring!.Length * 2];
        for (var stamp = _oldest; stamp < _next; stamp++)
        {
            larger[stamp & (larger.Length - 1)] = _ring[stamp & (_ring.Length - 1)];
        }
        _ring = larger;
    }
}
