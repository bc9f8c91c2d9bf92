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
internal sealed class SettledLocks
{
    public static readonly TimeSpan Retention = TimeSpan.FromSeconds(10);
    public const int Capacity = 16_384;

    /// <summary>How a token was settled, and the commit that did it (its error, or null once done).</summary>
    public readonly record struct Settled(Disposition Disposition, Task<BrokerException?> Outcome);

    private readonly Dictionary<Guid, Settled> _byToken = [];
    private readonly Queue<(Guid Token, long ForgetAtMs)> _order = new();

    public int Count => _byToken.Count;

    public void Add(Guid token, Disposition disposition, Task<BrokerException?> outcome, long lockedUntilMs, long now)
    {
        Prune(now);
        while (_byToken.Count >= Capacity && _order.TryDequeue(out var oldest))
        {
            _byToken.Remove(oldest.Token);
        }
        _byToken[token] = new Settled(disposition, outcome);
        _order.Enqueue((token, Math.Min(lockedUntilMs, now + (long)Retention.TotalMilliseconds)));
    }

    public Settled? Find(Guid token) => _byToken.TryGetValue(token, out var settled) ? settled : null;

    /// <summary>
    /// The commit of <paramref name="token"/>'s settlement succeeded: its entry keeps the shared
    /// <paramref name="done"/> from now on instead of that call's own outcome task, which can then die
    /// young. Kept for the retention, one task per settle call was about 80,000 live objects at
    /// 8,000 completes a second, promoted to the older generations for nothing.
    /// </summary>
    public void Committed(Guid token, Task<BrokerException?> outcome, Task<BrokerException?> done)
    {
        if (_byToken.TryGetValue(token, out var settled) && ReferenceEquals(settled.Outcome, outcome))
        {
            _byToken[token] = settled with { Outcome = done };
        }
    }

    /// <summary>A settlement whose commit failed was not done: a repeat must not be told it was.</summary>
    public void Forget(Guid token) => _byToken.Remove(token);

    /// <summary>Forgets the tokens whose time is up (the sweep and every add call it).</summary>
    public void Prune(long now)
    {
        while (_order.TryPeek(out var oldest) && oldest.ForgetAtMs <= now)
        {
            _order.Dequeue();
            _byToken.Remove(oldest.Token);
        }
    }
}
