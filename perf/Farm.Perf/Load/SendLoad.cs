using System.Diagnostics;
using System.Globalization;
using Farm.Client;

namespace Farm.Perf.Load;

/// <summary>How the senders load the farm.</summary>
/// <param name="Senders">Senders, each with its own client.</param>
/// <param name="InFlight">Send calls in flight per sender.</param>
/// <param name="Batch">Messages per send call (one atomic batch).</param>
/// <param name="Size">Body bytes.</param>
/// <param name="RatePerSec">Messages per second over all senders; 0: as fast as the farm acknowledges.</param>
/// <param name="MaxBacklog">
/// Deliveries acknowledged but not yet received above which senders wait; 0: no limit. Keeps a
/// fan-out run from piling up messages its receivers cannot take.
/// </param>
internal sealed record SendSettings(int Senders, int InFlight, int Batch, int Size, double RatePerSec = 0, long MaxBacklog = 0);

/// <summary>
/// Senders to a queue or a topic, each with its own <see cref="FarmClient"/> (its own connection,
/// as separate applications would have) and <c>InFlight</c> batch sends in flight, optionally paced
/// to a rate. Sends stop being started when <c>stop</c> is cancelled; the ones in flight are
/// awaited, never cancelled, so every message's fate is known.
/// </summary>
/// <param name="decorate">Sets a message's application properties from its id (for subscription filters).</param>
internal sealed class SendLoad(SendSettings settings, string connectionString, string entityPath, RunState state, Action<FarmMessage, long>? decorate = null)
{
    private static readonly TimeSpan BacklogPoll = TimeSpan.FromMilliseconds(5);

    private readonly ReadOnlyMemory<byte> _body = CreateBody(settings.Size);
    private readonly Lock _pace = new();
    private long _nextSlot;

    public Task RunAsync(CancellationToken stop)
        => Task.WhenAll(Enumerable.Range(0, settings.Senders).Select(_ => Task.Run(() => RunSenderAsync(stop), CancellationToken.None)));

    private async Task RunSenderAsync(CancellationToken stop)
    {
        await using var client = new FarmClient(connectionString);
        await using var sender = client.CreateSender(entityPath);
        await Task.WhenAll(Enumerable.Range(0, settings.InFlight).Select(_ => SendLoopAsync(sender, stop))).ConfigureAwait(false);
    }

    private async Task SendLoopAsync(FarmSender sender, CancellationToken stop)
    {
        var batch = new List<FarmMessage>(settings.Batch);
        while (!stop.IsCancellationRequested)
        {
            try
            {
                await PaceAsync(stop).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                break;
            }

            batch.Clear();
            var first = state.ReserveIds(settings.Batch);
            var sentAt = Stopwatch.GetTimestamp();
            for (var i = 0; i < settings.Batch; i++)
            {
                var id = first + i;
                var message = new FarmMessage(_body) { MessageId = id.ToString(CultureInfo.InvariantCulture) };
                message.ApplicationProperties[RunState.SentAtProperty] = sentAt;
                decorate?.Invoke(message, id);
                batch.Add(message);
            }

            state.OnSending(first, settings.Batch);
            try
            {
                await sender.SendMessagesAsync(batch, CancellationToken.None).ConfigureAwait(false);
                state.OnAcked(first, settings.Batch);
            }
            catch (FarmException e)
            {
                // Not acknowledged: the batch may or may not be stored; the check at the end tells.
                state.OnSendFailed(first, settings.Batch);
                state.OnSendError(e);
                await Task.Delay(100, CancellationToken.None).ConfigureAwait(false);
            }
        }
    }

    /// <summary>Waits for this batch's slot at the configured rate, then while the backlog is over its limit.</summary>
    private async Task PaceAsync(CancellationToken stop)
    {
        if (settings.RatePerSec > 0)
        {
            var interval = (long)(Stopwatch.Frequency * settings.Batch / settings.RatePerSec);
            long slot;
            var now = Stopwatch.GetTimestamp();
            lock (_pace)
            {
                // A sender that fell behind does not catch up in a burst: slots start from now.
                slot = Math.Max(_nextSlot, now);
                _nextSlot = slot + interval;
            }

            var wait = Stopwatch.GetElapsedTime(now, slot);
            if (slot > now && wait > TimeSpan.Zero)
            {
                await Task.Delay(wait, stop).ConfigureAwait(false);
            }
        }

        while (settings.MaxBacklog > 0 && state.Backlog > settings.MaxBacklog)
        {
            await Task.Delay(BacklogPoll, stop).ConfigureAwait(false);
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
