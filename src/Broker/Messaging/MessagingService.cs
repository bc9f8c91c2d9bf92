using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.Contracts.V1;
using Farm.Broker.Telemetry;

namespace Farm.Broker.Messaging;

/// <summary>
/// The farm.v1.Messaging operations on this broker's entities: validates requests, resolves the
/// entity (following ForwardTo on send) and calls it. The gateway maps these onto gRPC methods;
/// the broker knows nothing of the transport.
/// </summary>
public sealed class MessagingService(BrokerNode node)
{
    /// <summary>How long a receive stream's wait lasts with nothing waking it (the sweep ends it; the stream looks again).</summary>
    private static readonly TimeSpan StreamPollWait = TimeSpan.FromSeconds(30);

    private async Task<(QueueEntity Queue, bool DeadLetter)> ResolveAsync(string path, CancellationToken cancellationToken)
    {
        if (!EntityNames.TryParsePath(path, out var name, out var deadLetter, out var error))
        {
            throw FarmErrors.Invalid(error!);
        }
        return (await node.ResolveQueueAsync(name, cancellationToken).ConfigureAwait(false), deadLetter);
    }

    /// <summary>A queue or a topic; dead-letter queues and subscriptions are not sent to.</summary>
    private async ValueTask<ISendTarget> ResolveSendTargetAsync(string path, CancellationToken cancellationToken)
    {
        if (!EntityNames.TryParsePath(path, out var name, out var deadLetter, out var error))
        {
            throw FarmErrors.Invalid(error!);
        }
        if (deadLetter)
        {
            throw FarmErrors.Invalid($"'{path}' is a dead-letter queue: messages get there by dead-lettering, not by sending.");
        }
        if (EntityNames.IsSubscriptionPath(name))
        {
            throw FarmErrors.Invalid($"'{path}' is a subscription: messages reach it through its topic; send to the topic instead.");
        }
        return await node.ResolveSendTargetAsync(name, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Stores a send. One that carries a producer and send id is stored once however often it comes
    /// (<see cref="RecentSends"/>): its repeats get the first try's sequence numbers. It is recorded
    /// with its answer in the commit that stores it, so a repeat that reaches another node after a
    /// failover (one the client marked as a repeat) finds the record and gets the same answer.
    /// An overloaded node refuses it first (<see cref="Overload.SendShedding"/>), before it is recorded.
    /// </summary>
    public Task<SendResponse> SendAsync(SendRequest request, CancellationToken cancellationToken)
    {
        node.SendShedding.ThrowIfBehind(request.Entity);
        if (request.ProducerId.Length == 0)
        {
            return StoreAsync(request, cancellationToken);
        }
        if (!request.Forwarded && request.ProducerId.StartsWith(QueueEntity.ForwardProducerPrefix, StringComparison.Ordinal))
        {
            // Its record would be taken for a forwarded message's, and that message left out of a repeat.
            throw FarmErrors.Invalid($"producer_id '{request.ProducerId}': ids starting with '{QueueEntity.ForwardProducerPrefix}' are the brokers' own (auto-forwarding); choose another.");
        }
        return StoreOnceAsync(request, cancellationToken);
    }

    /// <summary>Refuses a send this node would pass on (it forwards it to the owner) while the node is overloaded.</summary>
    public void ShedIfBehind(string entity) => node.SendShedding.ThrowIfBehind(entity);

    /// <summary>Refuses a new receive link (served here or proxied to the owner) while the node is overloaded.</summary>
    public void ShedReceiveLinkIfBehind(string entity) => node.SendShedding.ThrowIfBehindForReceiveLink(entity);

    private Task<SendResponse> StoreOnceAsync(SendRequest request, CancellationToken cancellationToken) =>
        node.RecentSends.SendOnceAsync(request, () => StoreAsync(request, cancellationToken));

    private async Task<SendResponse> StoreAsync(SendRequest request, CancellationToken cancellationToken)
    {
        SendName? name = request.ProducerId.Length > 0 ? new SendName(request.ProducerId, request.SendId) : null;
        if (request.Messages.Count == 0)
        {
            throw FarmErrors.Invalid("A send needs at least one message.");
        }
        var target = await ResolveSendTargetAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        var batchBytes = request.CalculateSize();
        if (batchBytes > node.Options.MaxBatchSizeBytes)
        {
            throw FarmErrors.SizeExceeded($"The batch is {batchBytes} bytes; the maximum batch size is {node.Options.MaxBatchSizeBytes} bytes ({node.Options.MaxBatchSizeBytes / 1024} KB).");
        }
        // New sends to an entity with ForwardTo go straight to the end of its chain, counting the hops
        // on the way; the walk stops at the hop limit, a loop, or a hop another node serves, and the
        // entity it stops at forwards on (or dead-letters past the limit) by itself.
        // The set of names seen is made only for a chain: most sends go to an entity without ForwardTo.
        // The broker counts hops; whatever a client put there does not count. A node forwarding here
        // from its own entity (forwarded) sends the hops the messages took so far.
        var before = request.Forwarded ? request.Messages.Max(m => m.TransferHopCount) : 0u;
        HashSet<string>? seen = null;
        // The chain walked, from the entity named to where the walk stopped (null: no hop, as for most sends).
        List<ISendTarget>? walked = null;
        uint Hops() => walked is null ? 0 : (uint)walked.Count - 1;
        ISendTarget EntityAt(int hop) => walked?[hop] ?? target;
        while (target is QueueEntity { Settings.ForwardTo: { } next } && before + Hops() < node.Options.MaxForwardHops
            && (seen ??= new HashSet<string>(StringComparer.OrdinalIgnoreCase) { target.Name }).Add(next)
            && node.IsLocal(await node.FindEntityAsync(next, cancellationToken).ConfigureAwait(false)))
        {
            (walked ??= [target]).Add(target = await node.ResolveSendTargetAsync(next, cancellationToken).ConfigureAwait(false));
        }
        // The hops the messages took before this send count only from a forwarding node.
        var hopsBefore = request.Forwarded ? request.Messages.Select(m => m.TransferHopCount).ToArray() : null;
        var hops = Hops();
        CountHops(request, hopsBefore, hops);
        var deadLetterSource = request.Forwarded && request.DeadLetterSource.Length > 0 ? request.DeadLetterSource : null;
        if (name is { } repeated && request.Repeat)
        {
            // Stored by another node (or before a restart) whose answer never reached the client;
            // what it completed was completed in the same commit. Where in a chain it was stored
            // depends on which entities were full then: from the end back.
            for (var at = (int)hops; at >= 0; at--)
            {
                if (await EntityAt(at).FindRecordedSendAsync(repeated, RecentSends.RememberedSinceMs(node.Time), cancellationToken).ConfigureAwait(false) is { } recorded)
                {
                    return new SendResponse { SequenceNumbers = { recorded }, Completed = request.Completes is not null };
                }
            }
        }
        if (request.Completes is { } completes)
        {
            // One transaction of one container. A full hop is passed by as for any send: the
            // messages go into the entity before it (whose forwarder dead-letters what the full one
            // refuses), with the completions, when that one is in the received messages' container;
            // a refused try gave the locks back, and the next takes them again.
            for (var at = (int)hops; ; at--)
            {
                try
                {
                    return await SendAndCompleteAsync(request, EntityAt(at), completes, name, cancellationToken).ConfigureAwait(false);
                }
                catch (BrokerException e) when (e.Code == FarmErrorCode.QuotaExceeded && at > 0)
                {
                    CountHops(request, hopsBefore, (uint)(at - 1));
                }
            }
        }
        var origin = ForwardOrigin.Of(request);
        // Forwarded: claimed first, so another send of one of its messages (ForwardsInFlight) ends
        // before this one looks for their records.
        return origin is null ? await StoreWalkedAsync(null).ConfigureAwait(false)
            : await node.ForwardsInFlight.StoreClaimedAsync(origin, () => StoreWalkedAsync(origin)).ConfigureAwait(false);

        async Task<SendResponse> StoreWalkedAsync(ForwardOrigin? origin)
        {
            IReadOnlyList<Message> messages = request.Messages;
            long?[]? answered = null;
            if (origin is not null)
            {
                // Some of these messages may be stored here already, by a send of the source's
                // previous owner cut into other batches (its repeat after a failover), or by a
                // frozen owner's send that went on after it resumed. Those are answered from their
                // records (one read per entity, where another send of them may have been stored:
                // ForwardSenders); only the rest are stored.
                answered = await origin.FindRecordedAsync(walked ?? [target], node.Time, cancellationToken).ConfigureAwait(false);
                if (answered is not null && answered.All(a => a is not null))
                {
                    return new SendResponse { SequenceNumbers = { answered.Select(a => a!.Value) } };
                }
                if (answered is not null)
                {
                    (messages, origin) = origin.Unanswered(messages, answered);
                    // Its own record would answer a repeat of this batch with fewer numbers than messages.
                    name = null;
                }
            }
            for (var at = (int)hops; ; at--)
            {
                try
                {
                    var sequenceNumbers = await EntityAt(at).SendAsync(messages, deadLetterSource, name, origin: origin).ConfigureAwait(false);
                    return new SendResponse { SequenceNumbers = { answered is null ? sequenceNumbers : ForwardOrigin.Merge(answered, sequenceNumbers) } };
                }
                catch (BrokerException e) when (e.Code == FarmErrorCode.QuotaExceeded && at > 0)
                {
                    // The next hop is full. As in Azure Service Bus, the send is stored in the entity
                    // before it, whose forwarder dead-letters what the full one refuses
                    // (QueueEntity.ForwardAsync); the sender hears of it only when the entity it named is full.
                    CountHops(request, hopsBefore, (uint)(at - 1));
                }
            }
        }
    }

    /// <summary>Each message's hops once stored <paramref name="hops"/> entities down the chain from where it was sent.</summary>
    private static void CountHops(SendRequest request, uint[]? hopsBefore, uint hops)
    {
        for (var i = 0; i < request.Messages.Count; i++)
        {
            request.Messages[i].TransferHopCount = (hopsBefore?[i] ?? 0) + hops;
        }
    }

    /// <summary>
    /// A send that completes locked messages in its own transaction ("send via"): both entities must
    /// be in one container, whose commit then stores the messages and deletes the completed ones
    /// together. A send that stores nothing new (every message a duplicate) commits the completions
    /// alone; one that fails before its commit gives the locks back, so the handler can still
    /// abandon or dead-letter what it could not forward.
    /// </summary>
    private async Task<SendResponse> SendAndCompleteAsync(SendRequest request, ISendTarget target, SendCompletes completes, SendName? name, CancellationToken cancellationToken)
    {
        if (!EntityNames.TryParsePath(completes.Entity, out var sourceName, out var deadLetter, out var error))
        {
            throw FarmErrors.Invalid($"completes.entity: {error}");
        }
        var sourceRecord = await node.FindEntityAsync(sourceName, cancellationToken).ConfigureAwait(false);
        if (sourceRecord.ContainerId != target.Commits.ContainerId)
        {
            throw FarmErrors.NotSupported(
                $"'{target.Name}' (container {target.Commits.ContainerId}) and '{completes.Entity}' (container {sourceRecord.ContainerId}) are in different message containers; "
                + "a send that completes a message is one transaction of one container. Send, then complete, or keep the two entities in one container.");
        }
        var source = await node.ResolveQueueAsync(sourceName, cancellationToken).ConfigureAwait(false);
        var with = source.PrepareCompletions(deadLetter, completes.LockTokens);
        long[] sequenceNumbers;
        try
        {
            sequenceNumbers = await target.SendAsync(request.Messages, name: name, with: with).ConfigureAwait(false);
        }
        catch
        {
            // Only when the send failed before its commit took them (a failed commit failed them itself).
            with.GiveBack();
            throw;
        }
        await with.CommitAloneAsync().ConfigureAwait(false);
        return new SendResponse { SequenceNumbers = { sequenceNumbers }, Completed = true };
    }

    public async Task<ReceiveBatchResponse> ReceiveBatchAsync(ReceiveBatchRequest request, CancellationToken cancellationToken)
    {
        if (request.MaxMessages < 1)
        {
            throw FarmErrors.Invalid($"max_messages must be at least 1; got {request.MaxMessages}.");
        }
        var maxWait = request.MaxWait?.ToTimeSpan() ?? TimeSpan.Zero;
        if (maxWait < TimeSpan.Zero)
        {
            throw FarmErrors.Invalid($"max_wait must not be negative; got {maxWait}.");
        }
        RequireMode(request.Mode);
        var (queue, deadLetter) = await ResolveAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        RefuseIfForwarding(queue, deadLetter);
        var messages = await queue.ReceiveAsync(deadLetter, request.Mode, request.MaxMessages, maxWait, cancellationToken).ConfigureAwait(false);
        return new ReceiveBatchResponse { Messages = { messages } };
    }

    /// <summary>
    /// A receive stream with credit: pushes messages while the client has credit, waits when it
    /// has none. Ends when the client half-closes and its credit is used up, or cancels. A peek-lock
    /// stream whose open asked for it also takes settlements (<see cref="ReceiveSettle"/>), each
    /// answered on the stream once committed: no Settle call of its own per batch.
    /// </summary>
    public async Task ReceiveAsync(IAsyncEnumerable<ReceiveRequest> requests, IResponseStream<ReceiveResponse> responses, CancellationToken cancellationToken)
    {
        // Whoever reads the request stream last disposes it, after its last read: disposing an
        // async enumerator while another task is inside MoveNextAsync throws.
        var incoming = requests.GetAsyncEnumerator(cancellationToken);
        QueueEntity queue;
        bool deadLetter;
        ReceiveOpen open;
        try
        {
            if (!await incoming.MoveNextAsync().ConfigureAwait(false) || incoming.Current.KindCase != ReceiveRequest.KindOneofCase.Open)
            {
                throw FarmErrors.Invalid("The first message of a receive stream must be 'open'.");
            }
            open = incoming.Current.Open;
            if (open.Credit < 1)
            {
                throw FarmErrors.Invalid($"The initial credit must be at least 1; got {open.Credit}.");
            }
            RequireMode(open.Mode);
            (queue, deadLetter) = await ResolveAsync(open.Entity, cancellationToken).ConfigureAwait(false);
            RefuseIfForwarding(queue, deadLetter);
        }
        catch
        {
            await DisposeQuietlyAsync(incoming).ConfigureAwait(false);
            throw;
        }

        var counters = queue.CountersOf(deadLetter);
        counters.AddReceiver();
        try
        {
            await ServeReceiveLinkAsync(incoming, responses, queue, deadLetter, open, counters, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            counters.RemoveReceiver();
        }
    }

    private async Task ServeReceiveLinkAsync(
        IAsyncEnumerator<ReceiveRequest> incoming, IResponseStream<ReceiveResponse> responses, QueueEntity queue, bool deadLetter, ReceiveOpen open,
        EntityCounters counters, CancellationToken cancellationToken)
    {
        // The link's one wait for messages, woken by arrivals, the sweep, a drain or the call's end.
        var waiter = new ReceiveWaiter();
        var credit = new CreditCounter(open.Credit, onDrain: () => waiter.Wake());
        using var wakeOnEnd = cancellationToken.UnsafeRegister(static w => ((ReceiveWaiter)w!).Wake(), waiter);
        // Messages and settle answers are written from different tasks: one write at a time.
        var writes = new SemaphoreSlim(1, 1);
        var settleOnStream = open.SettleOnStream && open.Mode == ReceiveMode.PeekLock && node.Options.SettleOnReceiveStream;
        var settling = new StreamSettlements();
        // Reads credit until the client half-closes or the call ends. The call does not wait for it:
        // when the stream must end (its entity moved away), the reader may be blocked on a client that
        // is itself waiting for messages; ending the call ends that read.
        _ = Task.Run(async () =>
        {
            try
            {
                while (await incoming.MoveNextAsync().ConfigureAwait(false))
                {
                    if (incoming.Current.KindCase == ReceiveRequest.KindOneofCase.Credit && incoming.Current.Credit > 0)
                    {
                        credit.Add(incoming.Current.Credit);
                        counters.AddCreditGrant();
                    }
                    else if (incoming.Current.KindCase == ReceiveRequest.KindOneofCase.Drain)
                    {
                        credit.Drain();
                    }
                    else if (incoming.Current.KindCase == ReceiveRequest.KindOneofCase.Settle && settleOnStream)
                    {
                        // Not awaited: credit keeps flowing while the settlements commit.
                        var settle = incoming.Current.Settle;
                        if (settle.Credit > 0)
                        {
                            // A receiver's prefetch refill, carried by the settlement it sent anyway
                            // (not a credit frame: farm_receive_credit_grants counts those).
                            credit.Add(settle.Credit);
                        }
                        settling.TryStart(() => SettleOnStreamAsync(queue, deadLetter, settle, responses, writes, cancellationToken));
                    }
                }
            }
            catch (Exception)
            {
                // The call ended or broke: there is no more credit to read.
            }
            finally
            {
                credit.Complete();
                await DisposeQuietlyAsync(incoming).ConfigureAwait(false);
            }
        }, CancellationToken.None);

        if (settleOnStream)
        {
            // Before any message: the client settles by Settle calls until it reads this. Written
            // once the reader runs, so a failed write leaves the request stream to it to dispose.
            await WriteAsync(responses, writes, new ReceiveResponse { SettlesOnStream = true, SettleCredit = true }, cancellationToken).ConfigureAwait(false);
        }

        try
        {
            while (true)
            {
                var available = await WaitForCreditAsync(credit, queue, cancellationToken).ConfigureAwait(false);
                if (credit.TakeDrainRequest())
                {
                    // Everything taken with the old credit was written above: the client may trust its buffer now.
                    await WriteAsync(responses, writes, new ReceiveResponse { Drained = true }, cancellationToken).ConfigureAwait(false);
                    continue;
                }
                if (available <= 0)
                {
                    return;
                }
                var messages = await queue.TakeOrArm(deadLetter, open.Mode, available, waiter, StreamPollWait, stored: true).ConfigureAwait(false);
                if (messages.Count == 0)
                {
                    // A drain or the call's end that came before the waiter was armed finds it here;
                    // one after wakes it. The wait itself never throws.
                    if (!credit.DrainRequested && !cancellationToken.IsCancellationRequested)
                    {
                        await waiter.WaitAsync().ConfigureAwait(false);
                    }
                    queue.EndWait(deadLetter, waiter);
                    cancellationToken.ThrowIfCancellationRequested();
                    continue;
                }
                credit.Take(messages.Count);
                try
                {
                    await WriteAsync(responses, writes, new ReceiveResponse { Messages = { messages } }, cancellationToken).ConfigureAwait(false);
                }
                catch (Exception) when (open.Mode == ReceiveMode.PeekLock)
                {
                    // Never written to the stream, so never seen: give the locks back without counting a delivery.
                    await ReleaseQuietlyAsync(queue, deadLetter, messages).ConfigureAwait(false);
                    throw;
                }
            }
        }
        finally
        {
            // The stream ends (its entity stopped being served here, the client went, the credit ran
            // out): settlements already taken from it are answered on it before it closes, so a client
            // does not retry one that was done (it would be told MessageLockLost); any it sends later
            // are not taken, and it makes them by Settle calls.
            await settling.CloseAndWaitAsync().ConfigureAwait(false);
        }
    }

    private static async Task WriteAsync(IResponseStream<ReceiveResponse> responses, SemaphoreSlim writes, ReceiveResponse response, CancellationToken cancellationToken)
    {
        await writes.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            await responses.WriteAsync(response, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            writes.Release();
        }
    }

    /// <summary>
    /// Settles as a Settle call on the stream's entity would, and answers on the stream: the results,
    /// or the error a Settle call would have failed with. An answer the stream can no longer carry is
    /// dropped: the client's stream broke, and it settles again by a Settle call (the outcome of these
    /// settlements is then theirs to find: done, or MessageLockLost).
    /// </summary>
    private static async Task SettleOnStreamAsync(
        QueueEntity queue, bool deadLetter, ReceiveSettle settle, IResponseStream<ReceiveResponse> responses, SemaphoreSlim writes, CancellationToken cancellationToken)
    {
        var settled = new ReceiveSettled { Id = settle.Id };
        try
        {
            var results = await queue.SettleAsync(deadLetter, settle.Settlements).ConfigureAwait(false);
            if (settle.AcceptsAllSucceeded && AllSucceeded(results))
            {
                // A count, not a result per settlement echoing its lock token: what nearly every answer is.
                settled.AllSucceeded = results.Count;
            }
            else
            {
                settled.Results.AddRange(results);
            }
        }
        catch (BrokerException e)
        {
            settled.ErrorCode = e.Code;
            settled.ErrorMessage = e.Message;
        }
        catch (Exception e)
        {
            // As an unexpected failure of a Settle call, and retried like one (the outcome is unknown).
            settled.ErrorCode = FarmErrorCode.StoreUnavailable;
            settled.ErrorMessage = $"Settling failed: {e.Message}";
        }
        try
        {
            await WriteAsync(responses, writes, new ReceiveResponse { Settled = settled }, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The stream is gone: see above.
        }
    }

    private static bool AllSucceeded(IReadOnlyList<SettleResult> results)
    {
        foreach (var result in results)
        {
            if (result.ErrorCode != FarmErrorCode.Unspecified)
            {
                return false;
            }
        }
        return results.Count > 0;
    }

    private static async Task ReleaseQuietlyAsync(QueueEntity queue, bool deadLetter, IReadOnlyList<ReceivedMessage> messages)
    {
        try
        {
            await queue.ReleaseUndeliveredAsync(deadLetter, messages.Select(m => m.LockToken).ToList()).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The entity is gone or cannot write: the locks run out on their own, as after a crash.
        }
    }

    /// <summary>
    /// An entity whose messages are auto-forwarded holds nothing to receive: Azure refuses such a
    /// receive rather than let it wait for nothing. Peeking stays allowed.
    /// </summary>
    private static void RefuseIfForwarding(QueueEntity queue, bool deadLetter)
    {
        var settings = queue.Settings;
        if (!deadLetter && settings.ForwardTo is { } to)
        {
            throw FarmErrors.Invalid($"'{queue.Name}' forwards its messages to '{to}' (ForwardTo); receive from '{to}' instead.");
        }
        if (deadLetter && settings.ForwardDeadLetteredMessagesTo is { } dlTo)
        {
            throw FarmErrors.Invalid(
                $"'{queue.Name}{EntityNames.DeadLetterQueueSuffix}' forwards its messages to '{dlTo}' (ForwardDeadLetteredMessagesTo); receive from '{dlTo}' instead.");
        }
    }

    /// <summary>An unset receive mode is refused: guessing would either delete or lock what the client did not mean to.</summary>
    private static void RequireMode(ReceiveMode mode)
    {
        if (mode is not (ReceiveMode.PeekLock or ReceiveMode.ReceiveAndDelete))
        {
            throw FarmErrors.Invalid($"The receive mode is required: PEEK_LOCK or RECEIVE_AND_DELETE (got {mode}).");
        }
    }

    /// <summary>Disposes a request stream's enumerator, ignoring the failure of a stream that is already gone.</summary>
    public static async ValueTask DisposeQuietlyAsync<T>(IAsyncEnumerator<T> enumerator)
    {
        try
        {
            await enumerator.DisposeAsync().ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The request stream is gone either way.
        }
    }

    /// <summary>Credit, or the entity's unload reason thrown: a stream never outlives its entity here.</summary>
    private static async Task<int> WaitForCreditAsync(CreditCounter credit, QueueEntity queue, CancellationToken cancellationToken)
    {
        var waiting = credit.WaitAsync(cancellationToken);
        if (waiting.IsCompleted)
        {
            // The usual case, credit in hand: no race with the unload to set up.
            return await waiting.ConfigureAwait(false);
        }
        if (await Task.WhenAny(waiting, queue.Unloaded).ConfigureAwait(false) == queue.Unloaded)
        {
            throw await queue.Unloaded.ConfigureAwait(false);
        }
        return await waiting.ConfigureAwait(false);
    }

    public async Task<SettleResponse> SettleAsync(SettleRequest request, CancellationToken cancellationToken)
    {
        var (queue, deadLetter) = await ResolveAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        var results = await queue.SettleAsync(deadLetter, request.Settlements, request.Repeat).ConfigureAwait(false);
        return new SettleResponse { Results = { results } };
    }

    public async Task<RenewLockResponse> RenewLockAsync(RenewLockRequest request, CancellationToken cancellationToken)
    {
        var (queue, deadLetter) = await ResolveAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        return new RenewLockResponse { Results = { queue.RenewLocks(deadLetter, request.LockTokens) } };
    }

    public async Task<ReceiveBatchResponse> ReceiveDeferredAsync(ReceiveDeferredRequest request, CancellationToken cancellationToken)
    {
        if (request.SequenceNumbers.Count == 0)
        {
            throw FarmErrors.Invalid("Name at least one sequence number.");
        }
        var (queue, deadLetter) = await ResolveAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        RefuseIfForwarding(queue, deadLetter);
        if (deadLetter)
        {
            throw FarmErrors.Invalid("A dead-letter queue holds no deferred messages.");
        }
        RequireMode(request.Mode);
        var messages = await queue.ReceiveDeferredAsync(request.SequenceNumbers, request.Mode).ConfigureAwait(false);
        return new ReceiveBatchResponse { Messages = { messages } };
    }

    public async Task<PeekResponse> PeekAsync(PeekRequest request, CancellationToken cancellationToken)
    {
        var max = request.MaxMessages < 1 ? 1 : Math.Min(request.MaxMessages, node.Options.MaxMessagesPerReceive);
        var (queue, deadLetter) = await ResolveAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        return new PeekResponse { Messages = { await queue.PeekAsync(deadLetter, request.FromSequenceNumber, max).ConfigureAwait(false) } };
    }

    /// <summary>Most messages one DeleteMessages call deletes when it does not say (10,000), and at most (100,000).</summary>
    public const int DefaultDeleteMessages = 10_000;

    public const int MaxDeleteMessages = 100_000;

    public async Task<DeleteMessagesResponse> DeleteMessagesAsync(DeleteMessagesRequest request, CancellationToken cancellationToken)
    {
        if (request.MaxMessages < 0 || request.MaxMessages > MaxDeleteMessages)
        {
            throw FarmErrors.Invalid($"max_messages must be between 1 and {MaxDeleteMessages} (0: {DefaultDeleteMessages}), not {request.MaxMessages}.");
        }
        if (request.ThroughSequenceNumber < 0)
        {
            throw FarmErrors.Invalid($"through_sequence_number must be a sequence number (0: the last one handed out), not {request.ThroughSequenceNumber}.");
        }
        var (queue, deadLetter) = await ResolveAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        var max = request.MaxMessages == 0 ? DefaultDeleteMessages : request.MaxMessages;
        var (deleted, through, more) = await queue.DeleteMessagesAsync(deadLetter, max, request.ThroughSequenceNumber, cancellationToken).ConfigureAwait(false);
        return new DeleteMessagesResponse { DeletedCount = deleted, ThroughSequenceNumber = through, More = more };
    }

    public async Task<ResubmitDeadLettersResponse> ResubmitDeadLettersAsync(ResubmitDeadLettersRequest request, CancellationToken cancellationToken)
    {
        if (request.MaxMessages < 0 || request.MaxMessages > MaxDeleteMessages)
        {
            throw FarmErrors.Invalid($"max_messages must be between 1 and {MaxDeleteMessages} (0: {DefaultDeleteMessages}), not {request.MaxMessages}.");
        }
        if (request.SequenceNumbers.Any(s => s < 1))
        {
            throw FarmErrors.Invalid("Sequence numbers start at 1.");
        }
        var (queue, _) = await ResolveAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        var max = request.MaxMessages == 0 ? DefaultDeleteMessages : request.MaxMessages;
        var (resubmitted, more) = await queue.ResubmitDeadLettersAsync(request.SequenceNumbers, max, cancellationToken).ConfigureAwait(false);
        return new ResubmitDeadLettersResponse { ResubmittedCount = resubmitted, More = more };
    }

    public async Task<CancelScheduledResponse> CancelScheduledAsync(CancelScheduledRequest request, CancellationToken cancellationToken)
    {
        if (request.Entity.EndsWith(EntityNames.DeadLetterQueueSuffix, StringComparison.OrdinalIgnoreCase))
        {
            throw FarmErrors.Invalid("A dead-letter queue holds no scheduled messages.");
        }
        var target = await ResolveSendTargetAsync(request.Entity, cancellationToken).ConfigureAwait(false);
        await target.CancelScheduledAsync(request.SequenceNumbers).ConfigureAwait(false);
        return new CancelScheduledResponse();
    }
}

/// <summary>
/// The settlements a receive stream took and has not answered yet. Closing stops it taking more
/// and waits for those it took, so each is answered while the stream is still open.
/// </summary>
internal sealed class StreamSettlements
{
    private readonly Lock _gate = new();
    private readonly HashSet<Task> _running = [];
    private bool _closed;

    /// <summary>Starts <paramref name="settle"/> unless the stream is closing (then the settlements are not taken).</summary>
    public void TryStart(Func<Task> settle)
    {
        lock (_gate)
        {
            if (_closed)
            {
                return;
            }
            var task = settle();
            if (!task.IsCompleted)
            {
                _running.Add(task);
                _ = task.ContinueWith(done =>
                {
                    lock (_gate)
                    {
                        _running.Remove(done);
                    }
                }, TaskScheduler.Default);
            }
        }
    }

    public async Task CloseAndWaitAsync()
    {
        Task[] running;
        lock (_gate)
        {
            _closed = true;
            running = [.. _running];
        }
        await Task.WhenAll(running).ConfigureAwait(false);
    }
}
