using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>
/// Where auto-forwarded messages come from: the source's forwarding (<see cref="Source"/>,
/// "farm.forward/&lt;entity id&gt;/main" or ".../dead-letter") and each message's sequence number
/// there. The target records every message under its own name (<see cref="NameOf"/>) in the commit
/// that stores it, and looks each up before it stores a forwarded send, so it finds each message
/// however the source batched it this time: its next owner after a failover does not know how its
/// predecessor cut the batches (a batch cut otherwise goes under another batch name), and a frozen
/// owner may finish a send after it resumed, already fenced. The target reads only when another
/// send of the messages may have been stored (<see cref="ForwardSenders"/>): <see cref="Incarnation"/>
/// names the load of the source's forwarder that sent them (0: unknown, always read), and
/// <see cref="Repeat"/> marks a send again after one whose answer was lost.
/// </summary>
internal sealed record ForwardOrigin(string Source, IReadOnlyList<long> Sequences, long Incarnation = 0, bool Repeat = false)
{
    /// <summary>The name message <paramref name="index"/> is recorded under at the target.</summary>
    public SendName NameOf(int index) => new(Source, Sequences[index]);

    /// <summary>The origin a forwarding node put on <paramref name="request"/>; null for a client's send.</summary>
    public static ForwardOrigin? Of(SendRequest request)
    {
        if (!request.Forwarded || request.ForwardSource.Length == 0)
        {
            return null;
        }
        if (request.ForwardSequences.Count != request.Messages.Count)
        {
            throw FarmErrors.Invalid(
                $"forward_sequences has {request.ForwardSequences.Count} entries for {request.Messages.Count} messages; a forwarded send names each message's sequence number at its source.");
        }
        return new ForwardOrigin(request.ForwardSource, request.ForwardSequences, request.ForwardIncarnation, request.Repeat);
    }

    /// <summary>
    /// Each message's answer where it is recorded (<see cref="NameOf"/>) at one of
    /// <paramref name="targets"/> in the last <see cref="Messaging.RecentSends.Retention"/> (a chain
    /// stores where it could, so every entity walked is asked, from the end back; one read each,
    /// skipped where the container's <see cref="ForwardSenders"/> says no other send of them can be there); null
    /// for a message without a record, or when none has one.
    /// </summary>
    public async Task<long?[]?> FindRecordedAsync(IReadOnlyList<ISendTarget> targets, TimeProvider time, CancellationToken cancellationToken)
    {
        var nowMs = time.GetUtcNow().ToUnixTimeMilliseconds();
        var sinceMs = Messaging.RecentSends.RememberedSinceMs(time);
        long?[]? answers = null;
        Dictionary<long, int>? index = null;
        for (var at = targets.Count - 1; at >= 0; at--)
        {
            var target = targets[at];
            if (!await target.Commits.ForwardSenders.MustLookAsync(target.Id, this, nowMs, cancellationToken).ConfigureAwait(false))
            {
                continue;
            }
            if (index is null)
            {
                index = new Dictionary<long, int>(Sequences.Count);
                for (var i = 0; i < Sequences.Count; i++)
                {
                    index.TryAdd(Sequences[i], i);
                }
            }
            foreach (var record in await target.Commits.Database.FindSendRecordsAsync(Source, index.Keys, sinceMs, cancellationToken).ConfigureAwait(false))
            {
                // A record of another entity is not this send's (the source forwarded to another target before).
                if (record.EntityId == target.Id && record.SequenceNumbers is [var sequence] && index.Remove(record.SendId, out var i))
                {
                    (answers ??= new long?[Sequences.Count])[i] = sequence;
                }
            }
            if (index.Count == 0)
            {
                break;
            }
        }
        return answers;
    }

    /// <summary>The messages not <paramref name="answered"/> yet, and their origin.</summary>
    public (List<Message> Messages, ForwardOrigin Origin) Unanswered(IReadOnlyList<Message> messages, long?[] answered)
    {
        var rest = new List<Message>();
        var sequences = new List<long>();
        for (var i = 0; i < messages.Count; i++)
        {
            if (answered[i] is null)
            {
                rest.Add(messages[i]);
                sequences.Add(Sequences[i]);
            }
        }
        return (rest, this with { Sequences = sequences });
    }

    /// <summary>The answer to the whole send: each message's recorded sequence number, or the one the unanswered got now, in order.</summary>
    public static long[] Merge(long?[] answered, IReadOnlyList<long> stored)
    {
        var merged = new long[answered.Length];
        var next = 0;
        for (var i = 0; i < merged.Length; i++)
        {
            merged[i] = answered[i] ?? stored[next++];
        }
        return merged;
    }
}

/// <summary>
/// The records a send leaves in the commit that stores its messages: its own name's (a client's
/// or a forwarder's batch), and each message's when it was forwarded (<see cref="ForwardOrigin"/>).
/// Written from the commit's batch, once <c>results</c> holds the answer (a topic fills it in after
/// this is made).
/// </summary>
internal sealed class SendRecords(SendName? name, ForwardOrigin? origin, long entityId, long[] results, long atMs)
{
    public static SendRecords? For(SendName? name, ForwardOrigin? origin, long entityId, long[] results, long atMs) =>
        name is null && origin is null ? null : new SendRecords(name, origin, entityId, results, atMs);

    public void WriteTo(List<SendRecord> sends)
    {
        if (name is { } n)
        {
            sends.Add(new SendRecord(n.ProducerId, n.SendId, entityId, results, atMs));
        }
        if (origin is not null)
        {
            for (var i = 0; i < results.Length; i++)
            {
                sends.Add(new SendRecord(origin.Source, origin.Sequences[i], entityId, [results[i]], atMs));
            }
        }
    }
}
