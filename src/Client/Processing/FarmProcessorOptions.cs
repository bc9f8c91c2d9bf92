namespace Farm.Client;

public sealed record FarmProcessorOptions
{
    public FarmReceiveMode ReceiveMode { get; init; } = FarmReceiveMode.PeekLock;

    /// <summary>Handlers running at once.</summary>
    public int MaxConcurrentCalls { get; init; } = 1;

    /// <summary>Null: 3 x <see cref="MaxConcurrentCalls"/>.</summary>
    public int? PrefetchCount { get; init; }

    /// <summary>Complete a message when its handler returns, abandon it when the handler throws.</summary>
    public bool AutoCompleteMessages { get; init; } = true;

    /// <summary>How long locks are renewed in the background while a handler runs; zero turns renewal off.</summary>
    public TimeSpan MaxAutoLockRenewalDuration { get; init; } = TimeSpan.FromMinutes(5);

    public SubQueue SubQueue { get; init; } = SubQueue.None;

    internal int EffectivePrefetchCount => PrefetchCount ?? (3 * MaxConcurrentCalls);
}

/// <summary>Where a processor error came from, like Azure's ServiceBusErrorSource.</summary>
public enum FarmErrorSource
{
    Receive,
    ProcessMessageCallback,
    Complete,
    Abandon,
    RenewLock,
}

public sealed class ProcessMessageEventArgs : EventArgs
{
    private readonly FarmReceiver _receiver;

    internal ProcessMessageEventArgs(FarmReceivedMessage message, FarmReceiver receiver, CancellationToken cancellationToken)
    {
        Message = message;
        _receiver = receiver;
        CancellationToken = cancellationToken;
    }

    public FarmReceivedMessage Message { get; }

    public string EntityPath => _receiver.EntityPath;

    /// <summary>Signalled when the processor is stopping.</summary>
    public CancellationToken CancellationToken { get; }

    /// <summary>True once the handler settled the message itself (no auto-complete then).</summary>
    internal bool IsSettled { get; private set; }

    public async Task CompleteMessageAsync(FarmReceivedMessage message, CancellationToken cancellationToken = default)
    {
        await _receiver.CompleteMessageAsync(message, cancellationToken).ConfigureAwait(false);
        MarkSettled(message);
    }

    public async Task AbandonMessageAsync(FarmReceivedMessage message, IDictionary<string, object?>? propertiesToModify = null, CancellationToken cancellationToken = default)
    {
        await _receiver.AbandonMessageAsync(message, propertiesToModify, cancellationToken).ConfigureAwait(false);
        MarkSettled(message);
    }

    public async Task DeadLetterMessageAsync(FarmReceivedMessage message, string? deadLetterReason = null, string? deadLetterErrorDescription = null, IDictionary<string, object?>? propertiesToModify = null, CancellationToken cancellationToken = default)
    {
        await _receiver.DeadLetterMessageAsync(message, deadLetterReason, deadLetterErrorDescription, propertiesToModify, cancellationToken).ConfigureAwait(false);
        MarkSettled(message);
    }

    public async Task DeferMessageAsync(FarmReceivedMessage message, IDictionary<string, object?>? propertiesToModify = null, CancellationToken cancellationToken = default)
    {
        await _receiver.DeferMessageAsync(message, propertiesToModify, cancellationToken).ConfigureAwait(false);
        MarkSettled(message);
    }

    public Task<DateTimeOffset> RenewMessageLockAsync(FarmReceivedMessage message, CancellationToken cancellationToken = default)
        => _receiver.RenewMessageLockAsync(message, cancellationToken);

    /// <summary>
    /// Forwards: sends <paramref name="message"/> with <paramref name="sender"/> and completes the
    /// message being processed in the same transaction (<see cref="FarmSender.SendMessageAndCompleteAsync"/>),
    /// so it is never forwarded twice. Its entity and the sender's must share a message container.
    /// No auto-complete follows.
    /// </summary>
    public async Task<long> SendMessageAndCompleteAsync(FarmSender sender, FarmMessage message, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(sender);
        var sequenceNumber = await sender.SendMessageAndCompleteAsync(message, Message, cancellationToken).ConfigureAwait(false);
        IsSettled = true;
        return sequenceNumber;
    }

    private void MarkSettled(FarmReceivedMessage message)
    {
        if (ReferenceEquals(message, Message))
        {
            IsSettled = true;
        }
    }
}

public sealed class ProcessErrorEventArgs : EventArgs
{
    internal ProcessErrorEventArgs(Exception exception, FarmErrorSource errorSource, string entityPath, CancellationToken cancellationToken)
    {
        Exception = exception;
        ErrorSource = errorSource;
        EntityPath = entityPath;
        CancellationToken = cancellationToken;
    }

    public Exception Exception { get; }

    public FarmErrorSource ErrorSource { get; }

    public string EntityPath { get; }

    public CancellationToken CancellationToken { get; }
}
