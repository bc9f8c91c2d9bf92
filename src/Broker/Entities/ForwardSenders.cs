using Farm.ContainerStore.Containers;

namespace Farm.Broker.Entities;

/// <summary>
/// The forwarders that sent to a container's entities while this node owns it, so a forwarded send
/// reads its messages' records (<see cref="ForwardOrigin.FindRecordedAsync"/>) only when another
/// send of them may have been stored: that read was a third of what a forwarded message cost the
/// target's node (perf/README "Session 60").
///
/// A load of a source's forwarder (<see cref="ForwardOrigin.Incarnation"/>) sends each message
/// once, or again marked as a repeat after a send whose answer it did not get. So one message can
/// come in two unmarked sends only from two loads of the source: its next owner after a failover
/// or a planned move, a frozen owner still sending after it resumed, the source loaded again. A
/// send reads when it is a repeat; when its load is not the one this entity heard from last (then
/// every send of the source reads for <see cref="Messaging.RecentSends.Retention"/>, as long as a
/// record is kept); and while a forwarder's record a previous owner of the container made is in the
/// window (what sent then is unknown). One per ownership of a container (<see cref="Containers.CommitQueue"/>):
/// a new owner starts without memory.
/// </summary>
/// <param name="newestForwardRecordAtMs">When the container's newest forwarder's record was made, null when none (<see cref="IContainerDatabase.NewestSendRecordAtMsAsync"/>).</param>
internal sealed class ForwardSenders(Func<CancellationToken, Task<long?>> newestForwardRecordAtMs)
{
    /// <summary>Sources whose last send is older than this many windows are forgotten: none of their records is left to find.</summary>
    private const int KeepWindows = 2;

    private readonly Lock _gate = new();
    private readonly Dictionary<(long EntityId, string Source), Heard> _heard = [];
    private readonly long _windowMs = (long)Messaging.RecentSends.Retention.TotalMilliseconds;
    private Task<long?>? _newestBeforeOwnership;
    private long _lookups;
    private long _skipped;

    /// <summary>Forwarded sends that read their records (tests).</summary>
    public long Lookups => Interlocked.Read(ref _lookups);

    /// <summary>Forwarded sends stored without reading their records (tests).</summary>
    public long Skipped => Interlocked.Read(ref _skipped);

    /// <summary>
    /// Whether a forwarded send of <paramref name="origin"/> to entity <paramref name="entityId"/>
    /// at <paramref name="nowMs"/> must read its messages' records; notes its load as the last heard
    /// from. Called with the send's messages claimed (<see cref="Messaging.ForwardsInFlight"/>), so
    /// of two sends of one message the second decides after the first has committed or failed.
    /// </summary>
    public async ValueTask<bool> MustLookAsync(long entityId, ForwardOrigin origin, long nowMs, CancellationToken cancellationToken)
    {
        var look = origin.Incarnation == 0
            // A node that does not name its load: any send may be another load's.
            || Decide(entityId, origin, nowMs, await LookUntilForPreviousOwnersAsync(cancellationToken).ConfigureAwait(false));
        Interlocked.Increment(ref look ? ref _lookups : ref _skipped);
        return look;
    }

    private bool Decide(long entityId, ForwardOrigin origin, long nowMs, long previousOwnersUntilMs)
    {
        lock (_gate)
        {
            var key = (entityId, origin.Source);
            if (_heard.TryGetValue(key, out var heard) && heard.Incarnation == origin.Incarnation)
            {
                _heard[key] = heard with { LastMs = nowMs };
                return origin.Repeat || nowMs < heard.LookUntilMs;
            }
            if (_heard.Count >= 1024)
            {
                Forget(nowMs);
            }
            // Another load than the one heard last: each may have stored what the other sends, for
            // as long as a record is kept. The first heard of: only what a previous owner stored.
            var lookUntil = heard.Incarnation != 0 ? nowMs + _windowMs : previousOwnersUntilMs;
            _heard[key] = new Heard(origin.Incarnation, lookUntil, nowMs);
            return origin.Repeat || nowMs < lookUntil;
        }
    }

    /// <summary>
    /// Until when a forwarder's record made before this ownership may be found: the newest one's
    /// time plus the window (0 when there is none). Read once, on the first forwarded send.
    /// </summary>
    private async ValueTask<long> LookUntilForPreviousOwnersAsync(CancellationToken cancellationToken)
    {
        var read = _newestBeforeOwnership;
        if (read is null)
        {
            lock (_gate)
            {
                read = _newestBeforeOwnership ??= newestForwardRecordAtMs(CancellationToken.None);
            }
        }
        try
        {
            return await read.WaitAsync(cancellationToken).ConfigureAwait(false) is { } newest ? newest + _windowMs : 0;
        }
        catch (Exception) when (read.IsFaulted)
        {
            // The send fails as its records' read would (the forwarder tries again); the next send reads anew.
            _ = Interlocked.CompareExchange(ref _newestBeforeOwnership, null, read);
            throw;
        }
    }

    private void Forget(long nowMs)
    {
        foreach (var (key, heard) in _heard)
        {
            if (nowMs - heard.LastMs > KeepWindows * _windowMs)
            {
                _heard.Remove(key);
            }
        }
    }

    /// <param name="Incarnation">The load of the source heard from last.</param>
    /// <param name="LookUntilMs">Until when every send of it reads.</param>
    /// <param name="LastMs">When it sent last.</param>
    private readonly record struct Heard(long Incarnation, long LookUntilMs, long LastMs);
}
