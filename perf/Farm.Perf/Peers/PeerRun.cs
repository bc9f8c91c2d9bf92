using RabbitMQ.Client.Exceptions;

namespace Farm.Perf.Peers;

/// <summary>Runs the peer single-queue was asked for (--peer) with the options Farm ran under.</summary>
internal static class PeerRun
{
    public static async Task<PeerFigures> RunAsync(PerfOptions options, CancellationToken cancellationToken)
    {
        if (options.Peer == PeerKind.Sqlite)
        {
            Console.Error.WriteLine($"perf: storage peer {SqlitePeer.Name}, batches of {options.PeerBatch}, lag {options.PeerLag} rows, {options.Duration.TotalSeconds:0.#} s");
            return SqlitePeer.Run(options.PeerBatch, options.Size, options.PeerLag, SqlitePeer.Warmup, options.Duration);
        }

        // "The best RabbitMQ configuration": as many producers and consumers as Farm had, and the
        // counts RabbitMQ did best with in its own tuning sweep; the faster of the two is the peer.
        var shapes = options.PeerProducers is not null || options.PeerConsumers is not null
            ? [(options.PeerProducers ?? options.Senders, options.PeerConsumers ?? options.Receivers)]
            : new[] { (options.Senders, options.Receivers), RabbitMqPeer.SweptBestShape }.Distinct().ToArray();
        var runs = new List<PeerFigures>();
        foreach (var (producers, consumers) in shapes)
        {
            var settings = new RabbitMqSettings(
                QueueType: options.PeerQueueType,
                Producers: producers,
                ConfirmWindow: options.PeerWindow,
                Consumers: consumers,
                Prefetch: options.PeerPrefetch,
                AckEvery: options.PeerAckEvery,
                Size: options.Size,
                Persistent: true,
                WarmupS: options.Warmup.TotalSeconds,
                ServerVersion: "?",
                Client: RabbitMqPeer.ClientName,
                Tuning: RabbitMqPeer.Tuning);
            runs.Add(await new RabbitMqPeer(settings, options.PeerUri, options.Duration).RunAsync(cancellationToken).ConfigureAwait(false));
        }

        return Best(runs);
    }

    /// <summary>
    /// The fastest run, with every run's figures beside it; a run whose check failed is reported
    /// instead, so the run fails and no figure of it counts.
    /// </summary>
    internal static PeerFigures Best(IReadOnlyList<PeerFigures> runs)
    {
        var best = runs.FirstOrDefault(r => r.Verification is { Passed: false })
            ?? runs.OrderByDescending(r => r.MsgsPerSec).First();
        if (runs.Count == 1)
        {
            return best;
        }

        var tried = runs.Select(r => r.Settings is RabbitMqSettings s
            ? new PeerTry(s.Producers, s.Consumers, r.MsgsPerSec, r.P99Ms)
            : new PeerTry(0, 0, r.MsgsPerSec, r.P99Ms));
        return best with { Tried = [.. tried] };
    }

    /// <summary>Failures that end the peer's run (the broker is not there, or went away), not bugs.</summary>
    public static bool IsPeerFailure(Exception e)
        => e is BrokerUnreachableException or OperationInterruptedException or AlreadyClosedException
            or InvalidOperationException or TimeoutException or OperationCanceledException or IOException;
}
