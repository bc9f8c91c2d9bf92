using System.Diagnostics;
using Farm.Client;
using Farm.Perf.Load;

namespace Farm.Perf.ManyQueues;

/// <summary>
/// A <see cref="FarmProcessor"/> per queue (peek-lock, auto-complete, one call at a time, the SDK's
/// default prefetch), spread round-robin over <c>clients</c> FarmClients: what an application with a
/// handler per queue writes. Each processor holds one receive stream; a client multiplexes its
/// streams over HTTP/2 connections. Records every delivery in the run state.
/// </summary>
internal sealed class ProcessorSet(string connectionString, IReadOnlyList<string> queues, int clients, RunState state)
{
    private static readonly TimeSpan StopTimeout = TimeSpan.FromSeconds(60);

    private readonly List<FarmClient> _clients = [];
    private readonly List<FarmProcessor> _processors = [];
    private readonly int[] _delivered = new int[queues.Count];
    private int _queuesDelivered;
    private long _lastFirstDelivery;
    private long _redelivered;

    /// <summary>
    /// Messages that reached a handler with a DeliveryCount above 1: nothing failed in the handlers,
    /// so each is a delivery that was lost on its way (a receive stream cut with it in flight) and
    /// came back only after its lock ran out.
    /// </summary>
    public long Redelivered => Interlocked.Read(ref _redelivered);

    /// <summary>True once every queue has delivered at least one message.</summary>
    public bool AllDelivered => Volatile.Read(ref _queuesDelivered) == queues.Count;

    /// <summary>When the last queue to deliver its first message did so (Stopwatch timestamp).</summary>
    public long LastFirstDelivery => Interlocked.Read(ref _lastFirstDelivery);

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        for (var c = 0; c < clients; c++)
        {
            _clients.Add(new FarmClient(connectionString));
        }

        for (var i = 0; i < queues.Count; i++)
        {
            var index = i;
            var processor = _clients[i % clients].CreateProcessor(queues[i], new FarmProcessorOptions { MaxConcurrentCalls = 1 });
            processor.ProcessMessageAsync += args =>
            {
                state.OnReceived(args.Message);
                if (args.Message.DeliveryCount > 1)
                {
                    Interlocked.Increment(ref _redelivered);
                }
                if (Interlocked.Exchange(ref _delivered[index], 1) == 0 && Interlocked.Increment(ref _queuesDelivered) == queues.Count)
                {
                    Interlocked.Exchange(ref _lastFirstDelivery, Stopwatch.GetTimestamp());
                }

                return Task.CompletedTask;
            };
            processor.ProcessErrorAsync += args =>
            {
                if (args.ErrorSource == FarmErrorSource.Receive)
                {
                    state.OnReceiveError(args.Exception);
                }
                else
                {
                    state.OnSettleError(args.Exception);
                }

                return Task.CompletedTask;
            };
            _processors.Add(processor);
            await processor.StartProcessingAsync(cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>Stops every processor at once (each waits for its handler in flight), then closes the clients.</summary>
    public async Task StopAsync()
    {
        var stopping = Task.WhenAll(_processors.Select(StopOneAsync));
        if (await Task.WhenAny(stopping, Task.Delay(StopTimeout)).ConfigureAwait(false) != stopping)
        {
            // An overloaded node may not answer the receive streams' drains; the run's figures are taken already.
            Console.Error.WriteLine($"perf: the {_processors.Count} processors had not all stopped {StopTimeout.TotalSeconds:0} s after being asked to; left as they are (the farm is stopped next)");
            return;
        }

        foreach (var client in _clients)
        {
            await client.DisposeAsync().ConfigureAwait(false);
        }
    }

    /// <summary>
    /// Stops one processor. A processor whose worker died of an exception the SDK did not turn into a
    /// FarmException rethrows it here: counted as a receive error (the check fails), not fatal to the run.
    /// </summary>
    private async Task StopOneAsync(FarmProcessor processor)
    {
        try
        {
            await processor.StopProcessingAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            state.OnReceiveError(new InvalidOperationException($"the processor of {processor.EntityPath} had stopped on an exception: {e.GetType().Name}: {e.Message}", e));
        }
    }
}
