using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

// Auto-forwarding of messages already stored: dead letters when ForwardDeadLetteredMessagesTo is
// set, and messages that were in the queue before ForwardTo was set (new sends with ForwardTo go
// straight to the target). At-least-once: the target commits first, then the source deletes; a
// crash in between leaves a copy in both, never in neither.
internal sealed partial class QueueEntity
{
    private int _forwarding;

    /// <summary>Finds another entity by name; set by the container host.</summary>
    public Func<string, CancellationToken, Task<ISendTarget>>? Resolve { get; set; }

    /// <summary>Starts forwarding in the background if there is anything to forward and no run is going.</summary>
    private void StartForwarding()
    {
        var settings = Settings;
        if (Resolve is null || Volatile.Read(ref _forwarding) == 1)
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
            try
            {
                await ForwardAsync(targetName, fromDeadLetter).ConfigureAwait(false);
            }
            catch (Exception)
            {
                // The messages went back to their sub-queue; the next sweep tries again.
            }
            finally
            {
                Volatile.Write(ref _forwarding, 0);
            }
        });

    public const string MaxTransferHopCountExceeded = "MaxTransferHopCountExceeded";

    private async Task ForwardAsync(string targetName, bool fromDeadLetter)
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
                    // From a dead-letter queue it stays where it is, out of the forwarding (until the next load).
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
            return;
        }
        try
        {
            var target = await Resolve!(targetName, CancellationToken.None).ConfigureAwait(false);
            // Dead letters carry the entity they were dead-lettered in; others keep what they carry.
            foreach (var group in taken.GroupBy(m => fromDeadLetter ? Name : m.DeadLetterSource))
            {
                await target.SendAsync(group.Select(m => ForwardCopy(m, fromDeadLetter)).ToList(), group.Key).ConfigureAwait(false);
            }
        }
        catch (Exception)
        {
            taken.ForEach(Unsettle);
            throw;
        }
        await DeleteTakenAsync(sub, taken).ConfigureAwait(false);
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
