namespace Farm.ContainerStore.Containers;

/// <summary>
/// What a head load of a follower (see <see cref="FollowerState"/>) does with its implicit messages,
/// the same in every store: they all come into memory, so the main queue's frontier is at least the
/// last of them, and the rows before it come too, past the cache's budget if need be.
/// </summary>
internal static class FollowerHead
{
    /// <summary>The sequence numbers of <paramref name="memberships"/> (in order) that are implicit messages of <paramref name="follower"/>.</summary>
    public static List<long> Candidates(IEnumerable<(long SequenceNumber, byte[] Members)> memberships, FollowerState follower) =>
        [.. memberships.Where(m => follower.Follows(m.SequenceNumber, m.Members)).Select(m => m.SequenceNumber)];

    /// <summary>Where a follower's implicit messages are read from: after its done mark, and from where it follows.</summary>
    public static long ReadAfter(FollowerState follower) => Math.Max(follower.DoneThrough, follower.FollowFrom - 1);

    /// <summary>
    /// Adds the implicit messages to the main queue's <paramref name="head"/> (its rows in order, read
    /// up to the budget; <paramref name="whole"/>: all of them), reading the rows up to the last implicit
    /// message first when the budget stopped short of it (<paramref name="readRowsAfterThrough"/>: rows
    /// after the first number, through the second). Returns the main queue's frontier.
    /// </summary>
    public static async Task<long> MergeAsync(
        List<MessageRecord> head, bool whole, IReadOnlyList<MessageRecord> implicitMessages, Func<long, long, Task<List<MessageRecord>>> readRowsAfterThrough)
    {
        var after = head.Count > 0 ? head[^1].SequenceNumber : 0;
        if (implicitMessages.Count == 0)
        {
            return after;
        }
        var through = implicitMessages[^1].SequenceNumber;
        if (!whole && after < through)
        {
            head.AddRange(await readRowsAfterThrough(after, through).ConfigureAwait(false));
        }
        head.AddRange(implicitMessages);
        return Math.Max(head.Max(m => m.SequenceNumber), through);
    }

    /// <summary>An implicit message as a load reads it: the copy's columns, active in the main queue, never delivered by a row.</summary>
    public static MessageRecord Implicit(long entityId, long sequenceNumber, long enqueuedAtMs, string? messageId, byte[] payload, int payloadSize) => new()
    {
        EntityId = entityId,
        SequenceNumber = sequenceNumber,
        EnqueuedAtMs = enqueuedAtMs,
        MessageId = messageId,
        Payload = payload,
        PayloadSize = payloadSize,
        Implicit = true,
    };
}
