using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Client;

/// <summary>
/// Receives, peeks and settles messages of one entity, like Azure's ServiceBusReceiver. Receives
/// flow over one credit-based stream; settlement, lock renewal, peek and deferred receive are
/// unary calls with retries. Thread-safe.
/// </summary>
public sealed class FarmReceiver : IAsyncDisposable
{
    private readonly FarmConnection _connection;
    private readonly Action<IAsyncDisposable>? _onClosed;
    private readonly ReceiveLink _link;
    private readonly SettleBatcher _settler;
    private long _lastPeekedSequenceNumber = -1;
    private int _closed;

    internal FarmReceiver(FarmConnection connection, string entityPath, FarmReceiverOptions options, Action<IAsyncDisposable>? onClosed)
    {
        ArgumentNullException.ThrowIfNull(options);
        ArgumentOutOfRangeException.ThrowIfNegative(options.PrefetchCount, nameof(options.PrefetchCount));
        _connection = connection;
        _onClosed = onClosed;
        EntityPath = FarmEntityPath.Apply(entityPath, options.SubQueue);
        ReceiveMode = options.ReceiveMode;
        PrefetchCount = options.PrefetchCount;
        _link = new ReceiveLink(connection, EntityPath, WireMode, PrefetchCount);
        _settler = new SettleBatcher(EntityPath, SendSettlementsAsync);
    }

    /// <summary>How long a drain waits for the broker's answer before it gives the stream up.</summary>
    private static readonly TimeSpan DrainTimeout = TimeSpan.FromSeconds(5);

    public string EntityPath { get; }

    public FarmReceiveMode ReceiveMode { get; }

    public int PrefetchCount { get; }

    public bool IsClosed => Volatile.Read(ref _closed) != 0;

    private ReceiveMode WireMode => ReceiveMode == FarmReceiveMode.ReceiveAndDelete ? Contracts.V1.ReceiveMode.ReceiveAndDelete : Contracts.V1.ReceiveMode.PeekLock;

    /// <summary>Waits up to <paramref name="maxWaitTime"/> (default: the try timeout) for a message; null when none came.</summary>
    public async Task<FarmReceivedMessage?> ReceiveMessageAsync(TimeSpan? maxWaitTime = null, CancellationToken cancellationToken = default)
    {
        var messages = await ReceiveMessagesAsync(1, maxWaitTime, cancellationToken).ConfigureAwait(false);
        return messages.Count == 0 ? null : messages[0];
    }

    /// <summary>
    /// Waits up to <paramref name="maxWaitTime"/> (default: the try timeout) for a first message and
    /// returns it with whatever else is already here, at most <paramref name="maxMessages"/>; empty when none came.
    /// </summary>
    public async Task<IReadOnlyList<FarmReceivedMessage>> ReceiveMessagesAsync(int maxMessages, TimeSpan? maxWaitTime = null, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(maxMessages, 1);
        ThrowIfClosed();
        var wait = ClampWait(maxWaitTime ?? _connection.Retry.TryTimeout);

        using var activity = FarmTelemetry.StartOperation("receive", EntityPath, System.Diagnostics.ActivityKind.Consumer);
        try
        {
            List<ReceivedMessage> received;
            try
            {
                received = await _link.ReceiveAsync(maxMessages, wait, Math.Max(PrefetchCount, maxMessages), cancellationToken, batchedCredit: maxMessages <= PrefetchCount).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                // Credit granted for this call must not outlive it: what arrives meanwhile stays
                // buffered for the next call instead of being taken (and in ReceiveAndDelete,
                // deleted) for nobody.
                await DrainLeftoverCreditAsync().ConfigureAwait(false);
                throw;
            }
            if (received.Count < maxMessages && _link.HasCreditBeyond(Math.Max(PrefetchCount, _link.Wanted)))
            {
                // This call granted more than the receiver prefetches and did not use it all (it
                // timed out, or fewer came): take the rest back, and hand out what came meanwhile.
                await DrainLeftoverCreditAsync().ConfigureAwait(false);
                received.AddRange(_link.TakeBuffered(maxMessages - received.Count));
            }
            if (PrefetchCount > 0 && !(ReceiveMode == FarmReceiveMode.PeekLock && received.Count > 0 && _link.SettlementsCarryCredit))
            {
                // Refill the buffer for what the application just took. In peek-lock on a stream that
                // takes credit with settlements, the settlement of what was taken carries the refill
                // (or the next receive makes it): one frame a message fewer for a lone message.
                await _link.EnsureCreditAsync(PrefetchCount, cancellationToken, batched: true).ConfigureAwait(false);
            }

            FarmTelemetry.RecordConsumed(EntityPath, received.Count);
            return Map(received, settleable: ReceiveMode == FarmReceiveMode.PeekLock);
        }
        catch (Exception e)
        {
            FarmTelemetry.Failed(activity, e);
            throw;
        }
    }

    /// <summary>
    /// For a processor's worker: waits on its <paramref name="waiter"/>, allocating nothing, until a
    /// message is buffered (the receive that follows takes it without waiting), the receiver closes,
    /// or the token is cancelled. Workers waiting together are woken one per message.
    /// </summary>
    internal ValueTask WaitForMessageAsync(LinkWaiter waiter, CancellationToken cancellationToken)
    {
        ThrowIfClosed();
        return _link.WaitForBufferedAsync(waiter, Math.Max(1, PrefetchCount), cancellationToken);
    }

    /// <summary>Whether a message is buffered, ready for a receive that does not wait.</summary>
    internal bool HasBufferedMessage => _link.HasBuffered;

    /// <summary>Yields messages as they arrive until cancelled.</summary>
    public async IAsyncEnumerable<FarmReceivedMessage> ReceiveMessagesAsync([System.Runtime.CompilerServices.EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        while (!cancellationToken.IsCancellationRequested)
        {
            var batch = await ReceiveMessagesAsync(Math.Max(1, PrefetchCount), null, cancellationToken).ConfigureAwait(false);
            foreach (var message in batch)
            {
                yield return message;
            }
        }
    }

    public async Task<FarmReceivedMessage?> PeekMessageAsync(long? fromSequenceNumber = null, CancellationToken cancellationToken = default)
    {
        var messages = await PeekMessagesAsync(1, fromSequenceNumber, cancellationToken).ConfigureAwait(false);
        return messages.Count == 0 ? null : messages[0];
    }

    /// <summary>
    /// Peeks without locking, from <paramref name="fromSequenceNumber"/> or else after the last
    /// message this receiver peeked (so repeated calls page through the entity).
    /// </summary>
    public async Task<IReadOnlyList<FarmReceivedMessage>> PeekMessagesAsync(int maxMessages, long? fromSequenceNumber = null, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(maxMessages, 1);
        ThrowIfClosed();
        var from = fromSequenceNumber ?? (Interlocked.Read(ref _lastPeekedSequenceNumber) + 1);
        var request = new PeekRequest { Entity = EntityPath, FromSequenceNumber = Math.Max(0, from), MaxMessages = maxMessages };
        var response = await _connection.UnaryAsync(FarmCalls.Peek, request, EntityPath, cancellationToken).ConfigureAwait(false);
        if (response.Messages.Count > 0)
        {
            Interlocked.Exchange(ref _lastPeekedSequenceNumber, response.Messages[^1].SequenceNumber);
        }

        return Map(response.Messages, settleable: false);
    }

    /// <summary>
    /// Deletes up to <paramref name="maxMessages"/> of the messages a receiver could take now (as
    /// Azure Service Bus's DeleteMessagesAsync does), lowest sequence number first, from this
    /// receiver's entity or dead-letter queue. Locked, deferred and scheduled messages stay. Returns
    /// how many were deleted.
    /// </summary>
    public async Task<int> DeleteMessagesAsync(int maxMessages, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(maxMessages, 1);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(maxMessages, 100_000);
        ThrowIfClosed();
        var response = await _connection.UnaryAsync(FarmCalls.DeleteMessages, new DeleteMessagesRequest { Entity = EntityPath, MaxMessages = maxMessages }, EntityPath, cancellationToken).ConfigureAwait(false);
        return response.DeletedCount;
    }

    /// <summary>
    /// Deletes every message a receiver could take from this receiver's entity (or dead-letter
    /// queue) among those it held when the purge began; messages sent since stay, and so do locked,
    /// deferred and scheduled ones. A deep entity takes several calls (each bounded); returns how
    /// many were deleted in all.
    /// </summary>
    public async Task<long> PurgeMessagesAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfClosed();
        long total = 0;
        var request = new DeleteMessagesRequest { Entity = EntityPath };
        while (true)
        {
            var response = await _connection.UnaryAsync(FarmCalls.DeleteMessages, request, EntityPath, cancellationToken).ConfigureAwait(false);
            total += response.DeletedCount;
            if (!response.More)
            {
                return total;
            }
            request.ThroughSequenceNumber = response.ThroughSequenceNumber;
        }
    }

    /// <summary>
    /// Moves dead-lettered messages of this receiver's queue back to it (the receiver may be the
    /// queue's or its dead-letter queue's): each comes back as a new message with the same body and
    /// properties, a fresh delivery count and time to live, and leaves the dead-letter queue in the
    /// same transaction. With <paramref name="sequenceNumbers"/>, exactly those (all or none);
    /// otherwise up to <paramref name="maxMessages"/> (null: all of them), lowest first. Returns how
    /// many went back. A subscription's dead letters are refused (NotSupported) for now.
    /// </summary>
    public async Task<long> ResubmitDeadLetteredMessagesAsync(int? maxMessages = null, IReadOnlyCollection<long>? sequenceNumbers = null, CancellationToken cancellationToken = default)
    {
        if (maxMessages is { } max)
        {
            ArgumentOutOfRangeException.ThrowIfLessThan(max, 1);
        }
        ThrowIfClosed();
        if (sequenceNumbers is { Count: > 0 })
        {
            var named = new ResubmitDeadLettersRequest { Entity = EntityPath, SequenceNumbers = { sequenceNumbers } };
            return (await _connection.UnaryAsync(FarmCalls.ResubmitDeadLetters, named, EntityPath, cancellationToken).ConfigureAwait(false)).ResubmittedCount;
        }
        long total = 0;
        while (maxMessages is null || total < maxMessages)
        {
            var step = (int)Math.Min(maxMessages is { } limit ? limit - total : 10_000, 10_000);
            var request = new ResubmitDeadLettersRequest { Entity = EntityPath, MaxMessages = step };
            var response = await _connection.UnaryAsync(FarmCalls.ResubmitDeadLetters, request, EntityPath, cancellationToken).ConfigureAwait(false);
            total += response.ResubmittedCount;
            if (!response.More || response.ResubmittedCount == 0)
            {
                break;
            }
        }
        return total;
    }

    public async Task<FarmReceivedMessage> ReceiveDeferredMessageAsync(long sequenceNumber, CancellationToken cancellationToken = default)
    {
        var messages = await ReceiveDeferredMessagesAsync([sequenceNumber], cancellationToken).ConfigureAwait(false);
        return messages.Count > 0
            ? messages[0]
            : throw new FarmException($"Deferred message {sequenceNumber} was not found (MessageNotFound)", FarmFailureReason.MessageNotFound, EntityPath);
    }

    public async Task<IReadOnlyList<FarmReceivedMessage>> ReceiveDeferredMessagesAsync(IEnumerable<long> sequenceNumbers, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(sequenceNumbers);
        ThrowIfClosed();
        var request = new ReceiveDeferredRequest { Entity = EntityPath, Mode = WireMode };
        request.SequenceNumbers.AddRange(sequenceNumbers);
        var response = await _connection.UnaryAsync(FarmCalls.ReceiveDeferred, request, EntityPath, cancellationToken).ConfigureAwait(false);
        return Map(response.Messages, settleable: ReceiveMode == FarmReceiveMode.PeekLock);
    }

    public Task CompleteMessageAsync(FarmReceivedMessage message, CancellationToken cancellationToken = default)
        => SettleAsync(message, Disposition.Complete, null, null, null, cancellationToken);

    /// <summary>Releases the lock so the message is delivered again (its delivery count goes up).</summary>
    public Task AbandonMessageAsync(FarmReceivedMessage message, IDictionary<string, object?>? propertiesToModify = null, CancellationToken cancellationToken = default)
        => SettleAsync(message, Disposition.Abandon, null, null, propertiesToModify, cancellationToken);

    /// <summary>Moves the message to the entity's dead-letter queue ("entity/$DeadLetterQueue").</summary>
    public Task DeadLetterMessageAsync(FarmReceivedMessage message, string? deadLetterReason = null, string? deadLetterErrorDescription = null, IDictionary<string, object?>? propertiesToModify = null, CancellationToken cancellationToken = default)
        => SettleAsync(message, Disposition.DeadLetter, deadLetterReason, deadLetterErrorDescription, propertiesToModify, cancellationToken);

    /// <summary>Sets the message aside; fetch it again with <see cref="ReceiveDeferredMessageAsync"/> by its sequence number.</summary>
    public Task DeferMessageAsync(FarmReceivedMessage message, IDictionary<string, object?>? propertiesToModify = null, CancellationToken cancellationToken = default)
        => SettleAsync(message, Disposition.Defer, null, null, propertiesToModify, cancellationToken);

    /// <summary>Extends the message's lock by the entity's LockDuration; updates <see cref="FarmReceivedMessage.LockedUntil"/>.</summary>
    public async Task<DateTimeOffset> RenewMessageLockAsync(FarmReceivedMessage message, CancellationToken cancellationToken = default)
    {
        var outcomes = await RenewMessageLocksAsync([message], cancellationToken).ConfigureAwait(false);
        return outcomes[0] is { } failure ? throw failure : message.LockedUntil;
    }

    /// <summary>
    /// Extends the locks of <paramref name="messages"/> (all received on this entity) in one
    /// RenewLock call, updating each one's <see cref="FarmReceivedMessage.LockedUntil"/>. A lock the
    /// broker did not renew has its error at the message's position, null where renewed; a failed
    /// call throws.
    /// </summary>
    internal async Task<IReadOnlyList<Exception?>> RenewMessageLocksAsync(IReadOnlyList<FarmReceivedMessage> messages, CancellationToken cancellationToken)
    {
        var request = new RenewLockRequest { Entity = messages[0].EntityPath };
        foreach (var message in messages)
        {
            EnsureSettleable(message);
            if (!string.Equals(message.EntityPath, request.Entity, StringComparison.OrdinalIgnoreCase))
            {
                throw new ArgumentException($"The locks one call renews must be of one entity; got '{request.Entity}' and '{message.EntityPath}'.", nameof(messages));
            }
            request.LockTokens.Add(message.LockToken);
        }
        var response = await _connection.UnaryAsync(FarmCalls.RenewLock, request, EntityPath, cancellationToken).ConfigureAwait(false);
        var outcomes = new Exception?[messages.Count];
        for (var i = 0; i < messages.Count; i++)
        {
            var message = messages[i];
            // One result per token, in order; a broker that answered fewer renewed none past them.
            if (i >= response.Results.Count)
            {
                outcomes[i] = new FarmException($"The lock of message {message.SequenceNumber} was not renewed (MessageLockLost)", FarmFailureReason.MessageLockLost, EntityPath);
                continue;
            }
            var result = response.Results[i];
            if (!FarmErrors.IsSuccessCode(result.ErrorCode))
            {
                outcomes[i] = FarmErrors.FromErrorCode(result.ErrorCode, result.ErrorMessage, EntityPath);
                continue;
            }
            message.LockedUntil = result.LockedUntil.ToDateTimeOffset();
        }
        return outcomes;
    }

    public Task CloseAsync(CancellationToken cancellationToken = default) => DisposeAsync().AsTask();

    /// <summary>Closes the stream; prefetched peek-lock messages are abandoned so others get them at once.</summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _closed, 1) != 0)
        {
            return;
        }

        _onClosed?.Invoke(this);
        var left = await _link.CloseAsync().ConfigureAwait(false);
        if (ReceiveMode == FarmReceiveMode.PeekLock && left.Count > 0 && !_connection.IsDisposed)
        {
            await AbandonBufferedAsync(left).ConfigureAwait(false);
        }

        await _link.DisposeAsync().ConfigureAwait(false);
    }

    internal async Task SettleAsync(FarmReceivedMessage message, Disposition disposition, string? reason, string? description, IDictionary<string, object?>? propertiesToModify, CancellationToken cancellationToken)
    {
        EnsureSettleable(message);
        var settlement = new Settlement
        {
            LockToken = message.LockToken,
            Disposition = disposition,
            DeadLetterReason = reason ?? string.Empty,
            DeadLetterErrorDescription = description ?? string.Empty,
        };
        PropertyValues.CopyTo(propertiesToModify, settlement.PropertiesToModify);
        if (!string.Equals(message.EntityPath, EntityPath, StringComparison.OrdinalIgnoreCase))
        {
            // Not this receiver's entity: its own call, not the batch.
            var request = new SettleRequest { Entity = message.EntityPath };
            request.Settlements.Add(settlement);
            var response = await _connection.UnaryAsync(FarmCalls.Settle, request, EntityPath, cancellationToken).ConfigureAwait(false);
            ThrowIfFailed(response, EntityPath);
            return;
        }

        var result = await _settler.SettleAsync(settlement, cancellationToken).ConfigureAwait(false);
        if (!FarmErrors.IsSuccessCode(result.ErrorCode))
        {
            throw FarmErrors.FromErrorCode(result.ErrorCode, result.ErrorMessage, EntityPath);
        }
    }

    /// <summary>
    /// Takes back the credit a receive leaves unused. A drain takes back all of it, so receives
    /// still waiting on this receiver get theirs again afterwards.
    /// </summary>
    private async Task DrainLeftoverCreditAsync()
    {
        await _link.DrainAsync(DrainTimeout).ConfigureAwait(false);
        if (_link.Wanted is > 0 and var wanted)
        {
            await _link.EnsureCreditAsync(Math.Max(PrefetchCount, wanted), CancellationToken.None).ConfigureAwait(false);
        }
    }

    /// <summary>
    /// Sends a batch of settlements: over the receive stream when its broker takes them there (no
    /// call of its own), else, or when the stream broke or the broker asked for a retry, by a Settle
    /// call (retried by the connection's policy like any other call).
    /// </summary>
    private async Task<SettleResponse> SendSettlementsAsync(SettleRequest request)
    {
        try
        {
            if (await _link.TrySettleOnStreamAsync(request).ConfigureAwait(false) is { } response)
            {
                return response;
            }
        }
        catch (SettleStreamLostException)
        {
            // Unknown outcome: the call settles them, or finds them settled a moment ago (a repeat
            // is answered as done), or finds their locks gone (MessageLockLost).
            request.Repeat = true;
        }
        catch (FarmException e) when (e.IsTransient)
        {
            // The broker could not settle just now (moving, store unavailable): the call retries.
        }

        return await _connection.UnaryAsync(FarmCalls.Settle, request, EntityPath, CancellationToken.None).ConfigureAwait(false);
    }

    internal static void ThrowIfFailed(SettleResponse response, string entityPath)
    {
        foreach (var result in response.Results)
        {
            if (!FarmErrors.IsSuccessCode(result.ErrorCode))
            {
                throw FarmErrors.FromErrorCode(result.ErrorCode, result.ErrorMessage, entityPath);
            }
        }
    }

    private void EnsureSettleable(FarmReceivedMessage message)
    {
        ArgumentNullException.ThrowIfNull(message);
        ThrowIfClosed();
        if (ReceiveMode == FarmReceiveMode.ReceiveAndDelete)
        {
            throw new InvalidOperationException($"Message {message.SequenceNumber} was received in ReceiveAndDelete mode; it is already settled.");
        }

        if (!message.IsSettleable)
        {
            throw new InvalidOperationException($"Message {message.SequenceNumber} was peeked or received without a lock; only peek-lock messages can be settled or renewed.");
        }
    }

    private async Task AbandonBufferedAsync(List<ReceivedMessage> left)
    {
        var request = new SettleRequest { Entity = EntityPath };
        request.Settlements.AddRange(left.Where(m => m.LockToken.Length > 0).Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Abandon, NotDelivered = true }));
        try
        {
            using var timeout = new CancellationTokenSource(_connection.Retry.TryTimeout, _connection.TimeProvider);
            await _connection.UnaryAsync(FarmCalls.Settle, request, EntityPath, timeout.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (e is FarmException or OperationCanceledException or ObjectDisposedException)
        {
            // Best effort: if it fails, the locks expire and the broker redelivers the messages.
        }
    }

    private List<FarmReceivedMessage> Map(IEnumerable<ReceivedMessage> messages, bool settleable)
        => messages.Select(m => MessageMapper.FromProto(m, EntityPath, settleable)).ToList();

    private static TimeSpan ClampWait(TimeSpan wait)
    {
        if (wait < TimeSpan.Zero)
        {
            throw new ArgumentOutOfRangeException(nameof(wait), wait, "maxWaitTime must not be negative.");
        }

        var max = TimeSpan.FromMilliseconds(int.MaxValue);
        return wait > max ? max : wait;
    }

    private void ThrowIfClosed() => ObjectDisposedException.ThrowIf(IsClosed, this);
}
