using Farm.Client;

namespace Farm.Perf.Load;

/// <summary>A backlog put in place before a scenario measures its drain: --size bodies in batches of --batch from --senders senders.</summary>
internal static class QueueFill
{
    /// <summary>
    /// Sends <paramref name="count"/> messages to <paramref name="queue"/>; the farm acknowledges each
    /// batch durably. <paramref name="sent"/> hears the running total after each batch (from any sender).
    /// </summary>
    public static async Task FillAsync(FarmClient client, string queue, long count, PerfOptions options, CancellationToken cancellationToken, Action<long>? sent = null)
    {
        var body = new byte[options.Size];
        Random.Shared.NextBytes(body);
        long next = 0;
        await Task.WhenAll(Enumerable.Range(0, options.Senders).Select(async _ =>
        {
            await using var sender = client.CreateSender(queue);
            while (true)
            {
                var start = Interlocked.Add(ref next, options.Batch) - options.Batch;
                if (start >= count)
                {
                    return;
                }
                var size = (int)Math.Min(options.Batch, count - start);
                await sender.SendMessagesAsync(Enumerable.Range(0, size).Select(_ => new FarmMessage(body)), cancellationToken).ConfigureAwait(false);
                sent?.Invoke(start + size);
            }
        })).ConfigureAwait(false);
    }
}
