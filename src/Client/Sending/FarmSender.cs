using Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Sends messages to a queue, like Azure's ServiceBusSender. Thread-safe.</summary>
public sealed class FarmSender : IAsyncDisposable
{
    private readonly FarmConnection _connection;
    private readonly Action<IAsyncDisposable> _onClosed;
    private int _closed;

    internal FarmSender(FarmConnection connection, string entityPath, Action<IAsyncDisposable> onClosed)
    {
        _connection = connection;
        EntityPath = entityPath;
        _onClosed = onClosed;
    }

    public string EntityPath { get; }

    public bool IsClosed => Volatile.Read(ref _closed) != 0;

    /// <summary>Sends one message; returns its sequence number (0 when duplicate detection dropped it).</summary>
    public async Task<long> SendMessageAsync(FarmMessage message, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(message);
        var numbers = await SendAsync([ToProtoChecked(message)], cancellationToken).ConfigureAwait(false);
        return numbers[0];
    }

    /// <summary>Sends the messages as one atomic batch: all are stored or none. Returns their sequence numbers in order.</summary>
    public Task<IReadOnlyList<long>> SendMessagesAsync(IEnumerable<FarmMessage> messages, CancellationToken cancellationToken = default)
    {
        var protos = ToCheckedBatch(messages);
        return protos.Count == 0 ? Task.FromResult<IReadOnlyList<long>>([]) : SendAsync(protos, cancellationToken);
    }

    /// <summary>
    /// Sends the message and completes <paramref name="completing"/> in one transaction (Azure
    /// Service Bus's "send via"): the message is stored and the received one completed, or neither
    /// happens. A handler that forwards what it received this way never forwards it twice, whatever
    /// crashes between. <paramref name="completing"/> must be peek-locked and come from an entity in
    /// the same message container as this sender's. Fails with
    /// <see cref="FarmFailureReason.MessageLockLost"/> (nothing sent) when its lock is gone, and with
    /// <see cref="FarmFailureReason.NotSupported"/> (nothing sent, the lock still held) when the two
    /// entities are in different containers. Returns the sent message's sequence number.
    /// </summary>
    public async Task<long> SendMessageAndCompleteAsync(FarmMessage message, FarmReceivedMessage completing, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(message);
        ArgumentNullException.ThrowIfNull(completing);
        var numbers = await SendAsync([ToProtoChecked(message)], ToCompletes([completing]), cancellationToken).ConfigureAwait(false);
        return numbers[0];
    }

    /// <summary>
    /// Sends the messages as one atomic batch and completes the received messages in the same
    /// transaction, as <see cref="SendMessageAndCompleteAsync"/> does; the received messages must all
    /// come from one entity.
    /// </summary>
    public Task<IReadOnlyList<long>> SendMessagesAndCompleteAsync(IEnumerable<FarmMessage> messages, IEnumerable<FarmReceivedMessage> completing, CancellationToken cancellationToken = default)
    {
        var protos = ToCheckedBatch(messages);
        if (protos.Count == 0)
        {
            throw new ArgumentException("A send that completes messages needs at least one message to send.", nameof(messages));
        }
        return SendAsync(protos, ToCompletes(completing), cancellationToken);
    }

    /// <summary>The messages as they go on the wire, refused here when the batch is over the limits.</summary>
    private List<Message> ToCheckedBatch(IEnumerable<FarmMessage> messages)
    {
        ArgumentNullException.ThrowIfNull(messages);
        var protos = messages.Select(ToProtoChecked).ToList();
        var size = protos.Sum(p => (long)MessageMapper.EncodedSizeInRequest(p));
        if (size > FarmMessageLimits.MaxBatchSizeInBytes || protos.Count > FarmMessageLimits.MaxMessagesPerBatch)
        {
            throw new FarmException(
                $"The batch of {protos.Count} messages is {size} bytes; the limit is {FarmMessageLimits.MaxBatchSizeInBytes} bytes and {FarmMessageLimits.MaxMessagesPerBatch} messages (MessageSizeExceeded)",
                FarmFailureReason.MessageSizeExceeded,
                EntityPath);
        }
        return protos;
    }

    /// <summary>The received messages a send completes: peek-locked ones, all of one entity.</summary>
    private static SendCompletes ToCompletes(IEnumerable<FarmReceivedMessage> completing)
    {
        ArgumentNullException.ThrowIfNull(completing);
        SendCompletes? completes = null;
        foreach (var received in completing)
        {
            ArgumentNullException.ThrowIfNull(received, nameof(completing));
            if (!received.IsSettleable)
            {
                throw new InvalidOperationException(
                    $"Message {received.SequenceNumber} was peeked or received without a lock (ReceiveAndDelete); only a peek-locked message can be completed with a send.");
            }
            completes ??= new SendCompletes { Entity = received.EntityPath };
            if (!string.Equals(completes.Entity, received.EntityPath, StringComparison.OrdinalIgnoreCase))
            {
                throw new ArgumentException(
                    $"The messages a send completes must come from one entity; got '{completes.Entity}' and '{received.EntityPath}'.", nameof(completing));
            }
            completes.LockTokens.Add(received.LockToken);
        }
        return completes ?? throw new ArgumentException("A send that completes messages needs at least one received message.", nameof(completing));
    }

    /// <summary>Sends a batch built with <see cref="CreateMessageBatchAsync"/>, atomically.</summary>
    public Task<IReadOnlyList<long>> SendMessagesAsync(FarmMessageBatch batch, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(batch);
        return batch.Count == 0 ? Task.FromResult<IReadOnlyList<long>>([]) : SendAsync(batch.Messages, cancellationToken);
    }

    public ValueTask<FarmMessageBatch> CreateMessageBatchAsync(CancellationToken cancellationToken = default)
        => CreateMessageBatchAsync(new CreateMessageBatchOptions(), cancellationToken);

    public ValueTask<FarmMessageBatch> CreateMessageBatchAsync(CreateMessageBatchOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        ThrowIfClosed();
        var max = options.MaxSizeInBytes ?? FarmMessageLimits.MaxBatchSizeInBytes;
        if (max <= 0 || max > FarmMessageLimits.MaxBatchSizeInBytes)
        {
            throw new ArgumentOutOfRangeException(nameof(options), max, $"MaxSizeInBytes must be between 1 and {FarmMessageLimits.MaxBatchSizeInBytes}.");
        }

        return ValueTask.FromResult(new FarmMessageBatch(max));
    }

    /// <summary>Sends the message to become visible at <paramref name="scheduledEnqueueTime"/>; returns its sequence number for cancelling.</summary>
    public async Task<long> ScheduleMessageAsync(FarmMessage message, DateTimeOffset scheduledEnqueueTime, CancellationToken cancellationToken = default)
    {
        var numbers = await ScheduleMessagesAsync([message], scheduledEnqueueTime, cancellationToken).ConfigureAwait(false);
        return numbers[0];
    }

    public Task<IReadOnlyList<long>> ScheduleMessagesAsync(IEnumerable<FarmMessage> messages, DateTimeOffset scheduledEnqueueTime, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(messages);
        var protos = messages.Select(m =>
        {
            var proto = ToProtoChecked(m);
            proto.ScheduledEnqueueTime = Google.Protobuf.WellKnownTypes.Timestamp.FromDateTimeOffset(scheduledEnqueueTime);
            return proto;
        }).ToList();
        return SendAsync(protos, cancellationToken);
    }

    public Task CancelScheduledMessageAsync(long sequenceNumber, CancellationToken cancellationToken = default)
        => CancelScheduledMessagesAsync([sequenceNumber], cancellationToken);

    public async Task CancelScheduledMessagesAsync(IEnumerable<long> sequenceNumbers, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(sequenceNumbers);
        ThrowIfClosed();
        var request = new CancelScheduledRequest { Entity = EntityPath };
        request.SequenceNumbers.AddRange(sequenceNumbers);
        await _connection.UnaryAsync(FarmCalls.CancelScheduled, request, EntityPath, cancellationToken).ConfigureAwait(false);
    }

    public Task CloseAsync(CancellationToken cancellationToken = default) => DisposeAsync().AsTask();

    public ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _closed, 1) == 0)
        {
            _onClosed(this);
        }

        return ValueTask.CompletedTask;
    }

    private Message ToProtoChecked(FarmMessage message)
    {
        ArgumentNullException.ThrowIfNull(message);
        var proto = MessageMapper.ToProto(message);
        var size = proto.CalculateSize();
        if (size > FarmMessageLimits.MaxMessageSizeInBytes)
        {
            throw new FarmException(
                $"Message '{message.MessageId}' is {size} bytes; the limit is {FarmMessageLimits.MaxMessageSizeInBytes} bytes (MessageSizeExceeded)",
                FarmFailureReason.MessageSizeExceeded,
                EntityPath);
        }

        return proto;
    }

    private Task<IReadOnlyList<long>> SendAsync(IReadOnlyList<Message> messages, CancellationToken cancellationToken) =>
        SendAsync(messages, null, cancellationToken);

    private async Task<IReadOnlyList<long>> SendAsync(IReadOnlyList<Message> messages, SendCompletes? completes, CancellationToken cancellationToken)
    {
        ThrowIfClosed();
        // One pair for all the tries the retry policy makes of this send: a repeat of a send that
        // completed messages is answered from its first try, completions included.
        var request = new SendRequest { Entity = EntityPath, ProducerId = _connection.ProducerId, SendId = _connection.NextSendId(), Completes = completes };
        request.Messages.AddRange(messages);

        using var activity = FarmTelemetry.StartOperation("send", EntityPath, System.Diagnostics.ActivityKind.Producer);
        FarmTelemetry.Inject(activity, request.Messages);
        var started = FarmTelemetry.Timestamp();
        try
        {
            var response = await _connection.UnaryAsync(FarmCalls.Send, request, EntityPath, cancellationToken).ConfigureAwait(false);
            FarmTelemetry.RecordSent(EntityPath, messages.Count, started);
            if (completes is not null && !response.Completed)
            {
                // A broker that predates sends that complete: it stored the messages and left the
                // received ones locked, so they are completed after, not with, the send.
                await CompleteAfterAsync(completes, cancellationToken).ConfigureAwait(false);
            }
            return [.. response.SequenceNumbers];
        }
        catch (Exception e)
        {
            FarmTelemetry.Failed(activity, e);
            throw;
        }
    }

    private async Task CompleteAfterAsync(SendCompletes completes, CancellationToken cancellationToken)
    {
        var request = new SettleRequest { Entity = completes.Entity };
        request.Settlements.AddRange(completes.LockTokens.Select(token => new Settlement { LockToken = token, Disposition = Disposition.Complete }));
        var response = await _connection.UnaryAsync(FarmCalls.Settle, request, completes.Entity, cancellationToken).ConfigureAwait(false);
        FarmReceiver.ThrowIfFailed(response, completes.Entity);
    }

    private void ThrowIfClosed() => ObjectDisposedException.ThrowIf(IsClosed, this);
}
