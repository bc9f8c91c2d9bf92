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
        ArgumentNullException.ThrowIfNull(messages);
        var protos = messages.Select(ToProtoChecked).ToList();
        if (protos.Count == 0)
        {
            return Task.FromResult<IReadOnlyList<long>>([]);
        }

        var size = protos.Sum(p => (long)MessageMapper.EncodedSizeInRequest(p));
        if (size > FarmMessageLimits.MaxBatchSizeInBytes || protos.Count > FarmMessageLimits.MaxMessagesPerBatch)
        {
            throw new FarmException(
                $"The batch of {protos.Count} messages is {size} bytes; the limit is {FarmMessageLimits.MaxBatchSizeInBytes} bytes and {FarmMessageLimits.MaxMessagesPerBatch} messages (MessageSizeExceeded)",
                FarmFailureReason.MessageSizeExceeded,
                EntityPath);
        }

        return SendAsync(protos, cancellationToken);
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

    private async Task<IReadOnlyList<long>> SendAsync(IReadOnlyList<Message> messages, CancellationToken cancellationToken)
    {
        ThrowIfClosed();
        // One pair for all the tries the retry policy makes of this send.
        var request = new SendRequest { Entity = EntityPath, ProducerId = _connection.ProducerId, SendId = _connection.NextSendId() };
        request.Messages.AddRange(messages);

        using var activity = FarmTelemetry.StartOperation("send", EntityPath, System.Diagnostics.ActivityKind.Producer);
        FarmTelemetry.Inject(activity, request.Messages);
        var started = FarmTelemetry.Timestamp();
        try
        {
            var response = await _connection.UnaryAsync(FarmCalls.Send, request, EntityPath, cancellationToken).ConfigureAwait(false);
            FarmTelemetry.RecordSent(EntityPath, messages.Count, started);
            return [.. response.SequenceNumbers];
        }
        catch (Exception e)
        {
            FarmTelemetry.Failed(activity, e);
            throw;
        }
    }

    private void ThrowIfClosed() => ObjectDisposedException.ThrowIf(IsClosed, this);
}
