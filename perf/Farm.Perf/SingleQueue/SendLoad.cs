using System.Globalization;
using Farm.Client;

namespace Farm.Perf.SingleQueue;

/// <summary>
/// Senders, each with its own <see cref="FarmClient"/> (its own connection, as separate
/// applications would have) and <c>--inflight</c> batch sends in flight. Sends stop being started
/// when <c>stop</c> is cancelled; the ones in flight are awaited, never cancelled, so every
/// message's fate is known.
/// </summary>
internal sealed class SendLoad(PerfOptions options, string connectionString, string queue, RunState state)
{
    private readonly ReadOnlyMemory<byte> _body = CreateBody(options.Size);

    public Task RunAsync(CancellationToken stop)
        => Task.WhenAll(Enumerable.Range(0, options.Senders).Select(_ => Task.Run(() => RunSenderAsync(stop), CancellationToken.None)));

    private async Task RunSenderAsync(CancellationToken stop)
    {
        await using var client = new FarmClient(connectionString);
        await using var sender = client.CreateSender(queue);
        await Task.WhenAll(Enumerable.Range(0, options.InFlight).Select(_ => SendLoopAsync(sender, stop))).ConfigureAwait(false);
    }

    private async Task SendLoopAsync(FarmSender sender, CancellationToken stop)
    {
        var batch = new List<FarmMessage>(options.Batch);
        while (!stop.IsCancellationRequested)
        {
            batch.Clear();
            var first = state.ReserveIds(options.Batch);
            var sentAt = System.Diagnostics.Stopwatch.GetTimestamp();
            for (var i = 0; i < options.Batch; i++)
            {
                var message = new FarmMessage(_body) { MessageId = (first + i).ToString(CultureInfo.InvariantCulture) };
                message.ApplicationProperties[RunState.SentAtProperty] = sentAt;
                batch.Add(message);
            }

            try
            {
                await sender.SendMessagesAsync(batch, CancellationToken.None).ConfigureAwait(false);
                state.OnAcked(first, options.Batch);
            }
            catch (FarmException e)
            {
                // Not acknowledged: the batch may or may not be stored; the check at the end tells.
                state.OnSendError(e);
                await Task.Delay(100, CancellationToken.None).ConfigureAwait(false);
            }
        }
    }

    private static ReadOnlyMemory<byte> CreateBody(int size)
    {
        // Random bytes: nothing on the way can take a shortcut on a compressible body.
        var body = new byte[size];
        new Random(42).NextBytes(body);
        return body;
    }
}
