using System.Threading.Channels;
using Farm.Contracts.V1;
using Farm.Gateway.Amqp.Messages;
using Grpc.Core;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Framing;

namespace Farm.Gateway.Amqp.Links;

/// <summary>
/// A client's sender link to a queue or topic: each transfer (one message, or an Azure batch of
/// many) becomes a farm Send, and is accepted only once the farm acknowledged it durable, or
/// rejected with the condition the SDKs map to an error code. Transfers are sent in the order they
/// came, and what has queued up meanwhile goes in one Send of many (each transfer still settled
/// on its own), so a client with many sends in flight shares commits.
/// </summary>
internal sealed partial class IncomingMessageLink
{
    /// <summary>Transfers a client may have in flight on one link before it waits for credit.</summary>
    public const uint Credit = 500;

    /// <summary>
    /// Most transfers one Send carries, and about the most bytes: half of Farm's 1 MB batch limit,
    /// so what is coalesced stays under it (one transfer may still be up to the link's 1 MB).
    /// </summary>
    private const int MaxTransfersPerSend = 200;
    private const int MaxBytesPerSend = 512 * 1024;

    private readonly ReceivingAmqpLink _link;
    private readonly string _entity;
    private readonly FarmCalls _calls;
    private readonly ILogger _logger;
    private readonly Channel<AmqpMessage> _transfers = Channel.CreateUnbounded<AmqpMessage>(new UnboundedChannelOptions { SingleReader = true });
    private readonly CancellationTokenSource _closed = new();

    public IncomingMessageLink(ReceivingAmqpLink link, string entity, FarmCalls calls, ILogger logger)
    {
        _link = link;
        _entity = entity;
        _calls = calls;
        _logger = logger;
        link.Closed += (_, _) =>
        {
            _transfers.Writer.TryComplete();
            _closed.Cancel();
        };
        link.RegisterMessageListener(message => _transfers.Writer.TryWrite(message));
        LinkCredit.GrantOnOpen(link, Credit);
        // The attach told the client Farm's batch limit (the SDKs size their batches by it). Past
        // that the library would detach the link mid-transfer, which an SDK waits out as a timeout;
        // up to the hard limit a transfer arrives whole and is refused on its own with
        // message-size-exceeded, naming the limit.
        link.Opened += (_, _) => link.Settings.MaxMessageSize = AmqpOptions.HardMaxTransferSize;
        _ = Task.Run(PumpAsync);
    }

    private async Task PumpAsync()
    {
        var pending = new List<(AmqpMessage Transfer, List<Contracts.V1.Message>? Messages, Exception? Error)>();
        try
        {
            while (await _transfers.Reader.WaitToReadAsync(_closed.Token).ConfigureAwait(false))
            {
                pending.Clear();
                var bytes = 0L;
                while (pending.Count < MaxTransfersPerSend && bytes < MaxBytesPerSend && _transfers.Reader.TryRead(out var transfer))
                {
                    try
                    {
                        var messages = AmqpMessageMapping.ToFarmMessages(transfer);
                        pending.Add((transfer, messages, null));
                        bytes += messages.Sum(m => (long)m.CalculateSize());
                    }
                    catch (Exception e)
                    {
                        // A transfer Farm cannot read is refused on its own; the others still go.
                        pending.Add((transfer, null, e));
                    }
                }
                await SendAsync(pending).ConfigureAwait(false);
            }
        }
        catch (OperationCanceledException) when (_closed.IsCancellationRequested)
        {
            // The link closed: a transfer not yet settled was never acknowledged, and the client knows it.
        }
        catch (Exception e)
        {
            LogPumpFailed(_logger, _entity, e);
            _link.SafeClose(e);
        }
    }

    private async Task SendAsync(List<(AmqpMessage Transfer, List<Contracts.V1.Message>? Messages, Exception? Error)> pending)
    {
        var good = pending.Where(p => p.Error is null).ToList();
        foreach (var (transfer, _, error) in pending.Where(p => p.Error is not null))
        {
            Settle(transfer, error);
        }
        if (good.Count == 0)
        {
            return;
        }
        var request = _calls.NewSend(_entity);
        foreach (var (_, messages, _) in good)
        {
            request.Messages.AddRange(messages);
        }
        try
        {
            await _calls.Node.Messaging.SendAsync(request, deadline: FarmCalls.Deadline(), cancellationToken: _closed.Token).ConfigureAwait(false);
            foreach (var (transfer, _, _) in good)
            {
                Settle(transfer, null);
            }
        }
        catch (Exception e) when (good.Count > 1 && !AmqpErrors.IsTransient(e) && !_closed.IsCancellationRequested)
        {
            // One transfer may have spoiled the shared Send (too big, a bad property): send each on
            // its own so only that one is refused. Nothing was stored: a Send is all or none.
            foreach (var (transfer, messages, _) in good)
            {
                var single = _calls.NewSend(_entity);
                single.Messages.AddRange(messages);
                try
                {
                    await _calls.Node.Messaging.SendAsync(single, deadline: FarmCalls.Deadline(), cancellationToken: _closed.Token).ConfigureAwait(false);
                    Settle(transfer, null);
                }
                catch (Exception each) when (!_closed.IsCancellationRequested)
                {
                    Settle(transfer, each);
                }
            }
        }
        catch (Exception e) when (!_closed.IsCancellationRequested)
        {
            foreach (var (transfer, _, _) in good)
            {
                Settle(transfer, e);
            }
        }
    }

    private void Settle(AmqpMessage transfer, Exception? error)
    {
        try
        {
            if (error is null)
            {
                _link.DisposeMessage(transfer, AmqpConstants.AcceptedOutcome, settled: true, batchable: false);
            }
            else
            {
                LogSendRefused(_logger, _entity, error is RpcException rpc ? rpc.Status.Detail : error.Message);
                _link.DisposeMessage(transfer, new Rejected { Error = AmqpErrors.ToError(error) }, settled: true, batchable: false);
            }
        }
        catch (Exception e) when (e is InvalidOperationException or ObjectDisposedException or AmqpException)
        {
            // The link closed under us: the client sees the transfer unsettled and sends again.
        }
        finally
        {
            transfer.Dispose();
        }
    }

    [LoggerMessage(Level = LogLevel.Debug, Message = "AMQP send to {Entity} refused: {Reason}")]
    private static partial void LogSendRefused(ILogger logger, string entity, string reason);

    [LoggerMessage(Level = LogLevel.Warning, Message = "AMQP sender link to {Entity} failed")]
    private static partial void LogPumpFailed(ILogger logger, string entity, Exception exception);
}
