namespace Farm.Client;

/// <summary>
/// Pumps messages from an entity to a handler, like Azure's ServiceBusProcessor: up to
/// MaxConcurrentCalls handlers at once, prefetch, auto-complete (complete on success, abandon when the
/// handler throws) and lock renewal while a handler runs. Errors go to <see cref="ProcessErrorAsync"/>.
/// </summary>
public sealed class FarmProcessor : IAsyncDisposable
{
    private readonly FarmConnection _connection;
    private readonly Action<IAsyncDisposable> _onClosed;
    private readonly FarmProcessorOptions _options;
    private readonly SemaphoreSlim _startStop = new(1, 1);
    private Func<ProcessMessageEventArgs, Task>? _processMessage;
    private Func<ProcessErrorEventArgs, Task>? _processError;
    private CancellationTokenSource? _stopping;
    private FarmReceiver? _receiver;
    private LockRenewals? _renewals;
    private Task[] _workers = [];
    private int _closed;

    internal FarmProcessor(FarmConnection connection, string entityPath, FarmProcessorOptions options, Action<IAsyncDisposable> onClosed)
    {
        ArgumentNullException.ThrowIfNull(options);
        ArgumentOutOfRangeException.ThrowIfLessThan(options.MaxConcurrentCalls, 1, nameof(options.MaxConcurrentCalls));
        ArgumentOutOfRangeException.ThrowIfNegative(options.EffectivePrefetchCount, nameof(options.PrefetchCount));
        ArgumentOutOfRangeException.ThrowIfLessThan(options.MaxAutoLockRenewalDuration, TimeSpan.Zero, nameof(options.MaxAutoLockRenewalDuration));
        _connection = connection;
        _onClosed = onClosed;
        _options = options;
        EntityPath = FarmEntityPath.Apply(entityPath, options.SubQueue);
    }

    public string EntityPath { get; }

    public FarmReceiveMode ReceiveMode => _options.ReceiveMode;

    public int MaxConcurrentCalls => _options.MaxConcurrentCalls;

    public int PrefetchCount => _options.EffectivePrefetchCount;

    public bool AutoCompleteMessages => _options.AutoCompleteMessages;

    public TimeSpan MaxAutoLockRenewalDuration => _options.MaxAutoLockRenewalDuration;

    public bool IsProcessing => Volatile.Read(ref _stopping) is { IsCancellationRequested: false };

    public bool IsClosed => Volatile.Read(ref _closed) != 0;

    /// <summary>The message handler; exactly one, set before starting.</summary>
    public event Func<ProcessMessageEventArgs, Task> ProcessMessageAsync
    {
        add => _processMessage = SetHandler(_processMessage, value);
        remove => _processMessage = RemoveHandler(_processMessage, value);
    }

    /// <summary>The error handler; exactly one, set before starting.</summary>
    public event Func<ProcessErrorEventArgs, Task> ProcessErrorAsync
    {
        add => _processError = SetHandler(_processError, value);
        remove => _processError = RemoveHandler(_processError, value);
    }

    public async Task StartProcessingAsync(CancellationToken cancellationToken = default)
    {
        ObjectDisposedException.ThrowIf(IsClosed, this);
        await _startStop.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (IsProcessing)
            {
                throw new InvalidOperationException("The processor is already running.");
            }

            if (_processMessage is null || _processError is null)
            {
                throw new InvalidOperationException("Set both ProcessMessageAsync and ProcessErrorAsync before starting the processor.");
            }

            var receiver = new FarmReceiver(_connection, EntityPath, new FarmReceiverOptions { ReceiveMode = ReceiveMode, PrefetchCount = PrefetchCount }, onClosed: null);
            var stopping = new CancellationTokenSource();
            var renewals = ReceiveMode == FarmReceiveMode.PeekLock && MaxAutoLockRenewalDuration > TimeSpan.Zero
                ? new LockRenewals(receiver.RenewMessageLocksAsync, _connection.TimeProvider, MaxAutoLockRenewalDuration, e => RaiseErrorAsync(e, FarmErrorSource.RenewLock, stopping.Token))
                : null;
            _receiver = receiver;
            _renewals = renewals;
            _workers = Enumerable.Range(0, MaxConcurrentCalls).Select(_ => Task.Run(() => WorkerAsync(receiver, renewals, stopping.Token), CancellationToken.None)).ToArray();
            Volatile.Write(ref _stopping, stopping);
        }
        finally
        {
            _startStop.Release();
        }
    }

    /// <summary>Stops receiving, signals the handlers' cancellation token and waits for the handlers in flight.</summary>
    public async Task StopProcessingAsync(CancellationToken cancellationToken = default)
    {
        await _startStop.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var stopping = _stopping;
            if (stopping is null)
            {
                return;
            }

            await stopping.CancelAsync().ConfigureAwait(false);
            await Task.WhenAll(_workers).WaitAsync(cancellationToken).ConfigureAwait(false);
            _renewals?.Dispose();
            _renewals = null;
            if (_receiver is { } receiver)
            {
                await receiver.DisposeAsync().ConfigureAwait(false);
            }

            _receiver = null;
            _workers = [];
            stopping.Dispose();
            Volatile.Write(ref _stopping, null);
        }
        finally
        {
            _startStop.Release();
        }
    }

    public Task CloseAsync(CancellationToken cancellationToken = default) => DisposeAsync().AsTask();

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _closed, 1) != 0)
        {
            return;
        }

        await StopProcessingAsync().ConfigureAwait(false);
        _onClosed(this);
        _startStop.Dispose();
    }

    private async Task WorkerAsync(FarmReceiver receiver, LockRenewals? renewals, CancellationToken stopping)
    {
        // With a prefetch, the worker waits on its own reusable waiter, woken one worker per message
        // buffered, and then takes the message without waiting: a waiting receive holds a timer,
        // token sources and tasks while the queue is quiet, which with thousands of processors in
        // a process is what the GC promotes, and a chain handler's workers made them per message.
        using var waiter = PrefetchCount > 0 ? new LinkWaiter() : null;
        while (!stopping.IsCancellationRequested)
        {
            FarmReceivedMessage? message;
            try
            {
                if (waiter is not null)
                {
                    await receiver.WaitForMessageAsync(waiter, stopping).ConfigureAwait(false);
                    if (stopping.IsCancellationRequested)
                    {
                        return;
                    }
                    if (!receiver.HasBufferedMessage && !receiver.IsClosed)
                    {
                        // Another worker took the message this one was woken for.
                        continue;
                    }
                }
                message = await receiver.ReceiveMessageAsync(cancellationToken: stopping).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (stopping.IsCancellationRequested)
            {
                return;
            }
            catch (Exception e)
            {
                // Whatever receiving threw (a FarmException, or a transport error the SDK did not
                // translate) goes to the error handler, and this worker keeps receiving: a worker
                // that ended here would leave the processor silently short of one call.
                await RaiseErrorAsync(e, FarmErrorSource.Receive, stopping).ConfigureAwait(false);
                if (!await DelayAsync(TimeSpan.FromSeconds(1), stopping).ConfigureAwait(false))
                {
                    return;
                }

                continue;
            }

            if (message is not null)
            {
                await ProcessOneAsync(receiver, renewals, message, stopping).ConfigureAwait(false);
            }
        }
    }

    private async Task ProcessOneAsync(FarmReceiver receiver, LockRenewals? renewals, FarmReceivedMessage message, CancellationToken stopping)
    {
        var peekLock = ReceiveMode == FarmReceiveMode.PeekLock;
        var held = renewals?.Track(message);
        var args = new ProcessMessageEventArgs(message, receiver, stopping);
        using var activity = FarmTelemetry.StartProcess(receiver.EntityPath, message);
        var started = FarmTelemetry.ProcessTimestamp();
        Exception? failure = null;
        // Lock renewal stops before the processor settles the message: a renewal that woke as the
        // handler returned would otherwise reach the broker after the complete and fail with
        // MessageLockLost (a handler that ran a whole number of renewal intervals hit it).
        ValueTask StopRenewingAsync() => held is null ? ValueTask.CompletedTask : renewals!.StopAsync(held);
        try
        {
            await _processMessage!(args).ConfigureAwait(false);
            await StopRenewingAsync().ConfigureAwait(false);
            if (peekLock && AutoCompleteMessages && !args.IsSettled)
            {
                await SettleQuietlyAsync(() => receiver.CompleteMessageAsync(message, CancellationToken.None), FarmErrorSource.Complete, stopping).ConfigureAwait(false);
            }
        }
        catch (Exception e)
        {
            failure = e;
            FarmTelemetry.Failed(activity, e);
            // Handler failures belong to the application: report them and let the message go back.
            await RaiseErrorAsync(e, FarmErrorSource.ProcessMessageCallback, stopping).ConfigureAwait(false);
            await StopRenewingAsync().ConfigureAwait(false);
            if (peekLock && AutoCompleteMessages && !args.IsSettled)
            {
                await SettleQuietlyAsync(() => receiver.AbandonMessageAsync(message, null, CancellationToken.None), FarmErrorSource.Abandon, stopping).ConfigureAwait(false);
            }
        }
        finally
        {
            FarmTelemetry.RecordProcessed(receiver.EntityPath, started, failure);
            await StopRenewingAsync().ConfigureAwait(false);
        }
    }

    private async Task SettleQuietlyAsync(Func<Task> settle, FarmErrorSource source, CancellationToken stopping)
    {
        try
        {
            await settle().ConfigureAwait(false);
        }
        catch (Exception e) when (e is FarmException or ObjectDisposedException or InvalidOperationException)
        {
            await RaiseErrorAsync(e, source, stopping).ConfigureAwait(false);
        }
    }

    private async Task RaiseErrorAsync(Exception exception, FarmErrorSource source, CancellationToken stopping)
    {
        try
        {
            await _processError!(new ProcessErrorEventArgs(exception, source, EntityPath, stopping)).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // An error handler that throws must not stop the pump; there is nobody left to tell.
        }
    }

    /// <summary>
    /// Waits <paramref name="delay"/> (a worker's pause after a failed receive); false when the
    /// processor stopped first. Cancelling does not throw.
    /// </summary>
    private async Task<bool> DelayAsync(TimeSpan delay, CancellationToken cancellationToken)
    {
        await Task.Delay(delay, _connection.TimeProvider, cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        return !cancellationToken.IsCancellationRequested;
    }

    private T SetHandler<T>(T? current, T value)
        where T : Delegate
    {
        ArgumentNullException.ThrowIfNull(value);
        if (IsProcessing)
        {
            throw new InvalidOperationException("Handlers cannot change while the processor is running.");
        }

        return current is null ? value : throw new NotSupportedException("A handler is already set; remove it first.");
    }

    private T? RemoveHandler<T>(T? current, T value)
        where T : Delegate
    {
        if (IsProcessing)
        {
            throw new InvalidOperationException("Handlers cannot change while the processor is running.");
        }

        return Equals(current, value) ? null : current;
    }
}
