using Farm.Client;

namespace Farm.Perf.Load;

/// <summary>How receivers take messages.</summary>
/// <param name="Style">A FarmReceiver loop or a FarmProcessor.</param>
/// <param name="Prefetch">Receiver prefetch (credit kept on the stream).</param>
/// <param name="Concurrency">Completes in flight per receiver, or the processor's MaxConcurrentCalls.</param>
/// <param name="MaxBatch">Most messages one ReceiveMessagesAsync call takes (receiver style).</param>
/// <param name="CompleteWithSdk">False: one raw Settle call per received batch (<see cref="BatchSettler"/>).</param>
/// <param name="Mode">ReceiveAndDelete: messages are deleted as they are handed out, nothing is completed.</param>
/// <param name="CompleteOneByOne">Each message completed with its own awaited CompleteMessageAsync before the next (no coalescing).</param>
internal sealed record ReceiveSettings(ReceiveStyle Style, int Prefetch, int Concurrency, int MaxBatch, bool CompleteWithSdk = true,
    FarmReceiveMode Mode = FarmReceiveMode.PeekLock, bool CompleteOneByOne = false);

/// <summary>One receiver: the entity path it receives from and which subscription that is (0 for a queue).</summary>
internal sealed record ReceiverPlan(string EntityPath, int Subscription = 0);

/// <summary>
/// Peek-lock receivers spread over <c>clients</c> <see cref="FarmClient"/>s (receiver <c>i</c> on
/// client <c>i % clients</c>; as many clients as receivers gives each its own connection). Each is
/// either a <see cref="FarmReceiver"/> loop (prefetch, take up to <c>MaxBatch</c> messages at a time,
/// keep up to <c>Concurrency</c> completes in flight; the SDK coalesces concurrent completes into
/// one Settle call) or a <see cref="FarmProcessor"/> (MaxConcurrentCalls = <c>Concurrency</c>,
/// auto-complete). Runs until <c>stop</c> is cancelled, then waits for every complete it started.
/// </summary>
internal sealed class ReceiveLoad(ReceiveSettings settings, string connectionString, IReadOnlyList<ReceiverPlan> receivers, int clients, RunState state)
{
    private static readonly TimeSpan ReceiveWait = TimeSpan.FromMilliseconds(500);

    /// <summary>Receivers on one entity, each with its own client (the single-queue shape).</summary>
    public static ReceiveLoad OnePath(ReceiveSettings settings, string connectionString, string entityPath, int receivers, RunState state)
        => new(settings, connectionString, [.. Enumerable.Repeat(new ReceiverPlan(entityPath), receivers)], receivers, state);

    public async Task RunAsync(CancellationToken stop)
    {
        var farmClients = Enumerable.Range(0, Math.Clamp(clients, 1, receivers.Count)).Select(_ => new FarmClient(connectionString)).ToArray();
        try
        {
            await Task.WhenAll(receivers.Select((plan, i) => Task.Run(
                () => settings.Style == ReceiveStyle.Processor
                    ? RunProcessorAsync(farmClients[i % farmClients.Length], plan, stop)
                    : RunReceiverAsync(farmClients[i % farmClients.Length], plan, stop),
                CancellationToken.None))).ConfigureAwait(false);
        }
        finally
        {
            foreach (var client in farmClients)
            {
                await client.DisposeAsync().ConfigureAwait(false);
            }
        }
    }

    private async Task RunReceiverAsync(FarmClient client, ReceiverPlan plan, CancellationToken stop)
    {
        await using var receiver = client.CreateReceiver(plan.EntityPath, new FarmReceiverOptions { PrefetchCount = settings.Prefetch, ReceiveMode = settings.Mode });
        using var slots = new SemaphoreSlim(settings.Concurrency, settings.Concurrency);
        using var batchSettler = settings.CompleteWithSdk ? null : new BatchSettler(connectionString, plan.EntityPath);
        while (!stop.IsCancellationRequested)
        {
            IReadOnlyList<FarmReceivedMessage> messages;
            try
            {
                messages = await receiver.ReceiveMessagesAsync(settings.MaxBatch, ReceiveWait, stop).ConfigureAwait(false);
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

            if (settings.Mode == FarmReceiveMode.ReceiveAndDelete || settings.CompleteOneByOne)
            {
                await TakeAsync(receiver, messages, plan.Subscription).ConfigureAwait(false);
                continue;
            }

            if (batchSettler is not null)
            {
                foreach (var message in messages)
                {
                    state.OnReceived(message, plan.Subscription);
                }

                await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
                _ = CompleteBatchAsync(batchSettler, messages, slots);
                continue;
            }

            foreach (var message in messages)
            {
                state.OnReceived(message, plan.Subscription);
                // Not cancellable: a message handed out is always completed.
                await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
                _ = CompleteAsync(receiver, message, slots);
            }
        }

        for (var i = 0; i < settings.Concurrency; i++)
        {
            await slots.WaitAsync(CancellationToken.None).ConfigureAwait(false);
        }
    }

    /// <summary>Receive-and-delete: nothing to settle. One by one: each complete awaited before the next, one Settle call each.</summary>
    private async Task TakeAsync(FarmReceiver receiver, IReadOnlyList<FarmReceivedMessage> messages, int subscription)
    {
        foreach (var message in messages)
        {
            state.OnReceived(message, subscription);
            if (settings.Mode == FarmReceiveMode.ReceiveAndDelete)
            {
                continue;
            }

            try
            {
                await receiver.CompleteMessageAsync(message, CancellationToken.None).ConfigureAwait(false);
            }
            catch (Exception e) when (e is FarmException or InvalidOperationException)
            {
                state.OnSettleError(e);
            }
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

    private async Task RunProcessorAsync(FarmClient client, ReceiverPlan plan, CancellationToken stop)
    {
        await using var processor = client.CreateProcessor(plan.EntityPath, new FarmProcessorOptions
        {
            MaxConcurrentCalls = settings.Concurrency,
            PrefetchCount = settings.Prefetch,
            ReceiveMode = settings.Mode,
            // Handlers take microseconds; renewal timers would only add work.
            MaxAutoLockRenewalDuration = TimeSpan.Zero,
        });
        processor.ProcessMessageAsync += args =>
        {
            state.OnReceived(args.Message, plan.Subscription);
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
