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

        var settings = new RabbitMqSettings(
            QueueType: options.PeerQueueType,
            Producers: options.PeerProducers ?? options.Senders,
            ConfirmWindow: options.PeerWindow,
            Consumers: options.PeerConsumers ?? options.Receivers,
            Prefetch: options.PeerPrefetch,
            AckEvery: options.PeerAckEvery,
            Size: options.Size,
            Persistent: true,
            WarmupS: options.Warmup.TotalSeconds,
            ServerVersion: "?",
            Client: RabbitMqPeer.ClientName,
            Tuning: RabbitMqPeer.Tuning);
        return await new RabbitMqPeer(settings, options.PeerUri, options.Duration).RunAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Failures that end the peer's run (the broker is not there, or went away), not bugs.</summary>
    public static bool IsPeerFailure(Exception e)
        => e is BrokerUnreachableException or OperationInterruptedException or AlreadyClosedException
            or InvalidOperationException or TimeoutException or OperationCanceledException or IOException;
}
