using Farm.ContainerStore.Containers;
using Farm.Contracts;
using Farm.Contracts.V1;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Entities;

// Auto-forwarding of messages stored here: dead letters when ForwardDeadLetteredMessagesTo is set,
// messages that were in the queue before ForwardTo was set, and new sends whose next hop another
// node serves (new sends with ForwardTo otherwise go straight to the target). The target commits
// first, then the source deletes; a crash in between leaves a copy in both, never in neither. The
// target records each message it stored under this entity and its sequence number here
// (ForwardOrigin), and stores of a forwarded send only what it has no record of: a repeat (a run
// after a failed one, or the first after a load, whoever owned this entity before) or a frozen
// owner's send stores each message once, for the two minutes the records are kept. A target on another node also gets each batch under a name made
// from this entity and the batch's sequence numbers, so a try repeated while the first still runs
// there waits for it.
internal sealed partial class QueueEntity
{
    private int _forwarding;

    /// <summary>
    /// Whether the next batch may have been sent before: true after a failed try, and after a load
    /// (the previous owner may have sent it and died before deleting). Read and written by the one
    /// forwarding run at a time.
    /// </summary>
    private bool _forwardMayRepeat = true;

    /// <summary>
    /// This load's forwarder, as its sends name it (<see cref="ForwardOrigin.Incarnation"/>): drawn
    /// anew with every load, so a target tells this load's sends from another owner's or another
    /// load's, which may hold the same messages (<see cref="ForwardSenders"/>).
    /// </summary>
    private readonly long _forwardIncarnation = Random.Shared.NextInt64(1, long.MaxValue);

    /// <summary>
    /// The sends of the last forwarding run whose messages may be back here after the target stored
    /// them (the run failed: an answer lost, or the delete after it), each as the sequence numbers
    /// it carried. The next run sends each of them first and again exactly as it was, so under the
    /// same name, and the target answers it as a repeat however many messages came in between
    /// (taken together with those they would make a send of another name, and the target would
    /// store the first ones twice). Kept apart for the queue's own messages and its dead letters,
    /// which forward to different targets in runs of their own. Read and written by the one
    /// forwarding run at a time; a new owner starts without them.
    /// </summary>
    private IReadOnlyList<long[]> _mainInDoubt = [];

    /// <summary>As <see cref="_mainInDoubt"/>, for the dead letters' forwarding.</summary>
    private IReadOnlyList<long[]> _deadLetterInDoubt = [];

    private ref IReadOnlyList<long[]> InDoubt(bool fromDeadLetter) => ref fromDeadLetter ? ref _deadLetterInDoubt : ref _mainInDoubt;

    /// <summary>Sends forwarded batches to their target, here or on another node; set by the container host.</summary>
    public ForwardSend? Forward { get; set; }

    /// <summary>Where forwarding that keeps failing is reported (the node's log); set by the container host.</summary>
    public ILogger? ForwardLog { get; set; }

    /// <summary>
    /// Failed runs in a row before forwarding is reported as failing: one or two are a target
    /// between owners or a connection that broke, and the next run gets through.
    /// </summary>
    internal const int ForwardFailuresBeforeReport = 3;

    /// <summary>While forwarding keeps failing, it is reported again this often (a run is tried every second).</summary>
    internal static readonly TimeSpan ForwardFailureReportInterval = TimeSpan.FromMinutes(1);

    /// <summary>Forwarding runs failed in a row, and when they were last reported (node clock, Unix ms; 0: not yet).</summary>
    private struct FailureStreak
    {
        public int InARow;
        public long ReportedAtMs;
    }

    // Kept apart for the queue's own messages and its dead letters: their runs alternate, to
    // different targets, and one that works must not hide the other's failing. Used by the one
    // forwarding run at a time.
    private FailureStreak _mainFailures;
    private FailureStreak _deadLetterFailures;

    private ref FailureStreak FailuresOf(bool fromDeadLetter) => ref fromDeadLetter ? ref _deadLetterFailures : ref _mainFailures;

    /// <summary>
    /// How long forwarding rests after a run failed (a target deleted, or refusing): without it a
    /// failing target was tried every sweep tick, a call to another node each time.
    /// </summary>
    internal const long ForwardRetryDelayMs = 1000;

    /// <summary>No forwarding run starts before this time (node clock, Unix ms); set when a run fails.</summary>
    private long _forwardRestsUntilMs;

    /// <summary>When forwarding may run next: now, unless a failed run made it rest.</summary>
    private long ForwardDueMs(long now) => Math.Max(now, Volatile.Read(ref _forwardRestsUntilMs));

    /// <summary>Starts forwarding in the background if there is anything to forward and no run is going.</summary>
    private void StartForwarding()
    {
        var settings = Settings;
        if (Forward is null || Volatile.Read(ref _forwarding) == 1 || NowMs < Volatile.Read(ref _forwardRestsUntilMs))
        {
            return;
        }
        var target = settings.ForwardTo is not null && _main.Available.Count > 0 ? (settings.ForwardTo, false)
            : settings.ForwardDeadLetteredMessagesTo is not null && _deadLetter.Available.Count > 0 ? (settings.ForwardDeadLetteredMessagesTo, true)
            : default;
        if (target.Item1 is null || Interlocked.Exchange(ref _forwarding, 1) == 1)
        {
            return;
        }
        ForwardInBackground(target.Item1, target.Item2);
    }

    /// <summary>
    /// One forwarding pass on the thread pool. Its own method, not a lambda in
    /// <see cref="StartForwarding"/>: the lambda's captured target would be allocated on every call
    /// there (the C# compiler makes the closure where the variable is declared), and every sweep calls it.
    /// </summary>
    private void ForwardInBackground(string targetName, bool fromDeadLetter) =>
        _ = Task.Run(async () =>
        {
            var forwardedSome = false;
            try
            {
                forwardedSome = await ForwardAsync(targetName, fromDeadLetter).ConfigureAwait(false);
                ReportForwardWorksAgain(targetName, fromDeadLetter);
            }
            catch (Exception e)
            {
                ReportForwardFailed(targetName, fromDeadLetter, e);
                // What was not stored went back to its sub-queue; a sweep after the rest tries again.
                var restsUntil = NowMs + ForwardRetryDelayMs;
                Volatile.Write(ref _forwardRestsUntilMs, restsUntil);
                ScheduleSweep(restsUntil);
            }
            finally
            {
                Volatile.Write(ref _forwarding, 0);
            }

            if (forwardedSome)
            {
                // More may have come meanwhile (the sends that arrived saw this run going).
                StartForwarding();
            }
        });

    /// <summary>
    /// Counts a failed run; reports the streak once it is <see cref="ForwardFailuresBeforeReport"/>
    /// runs long, then every <see cref="ForwardFailureReportInterval"/> while it lasts, so a target
    /// deleted or unreachable for good shows in the log without a line a second.
    /// </summary>
    private void ReportForwardFailed(string targetName, bool fromDeadLetter, Exception e)
    {
        ref var streak = ref FailuresOf(fromDeadLetter);
        var failures = ++streak.InARow;
        var now = NowMs;
        if (ForwardLog is not { } log || failures < ForwardFailuresBeforeReport
            || (streak.ReportedAtMs > 0 && now - streak.ReportedAtMs < (long)ForwardFailureReportInterval.TotalMilliseconds))
        {
            return;
        }
        streak.ReportedAtMs = now;
        var error = e is Grpc.Core.RpcException rpc ? $"{rpc.StatusCode}: {rpc.Status.Detail}" : e.Message;
        LogForwardingFails(log, ForwardSourceName(fromDeadLetter), targetName, failures, error);
    }

    /// <summary>Ends a streak of failed runs, with a line in the log if it was reported.</summary>
    private void ReportForwardWorksAgain(string targetName, bool fromDeadLetter)
    {
        ref var streak = ref FailuresOf(fromDeadLetter);
        if (streak.InARow == 0)
        {
            return;
        }
        if (ForwardLog is { } log && streak.ReportedAtMs > 0)
        {
            LogForwardingWorksAgain(log, ForwardSourceName(fromDeadLetter), targetName, streak.InARow);
        }
        streak = default;
    }

    private string ForwardSourceName(bool fromDeadLetter) => fromDeadLetter ? $"{Name}/$DeadLetterQueue" : Name;

    [LoggerMessage(Level = LogLevel.Warning, Message = "Forwarding from '{Source}' to '{Target}' has failed {Failures} times in a row; its messages stay there and are tried again every second. Last error: {Error}")]
    private static partial void LogForwardingFails(ILogger logger, string source, string target, int failures, string error);

    [LoggerMessage(Level = LogLevel.Information, Message = "Forwarding from '{Source}' to '{Target}' works again, after {Failures} failed tries")]
    private static partial void LogForwardingWorksAgain(ILogger logger, string source, string target, int failures);

    public const string MaxTransferHopCountExceeded = "MaxTransferHopCountExceeded";

    /// <summary>One forwarding run: up to a receive's worth of messages; true when any left the run (forwarded, or refused and kept).</summary>
    private async Task<bool> ForwardAsync(string targetName, bool fromDeadLetter)
    {
        var sub = SubQueueOf(fromDeadLetter);
        var taken = new List<StoredMessage>();
        var overLimit = new List<PendingChange>();
        lock (_gate)
        {
            ThrowIfNotServing();
            while (taken.Count < _options.MaxMessagesPerReceive && sub.Available.Count > 0)
            {
                var sequence = sub.Available.Min;
                sub.Available.Remove(sequence);
                var message = sub.Messages[sequence];
                var hops = message.ParseMessage().TransferHopCount;
                if (hops >= _options.MaxForwardHops)
                {
                    // One more hop would pass the limit (a long chain, or a loop made before loops
                    // were refused, or through a topic): it stops here, as in Azure.
                    if (!fromDeadLetter)
                    {
                        DeadLetterLocked(message, MaxTransferHopCountExceeded,
                            $"The message was forwarded {hops} times; at most {_options.MaxForwardHops} hops are allowed.", null, overLimit);
                    }
                    // From a dead-letter queue it stays where it is, out of the forwarding (until the next
                    // load, or a change of ForwardDeadLetteredMessagesTo: ReturnDeadLettersLeftBehind).
                    continue;
                }
                message.Settling = true;
                taken.Add(message);
            }
            MaybeRefillLocked(sub);
        }
        Flush(overLimit);
        if (taken.Count == 0)
        {
            return false;
        }
        var inDoubtBlocks = InDoubtFirst(ref taken, InDoubt(fromDeadLetter));
        var repeat = _forwardMayRepeat;
        // taken[..done] were stored by the target, or refused for their size; the rest were not tried yet.
        var done = 0;
        var stored = new List<StoredMessage>();
        var refused = new List<(StoredMessage Message, string Why)>();
        // Every send this run tried, in doubt should the run fail.
        var tried = new List<long[]>();
        try
        {
            foreach (var batch in ForwardBatches(taken, fromDeadLetter, inDoubtBlocks))
            {
                try
                {
                    tried.Add(batch.Sequences);
                    await Forward!(targetName, batch.Copies, batch.DeadLetterSource, batch.Name, new ForwardOrigin(ForwardOriginName(Id, fromDeadLetter), batch.Sequences, _forwardIncarnation, repeat), repeat, CancellationToken.None).ConfigureAwait(false);
                    stored.AddRange(taken.GetRange(batch.First, batch.Copies.Count));
                    done += batch.Copies.Count;
                }
                catch (Exception e) when (IsRefused(e, fromDeadLetter))
                {
                    // The target refused the batch for a message's size (a dead letter's reason
                    // properties or one more hop took it past the limit, or the target's node has a
                    // lower one), or for its own room (full): nothing of it was stored. One by one,
                    // so only what it refuses stays behind and the rest go on; before, a message too
                    // large blocked its queue's forwarding for good.
                    string? fullAnswer = null;
                    for (var i = 0; i < batch.Copies.Count; i++)
                    {
                        var message = taken[batch.First + i];
                        if (fullAnswer is not null)
                        {
                            // The target said it is full a moment ago: the rest of the batch is not tried one call each.
                            refused.Add((message, fullAnswer));
                            done++;
                            continue;
                        }
                        try
                        {
                            tried.Add([message.SequenceNumber]);
                            await Forward!(targetName, [batch.Copies[i]], batch.DeadLetterSource, ForwardSendName(Id, fromDeadLetter, [message.SequenceNumber]),
                                new ForwardOrigin(ForwardOriginName(Id, fromDeadLetter), [message.SequenceNumber], _forwardIncarnation, repeat), repeat, CancellationToken.None).ConfigureAwait(false);
                            stored.Add(message);
                        }
                        catch (Exception single) when (IsRefused(single, fromDeadLetter))
                        {
                            var answer = single is Grpc.Core.RpcException rpc ? rpc.Status.Detail : single.Message;
                            refused.Add((message, answer));
                            fullAnswer = Refusal(single) == FarmErrorCode.QuotaExceeded ? answer : null;
                        }
                        done++;
                    }
                }
            }
        }
        catch (Exception)
        {
            _forwardMayRepeat = true;
            InDoubt(fromDeadLetter) = tried;
            taken.GetRange(done, taken.Count - done).ForEach(Unsettle);
            KeepRefused(refused, targetName, fromDeadLetter);
            if (stored.Count > 0)
            {
                // The batches the target stored leave here; a failed delete puts them back (forwarded again: stored once if the same batch).
                await DeleteTakenAsync(sub, stored).ConfigureAwait(false);
            }
            throw;
        }
        _forwardMayRepeat = false;
        InDoubt(fromDeadLetter) = [];
        KeepRefused(refused, targetName, fromDeadLetter);
        if (stored.Count > 0)
        {
            try
            {
                await DeleteTakenAsync(sub, stored).ConfigureAwait(false);
            }
            catch (Exception)
            {
                // Stored by the target and back here: the next run sends them as they went.
                _forwardMayRepeat = true;
                InDoubt(fromDeadLetter) = tried;
                throw;
            }
        }
        return done > 0;
    }

    public const string ForwardingRefused = "ForwardingRefused";

    /// <summary>
    /// A refusal the forwarding does not wait out: the size of what was sent (a message or the
    /// batch), which no try will change; or, for a queue's own messages, a target that is full
    /// (QUOTA_EXCEEDED), whose messages Azure Service Bus dead-letters in the source "until there's
    /// space in the destination". A dead letter cannot be dead-lettered again: a full target is
    /// tried again after the rest, as a deleted or unreachable one is.
    /// </summary>
    private static bool IsRefused(Exception e, bool fromDeadLetter) =>
        Refusal(e) is { } code && (code == FarmErrorCode.MessageSizeExceeded || (code == FarmErrorCode.QuotaExceeded && !fromDeadLetter));

    private static FarmErrorCode? Refusal(Exception e) => e switch
    {
        BrokerException broker => broker.Code,
        Grpc.Core.RpcException rpc when rpc.FarmError() == FarmErrorNames.Of(FarmErrorCode.MessageSizeExceeded) => FarmErrorCode.MessageSizeExceeded,
        Grpc.Core.RpcException rpc when rpc.FarmError() == FarmErrorNames.Of(FarmErrorCode.QuotaExceeded) => FarmErrorCode.QuotaExceeded,
        _ => null,
    };

    /// <summary>
    /// What the target refused (for its size, or being full) stays here: a message of the queue is dead-lettered
    /// (reason <see cref="ForwardingRefused"/>, naming the target and its answer), where it can be
    /// received; a dead letter stays in the dead-letter queue out of the forwarding until the
    /// queue is loaded again, as one past the hop limit does.
    /// </summary>
    private void KeepRefused(List<(StoredMessage Message, string Why)> refused, string targetName, bool fromDeadLetter)
    {
        if (refused.Count == 0)
        {
            return;
        }
        var changes = new List<PendingChange>();
        lock (_gate)
        {
            foreach (var (message, why) in refused)
            {
                if (fromDeadLetter)
                {
                    message.Settling = false;
                }
                else
                {
                    DeadLetterLocked(message, ForwardingRefused, $"'{targetName}' refused it: {why}", null, changes);
                }
            }
        }
        Flush(changes);
    }

    /// <summary>
    /// Makes the dead letters the forwarding left out (neither available, locked nor settling)
    /// available again, once the settings they were left out under changed.
    /// </summary>
    private void ReturnDeadLettersLeftBehind()
    {
        var returned = false;
        lock (_gate)
        {
            foreach (var message in _deadLetter.Messages.Values)
            {
                if (!message.IsLocked && !message.Settling && message.State == StoredMessageState.Active)
                {
                    returned |= _deadLetter.Available.Add(message.SequenceNumber);
                }
            }
        }
        if (returned)
        {
            _deadLetter.SignalArrived();
        }
    }

    /// <summary>
    /// The name a forwarded send of the messages with these sequence numbers (in the order sent)
    /// goes under: this entity, main or dead-letter, the last sequence number and a hash of them
    /// all, with the first as its send id. A try of the same messages again is the same send; a
    /// send of other messages is another, even between the same first and last (a message that
    /// became available in between since, or that has gone): named alike, the target would answer
    /// it from the earlier send, and a message that send did not carry would be deleted here
    /// without being stored there.
    /// </summary>
    internal static SendName ForwardSendName(long entityId, bool fromDeadLetter, IReadOnlyList<long> sequences)
    {
        // FNV-1a, 64 bits, over the sequence numbers' bytes: stable across processes and versions.
        var hash = 14695981039346656037UL;
        foreach (var sequence in sequences)
        {
            for (var shift = 0; shift < 64; shift += 8)
            {
                hash = (hash ^ (byte)((ulong)sequence >> shift)) * 1099511628211UL;
            }
        }
        return new SendName(
            string.Create(System.Globalization.CultureInfo.InvariantCulture, $"{ForwardOriginName(entityId, fromDeadLetter)}/{sequences[^1]}/{hash:x16}"),
            sequences[0]);
    }

    /// <summary>
    /// This entity's forwarding, main or dead-letter, as a target records each message it stored
    /// from here (<see cref="ForwardOrigin"/>, with the message's sequence number as send id).
    /// </summary>
    internal static string ForwardOriginName(long entityId, bool fromDeadLetter) =>
        string.Create(System.Globalization.CultureInfo.InvariantCulture, $"{ForwardProducerPrefix}{entityId}/{(fromDeadLetter ? "dead-letter" : "main")}");

    /// <summary>Producer ids a forwarder's sends and records use; a client's send may not take one (its record could stand for a forwarded message).</summary>
    internal const string ForwardProducerPrefix = "farm.forward/";

    /// <summary>
    /// Puts the messages of each send in doubt (see <see cref="_mainInDoubt"/>) that are still
    /// here first, in the order they went, then the rest in sequence order; returns each of those
    /// messages' block (its send), so <see cref="ForwardBatches"/> sends each block on its own.
    /// </summary>
    private static Dictionary<long, int>? InDoubtFirst(ref List<StoredMessage> taken, IReadOnlyList<long[]> inDoubt)
    {
        if (inDoubt.Count == 0)
        {
            return null;
        }
        var rest = taken.ToDictionary(m => m.SequenceNumber);
        var ordered = new List<StoredMessage>(taken.Count);
        var blocks = new Dictionary<long, int>();
        for (var block = 0; block < inDoubt.Count; block++)
        {
            // A sequence number in two sends (a batch refused whole, then its messages one by one) goes with the first.
            foreach (var sequence in inDoubt[block])
            {
                if (rest.Remove(sequence, out var message))
                {
                    ordered.Add(message);
                    blocks[sequence] = block;
                }
            }
        }
        ordered.AddRange(taken.Where(m => rest.ContainsKey(m.SequenceNumber)));
        taken = ordered;
        return blocks;
    }

    /// <summary>
    /// The sends one forwarding run makes, in the order of <paramref name="taken"/>: a run of
    /// messages with the same dead-letter source (dead letters carry the entity they were
    /// dead-lettered in; others keep what they carry), no bigger than a send may be, named by their
    /// sequence numbers (<see cref="ForwardSendName"/>). A block of a send in doubt
    /// (<paramref name="blocks"/>) is a send of its own.
    /// </summary>
    private IEnumerable<(int First, List<Message> Copies, string? DeadLetterSource, SendName Name, long[] Sequences)> ForwardBatches(
        List<StoredMessage> taken, bool fromDeadLetter, Dictionary<long, int>? blocks)
    {
        // Room for the request's own fields (entity, producer id, dead-letter source) under the batch limit.
        var maxBytes = _options.MaxBatchSizeBytes - 4096;
        var copies = new List<Message>();
        var bytes = 0;
        var first = 0;
        for (var i = 0; i <= taken.Count; i++)
        {
            var source = i < taken.Count ? SourceOf(taken[i]) : null;
            var copy = i < taken.Count ? ForwardCopy(taken[i], fromDeadLetter) : null;
            var size = copy is null ? 0 : copy.CalculateSize() + 8;
            if (copies.Count > 0 && (copy is null || !string.Equals(source, SourceOf(taken[first]), StringComparison.Ordinal) || bytes + size > maxBytes
                || BlockOf(taken[i]) != BlockOf(taken[first])))
            {
                long[] sequences = [.. taken.GetRange(first, copies.Count).Select(m => m.SequenceNumber)];
                yield return (first, copies, SourceOf(taken[first]), ForwardSendName(Id, fromDeadLetter, sequences), sequences);
                copies = [];
                bytes = 0;
                first = i;
            }
            if (copy is not null)
            {
                copies.Add(copy);
                bytes += size;
            }
        }

        string? SourceOf(StoredMessage message) => fromDeadLetter ? Name : message.DeadLetterSource;

        int? BlockOf(StoredMessage message) => blocks is not null && blocks.TryGetValue(message.SequenceNumber, out var block) ? block : null;
    }

    /// <summary>
    /// The copy the target stores: one more hop; dead letters carry their reason along as
    /// application properties, as Azure Service Bus does.
    /// </summary>
    private static Message ForwardCopy(StoredMessage message, bool fromDeadLetter)
    {
        var copy = message.ParseMessage();
        copy.TransferHopCount++;
        if (!fromDeadLetter)
        {
            return copy;
        }
        if (message.DeadLetterReason is { } reason)
        {
            copy.ApplicationProperties["DeadLetterReason"] = new PropertyValue { StringValue = reason };
        }
        if (message.DeadLetterDescription is { } description)
        {
            copy.ApplicationProperties["DeadLetterErrorDescription"] = new PropertyValue { StringValue = description };
        }
        return copy;
    }
}
