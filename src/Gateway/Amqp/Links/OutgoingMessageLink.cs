using System.Threading.Channels;
using Farm.Contracts.V1;
using Farm.Gateway.Amqp.Messages;
using Grpc.Core;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Encoding;
using Microsoft.Azure.Amqp.Framing;
using Microsoft.Azure.Amqp.Transaction;

namespace Farm.Gateway.Amqp.Links;

/// <summary>
/// A client's receiver link on a queue, subscription or dead-letter queue, bridged to a farm
/// receive stream: the link credit the client grants goes up the stream as credit (a drain as a
/// drain), the messages the farm hands out go down the link with their lock token as delivery tag,
/// and the client's dispositions become settlements (accepted: complete; released or modified:
/// abandon, or defer when undeliverable here; rejected: dead-letter). When the stream breaks (the
/// owner died, the container moved) the link stays and the stream is opened again, served by the
/// new owner: locks of the old one are gone and their messages come again, as at-least-once says.
/// </summary>
internal sealed partial class OutgoingMessageLink
{
    private static readonly AmqpSymbol DeadLetterCondition = "com.microsoft:dead-letter";
    private static readonly TimeSpan ReopenDelay = TimeSpan.FromMilliseconds(250);

    /// <summary>Most dispositions settled in one farm call, and most such calls at once per link.</summary>
    private const int MaxSettlementsPerCall = 500;
    private const int MaxSettleCallsInFlight = 4;

    /// <summary>Most credit one stream holds, whatever the client grants.</summary>
    private const uint MaxStreamCredit = 5000;

    private readonly SendingAmqpLink _link;
    private readonly string _entity;
    private readonly bool _peekLock;
    private readonly FarmCalls _calls;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly Channel<(uint Added, bool Drain)> _credit = Channel.CreateUnbounded<(uint, bool)>(new UnboundedChannelOptions { SingleReader = true });
    private readonly Channel<(ArraySegment<byte> Tag, Outcome? Outcome)> _settlements =
        Channel.CreateUnbounded<(ArraySegment<byte>, Outcome?)>(new UnboundedChannelOptions { SingleReader = true });
    private readonly CancellationTokenSource _closed = new();

    public OutgoingMessageLink(SendingAmqpLink link, string entity, FarmCalls calls, TimeProvider time, ILogger logger)
    {
        _link = link;
        _entity = entity;
        _peekLock = link.Settings.SettleType != SettleMode.SettleOnSend;
        _calls = calls;
        _time = time;
        _logger = logger;
        link.Closed += (_, _) =>
        {
            _credit.Writer.TryComplete();
            _settlements.Writer.TryComplete();
            _closed.Cancel();
        };
        link.RegisterCreditListener((credit, drain, _) => _credit.Writer.TryWrite((credit, drain)));
        link.RegisterDispositionListener(OnDisposition);
        _ = Task.Run(RunAsync);
        _ = Task.Run(SettleAsync);
    }

    public ReceiveMode Mode => _peekLock ? ReceiveMode.PeekLock : ReceiveMode.ReceiveAndDelete;

    private async Task RunAsync()
    {
        try
        {
            while (!_closed.IsCancellationRequested)
            {
                // A stream opens only once the client wants messages: the farm's stream starts with credit.
                var drainPending = false;
                while (_credit.Reader.TryRead(out var queued))
                {
                    drainPending |= queued.Drain;
                }
                if (_link.LinkCredit == 0 || drainPending)
                {
                    if (!await _credit.Reader.WaitToReadAsync(_closed.Token).ConfigureAwait(false))
                    {
                        return;
                    }
                    continue;
                }
                var failure = await StreamAsync((int)Math.Min(_link.LinkCredit, MaxStreamCredit)).ConfigureAwait(false);
                if (_closed.IsCancellationRequested)
                {
                    return;
                }
                if (failure is not null && !AmqpErrors.IsTransient(failure))
                {
                    // The entity is gone, or the request is one the farm refuses: the link ends, saying why.
                    LogLinkFailed(_logger, _entity, failure.Message);
                    _link.SafeClose(AmqpErrors.ToException(failure));
                    return;
                }
                LogStreamReopening(_logger, _entity, failure?.Message ?? "ended");
                await Task.Delay(ReopenDelay, _time, _closed.Token).ConfigureAwait(false);
            }
        }
        catch (Exception) when (_closed.IsCancellationRequested)
        {
            // The client closed the link (or the connection went): nothing to say.
        }
        catch (Exception e)
        {
            LogLinkFailed(_logger, _entity, e.Message);
            _link.SafeClose(AmqpErrors.ToException(e));
        }
    }

    /// <summary>One farm receive stream, until it ends or the link closes; what ended it (null: it just ended).</summary>
    private async Task<Exception?> StreamAsync(int credit)
    {
        using var streamEnded = CancellationTokenSource.CreateLinkedTokenSource(_closed.Token);
        using var call = _calls.Node.Messaging.Receive(cancellationToken: streamEnded.Token);
        try
        {
            await call.RequestStream.WriteAsync(new ReceiveRequest { Open = new ReceiveOpen { Entity = _entity, Mode = Mode, Credit = credit } }).ConfigureAwait(false);
            var creditUp = ForwardCreditAsync(call.RequestStream, streamEnded.Token);
            try
            {
                await foreach (var response in call.ResponseStream.ReadAllAsync(streamEnded.Token).ConfigureAwait(false))
                {
                    foreach (var message in response.Messages)
                    {
                        await DeliverAsync(message).ConfigureAwait(false);
                    }
                }
                return null;
            }
            finally
            {
                await streamEnded.CancelAsync().ConfigureAwait(false);
                await creditUp.ConfigureAwait(false);
            }
        }
        catch (Exception e) when (!_closed.IsCancellationRequested)
        {
            return e;
        }
    }

    private async Task ForwardCreditAsync(IClientStreamWriter<ReceiveRequest> requests, CancellationToken cancellationToken)
    {
        try
        {
            while (await _credit.Reader.WaitToReadAsync(cancellationToken).ConfigureAwait(false))
            {
                while (_credit.Reader.TryRead(out var flow))
                {
                    if (flow.Added > 0)
                    {
                        await requests.WriteAsync(new ReceiveRequest { Credit = (int)Math.Min(flow.Added, MaxStreamCredit) }, cancellationToken).ConfigureAwait(false);
                    }
                    if (flow.Drain)
                    {
                        await requests.WriteAsync(new ReceiveRequest { Drain = new ReceiveDrain() }, cancellationToken).ConfigureAwait(false);
                    }
                }
            }
        }
        catch (Exception e) when (e is OperationCanceledException or RpcException or InvalidOperationException)
        {
            // The stream ended; the reader says why.
        }
    }

    private async Task DeliverAsync(ReceivedMessage message)
    {
        if (_peekLock && _link.LinkCredit == 0)
        {
            // Taken after the client drained its credit: back to the queue, not counted as a delivery.
            await AbandonUndeliveredAsync(message.LockToken).ConfigureAwait(false);
            return;
        }
        var amqp = AmqpMessageMapping.FromFarm(message);
        var tag = _peekLock ? AmqpMessageMapping.DeliveryTagOf(message.LockToken) : new ArraySegment<byte>(Guid.NewGuid().ToByteArray());
        try
        {
            _link.SendMessageNoWait(amqp, tag, AmqpConstants.NullBinary);
        }
        catch (Exception e) when (e is InvalidOperationException or ObjectDisposedException or AmqpException)
        {
            amqp.Dispose();
            if (_peekLock)
            {
                await AbandonUndeliveredAsync(message.LockToken).ConfigureAwait(false);
            }
        }
    }

    private async Task AbandonUndeliveredAsync(string lockToken)
    {
        try
        {
            var settle = new SettleRequest { Entity = _entity, Settlements = { new Settlement { LockToken = lockToken, Disposition = Contracts.V1.Disposition.Abandon, NotDelivered = true } } };
            await _calls.Node.Messaging.SettleAsync(settle, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        }
        catch (Exception e)
        {
            // Its lock expires and it comes again anyway.
            LogReleaseFailed(_logger, _entity, e.Message);
        }
    }

    private void OnDisposition(Delivery delivery)
    {
        if (!_peekLock || delivery.State is null || delivery.State.DescriptorCode == Received.Code)
        {
            return;
        }
        var tag = new ArraySegment<byte>(delivery.DeliveryTag.ToArray());
        var outcome = delivery.State is TransactionalState transactional ? transactional.Outcome : delivery.State as Outcome;
        _settlements.Writer.TryWrite((tag, outcome));
    }

    /// <summary>
    /// Settles what the client disposed, many dispositions per farm call: those that arrived while
    /// the last call ran go together, each answered on its own.
    /// </summary>
    private async Task SettleAsync()
    {
        using var inFlight = new SemaphoreSlim(MaxSettleCallsInFlight);
        try
        {
            while (await _settlements.Reader.WaitToReadAsync(_closed.Token).ConfigureAwait(false))
            {
                await inFlight.WaitAsync(_closed.Token).ConfigureAwait(false);
                var batch = new List<(ArraySegment<byte> Tag, Settlement Settlement)>();
                while (batch.Count < MaxSettlementsPerCall && _settlements.Reader.TryRead(out var disposed))
                {
                    try
                    {
                        batch.Add((disposed.Tag, SettlementOf(AmqpMessageMapping.LockTokenOf(disposed.Tag), disposed.Outcome)));
                    }
                    catch (Exception e)
                    {
                        // A property Farm cannot keep: this one is refused, the others go on.
                        Answer(disposed.Tag, new Rejected { Error = AmqpErrors.ToError(e) });
                    }
                }
                // Several calls at once: each waits for a commit, and a client with many messages
                // in hand should not wait for the one before.
                _ = SettleBatchAsync(batch).ContinueWith(_ => inFlight.Release(), TaskScheduler.Default);
            }
        }
        catch (Exception) when (_closed.IsCancellationRequested)
        {
            // The link closed: the client sees its dispositions unanswered and settles again elsewhere.
        }
    }

    private async Task SettleBatchAsync(List<(ArraySegment<byte> Tag, Settlement Settlement)> batch)
    {
        if (batch.Count == 0)
        {
            return;
        }
        SettleResponse response;
        try
        {
            var request = new SettleRequest { Entity = _entity };
            request.Settlements.AddRange(batch.Select(b => b.Settlement));
            response = await _calls.Node.Messaging.SettleAsync(request, deadline: FarmCalls.Deadline(), cancellationToken: _closed.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (!_closed.IsCancellationRequested)
        {
            var failed = new Rejected { Error = AmqpErrors.ToError(e) };
            foreach (var (tag, _) in batch)
            {
                Answer(tag, failed);
            }
            return;
        }
        var results = response.Results.ToDictionary(r => r.LockToken, StringComparer.OrdinalIgnoreCase);
        foreach (var (tag, settlement) in batch)
        {
            // Done: the client's own outcome back, without an error (a Rejected carrying one is how
            // the SDKs learn that a settlement failed, so a dead-letter is answered with a bare Rejected).
            Outcome answer = !results.TryGetValue(settlement.LockToken, out var result) || result.ErrorCode == FarmErrorCode.Unspecified
                ? OutcomeOf(settlement.Disposition)
                : new Rejected { Error = new Error { Condition = AmqpErrors.ConditionOf(result.ErrorCode), Description = result.ErrorMessage } };
            Answer(tag, answer);
        }
    }

    private static Outcome OutcomeOf(Contracts.V1.Disposition disposition) => disposition switch
    {
        Contracts.V1.Disposition.Complete => AmqpConstants.AcceptedOutcome,
        Contracts.V1.Disposition.DeadLetter => new Rejected(),
        Contracts.V1.Disposition.Defer => new Modified { UndeliverableHere = true },
        _ => new Modified(),
    };

    private void Answer(ArraySegment<byte> tag, Outcome answer)
    {
        try
        {
            // Not batchable: a batched disposition waits for the session's next flush, and the
            // client's complete waits for it (a processor with 32 calls in flight did 2.5k msg/s so, 4.4k now).
            _link.DisposeDelivery(tag, settled: true, answer, batchable: false);
        }
        catch (Exception e) when (e is InvalidOperationException or ObjectDisposedException or AmqpException)
        {
            // The link closed meanwhile; the settlement itself was done (or not) in the farm.
        }
    }

    /// <summary>The settlement an AMQP outcome asks for, as Azure Service Bus reads them.</summary>
    internal static Settlement SettlementOf(string lockToken, Outcome? outcome)
    {
        var settlement = new Settlement { LockToken = lockToken };
        switch (outcome)
        {
            case null or Accepted:
                settlement.Disposition = Contracts.V1.Disposition.Complete;
                break;
            case Released:
                settlement.Disposition = Contracts.V1.Disposition.Abandon;
                break;
            case Modified modified:
                settlement.Disposition = modified.UndeliverableHere == true ? Contracts.V1.Disposition.Defer : Contracts.V1.Disposition.Abandon;
                AmqpMessageMapping.CopyProperties(modified.MessageAnnotations, settlement.PropertiesToModify);
                break;
            case Rejected rejected:
                settlement.Disposition = Contracts.V1.Disposition.DeadLetter;
                // The info map's keys are strings from the JavaScript SDK and symbols from the .NET one.
                foreach (var pair in (IEnumerable<KeyValuePair<MapKey, object>>?)rejected.Error?.Info ?? [])
                {
                    var name = pair.Key.Key?.ToString() ?? string.Empty;
                    switch (name)
                    {
                        case AmqpMessageMapping.DeadLetterReasonProperty:
                            settlement.DeadLetterReason = pair.Value?.ToString() ?? string.Empty;
                            break;
                        case AmqpMessageMapping.DeadLetterErrorDescriptionProperty:
                            settlement.DeadLetterErrorDescription = pair.Value?.ToString() ?? string.Empty;
                            break;
                        default:
                            if (pair.Value is not null)
                            {
                                settlement.PropertiesToModify[name] = AmqpMessageMapping.ToPropertyValue(name, pair.Value);
                            }
                            break;
                    }
                }
                if (rejected.Error?.Condition.Value is { } condition && !condition.Equals(DeadLetterCondition.Value, StringComparison.Ordinal) && settlement.DeadLetterReason.Length == 0)
                {
                    settlement.DeadLetterReason = condition;
                }
                break;
            default:
                settlement.Disposition = Contracts.V1.Disposition.Abandon;
                break;
        }
        return settlement;
    }

    [LoggerMessage(Level = LogLevel.Debug, Message = "AMQP receive stream on {Entity} {Why}; opening it again")]
    private static partial void LogStreamReopening(ILogger logger, string entity, string why);

    [LoggerMessage(Level = LogLevel.Information, Message = "AMQP receiver link on {Entity} ends: {Why}")]
    private static partial void LogLinkFailed(ILogger logger, string entity, string why);

    [LoggerMessage(Level = LogLevel.Debug, Message = "AMQP receiver link on {Entity}: could not give back a message taken after a drain: {Why}")]
    private static partial void LogReleaseFailed(ILogger logger, string entity, string why);
}
