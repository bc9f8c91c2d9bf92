using System.Diagnostics;
using System.Globalization;
using Farm.Client;

namespace Farm.Perf.Failover;

/// <summary>
/// Light continuous traffic on one queue: a sender with its own <see cref="FarmClient"/> starts one
/// single-message send every <c>interval</c> (without waiting for the previous one, up to
/// <see cref="MaxSendsInFlight"/>), and a peek-lock receiver with its own client completes what
/// arrives. <see cref="Mark"/> then <see cref="FirstSuccessAfterMark"/> tell when the queue first
/// accepted a send that was started at or after a moment (a kill): its unavailability.
/// </summary>
internal sealed class QueueTraffic(string name, long containerId, string connectionString, TimeSpan interval, FailoverLedger ledger)
{
    /// <summary>
    /// Sends held by a gateway or backing off in the SDK pile up during a failover; past this many
    /// the sender skips ticks (counted) rather than queue without end.
    /// </summary>
    public const int MaxSendsInFlight = 500;

    private const int Prefetch = 100;
    private const int CompletesInFlight = 64;
    private static readonly TimeSpan ReceiveWait = TimeSpan.FromMilliseconds(500);

    private readonly ReadOnlyMemory<byte> _body = new byte[1024];
    private readonly Lock _gate = new();
    private long _mark;
    private long _firstSuccessStart;
    private long _firstSuccessEnd;
    private long _sendFailures;
    private long _skippedTicks;
    private long _deliveries;
    private long _lastDelivery = Stopwatch.GetTimestamp();
    private readonly List<Task> _receivers = [];
    private CancellationTokenSource _receiverStop = new();
    private int _receiverRestarts;

    public string Name { get; } = name;

    public long ContainerId { get; } = containerId;

    /// <summary>Sends on this queue that failed after the SDK's retries.</summary>
    public long SendFailures => Interlocked.Read(ref _sendFailures);

    /// <summary>Ticks with <see cref="MaxSendsInFlight"/> sends already in flight, when no send was started.</summary>
    public long SkippedTicks => Interlocked.Read(ref _skippedTicks);

    /// <summary>From now on, look for the first send started at or after <paramref name="timestamp"/> that succeeds.</summary>
    public void Mark(long timestamp)
    {
        lock (_gate)
        {
            _mark = timestamp;
            _firstSuccessStart = 0;
            _firstSuccessEnd = 0;
        }
    }

    /// <summary>
    /// Since the mark: when the first send started after it was acknowledged, and when that send had
    /// been started; null while none has been.
    /// </summary>
    public (TimeSpan Acknowledged, TimeSpan Started)? FirstSuccessAfterMark()
    {
        lock (_gate)
        {
            return _firstSuccessEnd == 0
                ? null
                : (Stopwatch.GetElapsedTime(_mark, _firstSuccessEnd), Stopwatch.GetElapsedTime(_mark, _firstSuccessStart));
        }
    }

    public Task SendAsync(CancellationToken stop) => Task.Run(() => SendLoopAsync(stop), CancellationToken.None);

    /// <summary>Messages delivered on this queue (counting redeliveries).</summary>
    public long Deliveries => Interlocked.Read(ref _deliveries);

    /// <summary>How long ago the receiver last handed out a message.</summary>
    public TimeSpan SinceLastDelivery => Stopwatch.GetElapsedTime(Interlocked.Read(ref _lastDelivery));

    /// <summary>Receivers replaced because the one before had stopped delivering.</summary>
    public int ReceiverRestarts => Volatile.Read(ref _receiverRestarts);

    /// <summary>Starts the receiver (a FarmReceiver on its own FarmClient).</summary>
    public void StartReceiving()
    {
        lock (_receivers)
        {
            var stop = _receiverStop.Token;
            _receivers.Add(Task.Run(() => ReceiveLoopAsync(stop), CancellationToken.None));
        }
    }

    /// <summary>
    /// Closes the receiver and its client and starts a fresh one, as an application would after its
    /// receiver stopped delivering: the messages it held come again once their locks lapse.
    /// </summary>
    public void RestartReceiver()
    {
        CancellationTokenSource old;
        lock (_receivers)
        {
            old = _receiverStop;
            _receiverStop = new CancellationTokenSource();
            Interlocked.Increment(ref _receiverRestarts);
            Interlocked.Exchange(ref _lastDelivery, Stopwatch.GetTimestamp());
        }

        old.Cancel();
        StartReceiving();
    }

    /// <summary>Stops every receiver; returns once each has closed (completes in flight are awaited).</summary>
    public async Task StopReceivingAsync()
    {
        Task[] receivers;
        lock (_receivers)
        {
            _receiverStop.Cancel();
            receivers = [.. _receivers];
        }

        await Task.WhenAll(receivers).ConfigureAwait(false);
    }

    private async Task SendLoopAsync(CancellationToken stop)
    {
        await using var client = new FarmClient(connectionString);
        await using var sender = client.CreateSender(Name);
        using var slots = new SemaphoreSlim(MaxSendsInFlight, MaxSendsInFlight);
        using var timer = new PeriodicTimer(interval);
        try
        {
            while (await timer.WaitForNextTickAsync(stop).ConfigureAwait(false))
            {
                if (!slots.Wait(0, CancellationToken.None))
                {
                    Interlocked.Increment(ref _skippedTicks);
                    continue;
                }

                _ = SendOneAsync(sender, slots);
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // Stopping: the sends in flight are awaited below, never abandoned, so every id's fate is known.
        }

        for (var i = 0; i < MaxSendsInFlight; i++)
        {
            await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        }
    }

    private async Task SendOneAsync(FarmSender sender, SemaphoreSlim slots)
    {
        try
        {
            var id = ledger.NextId();
            var message = new FarmMessage(_body) { MessageId = id.ToString(CultureInfo.InvariantCulture) };
            var started = Stopwatch.GetTimestamp();
            try
            {
                await sender.SendMessageAsync(message, CancellationToken.None).ConfigureAwait(false);
            }
            catch (FarmException e)
            {
                Interlocked.Increment(ref _sendFailures);
                ledger.OnSendFailed(Name, e);
                return;
            }

            var acknowledged = Stopwatch.GetTimestamp();
            ledger.Acked.Add(id);
            lock (_gate)
            {
                if (started >= _mark && (_firstSuccessEnd == 0 || acknowledged < _firstSuccessEnd))
                {
                    _firstSuccessStart = started;
                    _firstSuccessEnd = acknowledged;
                }
            }
        }
        finally
        {
            slots.Release();
        }
    }

    private async Task ReceiveLoopAsync(CancellationToken stop)
    {
        await using var client = new FarmClient(connectionString);
        await using var receiver = client.CreateReceiver(Name, new FarmReceiverOptions { PrefetchCount = Prefetch });
        using var slots = new SemaphoreSlim(CompletesInFlight, CompletesInFlight);
        while (!stop.IsCancellationRequested)
        {
            IReadOnlyList<FarmReceivedMessage> messages;
            try
            {
                messages = await receiver.ReceiveMessagesAsync(Prefetch, ReceiveWait, stop).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                break;
            }
            catch (FarmException e)
            {
                ledger.OnReceiveError(Name, e);
                await Task.Delay(100, CancellationToken.None).ConfigureAwait(false);
                continue;
            }

            if (messages.Count > 0)
            {
                Interlocked.Add(ref _deliveries, messages.Count);
                Interlocked.Exchange(ref _lastDelivery, Stopwatch.GetTimestamp());
            }

            foreach (var message in messages)
            {
                ledger.OnReceived(message);
                // Not cancellable: a message handed out is always completed (or its lock lapses).
                await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
                _ = CompleteAsync(receiver, message, slots);
            }
        }

        for (var i = 0; i < CompletesInFlight; i++)
        {
            await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        }
    }

    private async Task CompleteAsync(FarmReceiver receiver, FarmReceivedMessage message, SemaphoreSlim slots)
    {
        try
        {
            await receiver.CompleteMessageAsync(message, CancellationToken.None).ConfigureAwait(false);
            ledger.OnCompleted(message);
        }
        catch (Exception e) when (e is FarmException or InvalidOperationException)
        {
            // A lock dropped by a failover: the message comes again, which the ledger counts.
            ledger.OnCompleteError(Name, e);
        }
        finally
        {
            slots.Release();
        }
    }
}
