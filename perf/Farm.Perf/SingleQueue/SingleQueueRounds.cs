namespace Farm.Perf.SingleQueue;

/// <summary>
/// single-queue --rounds: which round stands for the run. The median round by farm/peer ratio
/// (the lower of the two middle ones for an even count), so the figures quoted are one round's own
/// farm and peer, measured minutes apart, and neither the luckiest nor the unluckiest round.
/// </summary>
internal static class SingleQueueRounds
{
    public static (FarmFigures? Farm, PeerFigures? Peer) Median(IReadOnlyList<(FarmFigures? Farm, PeerFigures? Peer)> rounds)
    {
        var compared = rounds.Where(r => r.Farm is not null && r.Peer is { MsgsPerSec: > 0 }).ToList();
        if (compared.Count == 0)
        {
            return rounds[^1];
        }
        var ordered = compared.OrderBy(r => r.Farm!.MsgsPerSec / r.Peer!.MsgsPerSec).ToList();
        return ordered[(ordered.Count - 1) / 2];
    }

    public static IReadOnlyList<RoundFigures> Figures(IReadOnlyList<(FarmFigures? Farm, PeerFigures? Peer)> rounds)
        => rounds.Select((r, i) => new RoundFigures(
            i + 1,
            r.Farm?.MsgsPerSec,
            r.Peer?.MsgsPerSec,
            r.Farm is not null && r.Peer is { MsgsPerSec: > 0 } ? Math.Round(r.Farm.MsgsPerSec / r.Peer.MsgsPerSec, 3) : null)).ToList();
}
