using Farm.Client;

namespace Farm.Perf.SingleQueue;

/// <summary>
/// Receivers in peek-lock mode, each with its own <see cref="FarmClient"/>. Either a
/// <see cref="FarmReceiver"/> loop (prefetch, take up to <c>--concurrency</c> messages at a time,
/// keep up to <c>--concurrency</c> completes in flight) or a <see cref="FarmProcessor"/>
/// (MaxConcurrentCalls = <c>--concurrency</c>, auto-complete). Runs until <c>stop</c> is cancelled,
/// then waits for every complete it started.
/// </summary>
internal sealed class ReceiveLoad(PerfOptions options, string connectionString, string queue, RunState state)
{
    private static readonly TimeSpan ReceiveWait = TimeSpan.FromMilliseconds(500);

    public Task RunAsync(CancellationToken stop)
        => Task.WhenAll(Enumerable.Range(0, options.Receivers).Select(_ => Task.Run(
            () => options.ReceiveStyle == ReceiveStyle.Processor ? RunProcessorAsync(stop) : RunReceiverAsync(stop),
            CancellationToken.None)));

    private async Task RunReceiverAsync(CancellationToken stop)
    {
        await using var client = new FarmClient(connectionString);
        await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = options.Prefetch });
        using var slots = new SemaphoreSlim(options.Concurrency, options.Concurrency);
        using var batchSettler = options.CompleteWithSdk ? null : new BatchSettler(connectionString, queue);
        while (!stop.IsCancellationRequested)
        {
            IReadOnlyList<FarmReceivedMessage> messages;
            try
            {
                messages = await receiver.ReceiveMessagesAsync(options.Concurrency, ReceiveWait, stop).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                break;
            }
            catch (FarmException e)
            {
                state.OnReceiveError(e);
                continue;
            }

            if (batchSettler is not null)
            {
                foreach (var message in messages)
                {
                    state.OnReceived(message);
                }

                await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
                _ = CompleteBatchAsync(batchSettler, messages, slots);
                continue;
            }

            foreach (var message in messages)
            {
                state.OnReceived(message);
                // Not cancellable: a message handed out is always completed.
                await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
                _ = CompleteAsync(receiver, message, slots);
            }
        }

        for (var i = 0; i < options.Concurrency; i++)
        {
            await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        }
    }

    private async Task CompleteAsync(FarmReceiver receiver, FarmReceivedMessage message, SemaphoreSlim slots)
    {
        try
        {
            await receiver.CompleteMessageAsync(message, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception e) when (e is FarmException or InvalidOperationException)
        {
            state.OnSettleError(e);
        }
        finally
        {
            slots.Release();
        }
    }

    private async Task CompleteBatchAsync(BatchSettler settler, IReadOnlyList<FarmReceivedMessage> messages, SemaphoreSlim slots)
    {
        try
        {
            await settler.CompleteAsync(messages).ConfigureAwait(false);
        }
        catch (InvalidOperationException e)
        {
            state.OnSettleError(e);
        }
        finally
        {
            slots.Release();
        }
    }

    private async Task RunProcessorAsync(CancellationToken stop)
    {
        await using var client = new FarmClient(connectionString);
        await using var processor = client.CreateProcessor(queue, new FarmProcessorOptions
        {
            MaxConcurrentCalls = options.Concurrency,
            PrefetchCount = options.Prefetch,
            // Handlers take microseconds; renewal timers would only add work.
            MaxAutoLockRenewalDuration = TimeSpan.Zero,
        });
        processor.ProcessMessageAsync += args =>
        {
            state.OnReceived(args.Message);
            return Task.CompletedTask;
        };
        processor.ProcessErrorAsync += args =>
        {
            if (args.ErrorSource is FarmErrorSource.Complete or FarmErrorSource.Abandon)
            {
                state.OnSettleError(args.Exception);
            }
            else
            {
                state.OnReceiveError(args.Exception);
            }

            return Task.CompletedTask;
        };

        await processor.StartProcessingAsync(CancellationToken.None).ConfigureAwait(false);
        try
        {
            await Task.Delay(Timeout.Infinite, stop).ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
            // Stopping: StopProcessingAsync waits for the handlers and completes in flight.
        }

        await processor.StopProcessingAsync(CancellationToken.None).ConfigureAwait(false);
    }
}
