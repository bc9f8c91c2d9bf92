namespace Farm.Broker.Node;

/// <summary>Who this node is and where its farm lives.</summary>
public sealed class NodeOptions
{
    public long NodeId { get; set; } = 1;

    /// <summary>The farm's data directory (SQLite farm database and container databases).</summary>
    public string DataDirectory { get; set; } = ".farm";

    /// <summary>"sqlite" (default).</summary>
    public string Store { get; set; } = "sqlite";

    /// <summary>The farm database; empty means DataDirectory/farm.db for SQLite.</summary>
    public string? FarmConnectionString { get; set; }

    /// <summary>How long a container lease lasts without renewal (database clock).</summary>
    public TimeSpan LeaseDuration { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>How often the node heartbeats and renews its leases.</summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromSeconds(2);
}
