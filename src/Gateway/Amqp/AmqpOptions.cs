namespace Farm.Gateway.Amqp;

/// <summary>The node's AMQP 1.0 listener (`--amqp-port`, FARM_AMQP_PORT).</summary>
internal sealed class AmqpOptions
{
    /// <summary>The port to listen on; 0 picks a free one (what `farm up --port 0` nodes do).</summary>
    public int Port { get; set; }

    /// <summary>Largest transfer a client may send (a message, or an Azure batch of them): Farm's batch limit.</summary>
    public ulong MaxMessageSize { get; set; } = 1024 * 1024;

    /// <summary>
    /// Largest transfer a sender link reads at all: bigger ones end the link (they could not be
    /// forwarded through the farm's gRPC front door, whose limit is 16 MB).
    /// </summary>
    public const ulong HardMaxTransferSize = 8 * 1024 * 1024;

    /// <summary>How long a connection may stay silent before the node closes it (clients send empty frames to keep it).</summary>
    public TimeSpan IdleTimeout { get; set; } = TimeSpan.FromMinutes(4);

    /// <summary>How often each connection's links are checked against the expiry of the tokens that let them open.</summary>
    public TimeSpan TokenCheckInterval { get; set; } = TimeSpan.FromSeconds(1);
}
