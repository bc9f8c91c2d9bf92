using System.Collections.Concurrent;
using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A peek-lock receiver (on a queue or a subscription) that completes everything it gets and
/// remembers what it saw, through failovers: a receive or complete that fails is tried again.
/// </summary>
internal sealed class CompletingReceiverLoad
{
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _loop;
    private readonly ConcurrentDictionary<string, bool> _completed = new();
    private long _deliveries;

    public CompletingReceiverLoad(Func<FarmReceiver> createReceiver)
    {
        _loop = Task.Run(async () =>
        {
            await using var receiver = createReceiver();
            while (!_stop.IsCancellationRequested)
            {
                IReadOnlyList<FarmReceivedMessage> batch;
                try
                {
                    batch = await receiver.ReceiveMessagesAsync(50, TimeSpan.FromSeconds(1), _stop.Token);
                }
                catch (Exception e) when (e is FarmException or OperationCanceledException)
                {
                    continue;
                }
                foreach (var message in batch)
                {
                    Interlocked.Increment(ref _deliveries);
                    if (_completed.ContainsKey(message.MessageId!))
                    {
                        DeliveredAfterCompletion.Add(message.MessageId!);
                    }
                    Received[message.MessageId!] = true;
                    try
                    {
                        await receiver.CompleteMessageAsync(message);
                        _completed[message.MessageId!] = true;
                    }
                    catch (FarmException)
                    {
                        // Lock lost in the failover: it comes back, which is allowed.
                    }
                }
            }
        });
    }

    public long Deliveries => Interlocked.Read(ref _deliveries);

    public ConcurrentDictionary<string, bool> Received { get; } = new();

    /// <summary>Message ids delivered again after their completion was acknowledged.</summary>
    public ConcurrentBag<string> DeliveredAfterCompletion { get; } = [];

    public async Task StopAsync()
    {
        await _stop.CancelAsync();
        await _loop;
    }
}
