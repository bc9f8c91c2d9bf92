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
/// <para>
/// Entries hold no references: a settlement whose commit still runs is marked, and its call's
/// outcome sits in a short list of the calls in flight (<see cref="AwaitCommit"/>), gone once the
/// call's commit ends. So a commit touches no entry, nothing is cleared as entries expire, and the
/// collector never scans the rings (1,000 subscriptions at 70 deliveries/s keep about 28 MB of
/// them; with a task in each entry the fan-out's node spent about 3% of its samples writing and
/// pruning them).
/// </para>
/// </remarks>
internal sealed class SettledLocks
{
    public static readonly TimeSpan Retention = TimeSpan.FromSeconds(10);
    public const int Capacity = 16_384;
    /// <summary>
    /// A quiet entity's ring: 16 entries of 32 bytes hold what 1 settlement a second keeps for the
    /// retention. 64 entries cost 2.5 KB per entity for nothing: 38 MB of a node serving 15,000
    /// queues at 1 msg/s each (gcdump, 2026-11-29). A busy entity's ring doubles as it needs.
    /// </summary>
    private const int InitialSize = 16;

    /// <summary>The outcome of a settlement that wrote nothing, or whose commit succeeded.</summary>
    public static readonly Task<BrokerException?> Done = Task.FromResult<BrokerException?>(null);

    /// <summary>How a token was settled, and the commit that did it (its error, or null once done).</summary>
    public readonly record struct Settled(Disposition Disposition, Task<BrokerException?> Outcome);

    /// <summary>An entry's stamp is not kept: the one of [_oldest, _next) that maps to its place.</summary>
    private struct Entry
    {
        public Guid Token;
        public long ForgetAtMs;
        public Disposition Disposition;
        /// <summary>Its call's commit had not ended when it was added: the outcome is that call's while it is in <see cref="_inFlight"/>.</summary>
        public bool AwaitedCommit;
    }

    /// <summary>A settle call whose commit runs: the stamps it added, [First, Last], and its outcome.</summary>
    private readonly record struct CallInFlight(long First, long Last, Task<BrokerException?> Outcome);

    /// <summary>Entry of stamp s is at s &amp; (length - 1); null while nothing is kept.</summary>
    private Entry[]? _ring;

    /// <summary>The stamp the next entry gets; entries kept are those of [<see cref="_oldest"/>, <see cref="_next"/>).</summary>
    private long _next;
    private long _oldest;

    /// <summary>When the oldest entry kept is to be forgotten: a prune with nothing due reads no entry.</summary>
    private long _oldestForgetAtMs;

    /// <summary>The calls whose commit runs (a few at a time); null while none does.</summary>
    private List<CallInFlight>? _inFlight;

    public int Count => (int)(_next - _oldest);

    /// <summary>
    /// Keeps <paramref name="token"/>'s settlement; returns its stamp. <paramref name="awaitsCommit"/>:
    /// the settlement wrote a change its call is about to commit (the call then passes its stamps
    /// to <see cref="AwaitCommit"/> before letting go of the entity lock).
    /// </summary>
    public long Add(Guid token, Disposition disposition, bool awaitsCommit, long lockedUntilMs, long now)
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
                _oldestForgetAtMs = _ring[_oldest & (_ring.Length - 1)].ForgetAtMs;
            }
        }
        var stamp = _next++;
        var forgetAt = Math.Min(lockedUntilMs, now + (long)Retention.TotalMilliseconds);
        _ring[stamp & (_ring.Length - 1)] = new Entry
        {
            Token = token,
            ForgetAtMs = forgetAt,
            Disposition = disposition,
            AwaitedCommit = awaitsCommit,
        };
        if (stamp == _oldest)
        {
            _oldestForgetAtMs = forgetAt;
        }
        return stamp;
    }

    /// <summary>The settlements of stamps <paramref name="first"/> to <paramref name="last"/> added with awaitsCommit wait for <paramref name="outcome"/>.</summary>
    public void AwaitCommit(long first, long last, Task<BrokerException?> outcome) =>
        (_inFlight ??= []).Add(new CallInFlight(first, last, outcome));

    /// <summary>The commit of the call whose first stamp is <paramref name="first"/> succeeded: its settlements are done.</summary>
    public void Committed(long first) => EndCall(first);

    /// <summary>
    /// The commit of the call whose first stamp is <paramref name="first"/> failed: its settlements
    /// that waited for it were not done, and a repeat must not be told they were.
    /// </summary>
    public void Failed(long first)
    {
        if (EndCall(first) is not { } call || _ring is null)
        {
            return;
        }
        // Only stamps still kept: a full ring may have pushed the first ones out, and their places hold newer entries.
        for (var stamp = Math.Max(call.First, _oldest); stamp <= call.Last && stamp < _next; stamp++)
        {
            ref var entry = ref _ring[stamp & (_ring.Length - 1)];
            if (entry.AwaitedCommit)
            {
                entry.Token = Guid.Empty;
            }
        }
    }

    /// <summary>The latest settlement of <paramref name="token"/> still kept (a repeat asks: rare, so a scan).</summary>
    public Settled? Find(Guid token)
    {
        for (var stamp = _next - 1; stamp >= _oldest; stamp--)
        {
            ref var entry = ref _ring![stamp & (_ring.Length - 1)];
            if (entry.Token == token)
            {
                return new Settled(entry.Disposition, entry.AwaitedCommit ? OutcomeOf(stamp) : Done);
            }
        }
        return null;
    }

    /// <summary>Forgets the tokens whose time is up (the sweep and every add call it); lets the ring go once all are.</summary>
    public void Prune(long now)
    {
        if (_oldest == _next || now < _oldestForgetAtMs)
        {
            return;
        }
        while (_oldest < _next && _ring![_oldest & (_ring.Length - 1)].ForgetAtMs <= now)
        {
            _oldest++;
        }
        if (_oldest == _next)
        {
            _ring = null;
        }
        else
        {
            _oldestForgetAtMs = _ring![_oldest & (_ring.Length - 1)].ForgetAtMs;
        }
    }

    /// <summary>The outcome of the call in flight that added <paramref name="stamp"/>; done once that call's commit ended well.</summary>
    private Task<BrokerException?> OutcomeOf(long stamp)
    {
        if (_inFlight is not null)
        {
            foreach (var call in _inFlight)
            {
                if (stamp >= call.First && stamp <= call.Last)
                {
                    return call.Outcome;
                }
            }
        }
        return Done;
    }

    private CallInFlight? EndCall(long first)
    {
        if (_inFlight is null)
        {
            return null;
        }
        var index = 0;
        while (index < _inFlight.Count && _inFlight[index].First != first)
        {
            index++;
        }
        if (index == _inFlight.Count)
        {
            return null;
        }
        var call = _inFlight[index];
        _inFlight.RemoveAt(index);
        if (_inFlight.Count == 0)
        {
            _inFlight = null;
        }
        return call;
    }

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
