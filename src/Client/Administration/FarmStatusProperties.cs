namespace Farm.Client;

/// <summary>A message container: a database holding some entities, owned by one broker at a time.</summary>
public sealed record ContainerProperties
{
    public long Id { get; init; }

    /// <summary>The owning node's id; null when no broker owns it (e.g. during failover).</summary>
    public long? OwnerNode { get; init; }

    /// <summary>Raised on every change of owner; fences writes by former owners.</summary>
    public long Epoch { get; init; }

    public long EntityCount { get; init; }

    public DateTimeOffset? OwnedSince { get; init; }

    /// <summary>The store kind (e.g. "sqlite").</summary>
    public string Store { get; init; } = string.Empty;

    /// <summary>The named database server its database is on; null: the farm database's own server.</summary>
    public string? Server { get; init; }
}

/// <summary>A database server containers may be placed on (PostgreSQL farms).</summary>
public sealed record DatabaseServerProperties
{
    public string Name { get; init; } = string.Empty;

    /// <summary>Its connection string, password masked.</summary>
    public string ConnectionString { get; init; } = string.Empty;

    public long ContainerCount { get; init; }
}

/// <summary>A broker node of the farm.</summary>
public sealed record FarmNodeProperties
{
    public long Id { get; init; }

    public string State { get; init; } = string.Empty;

    public string Address { get; init; } = string.Empty;

    /// <summary>Time since the node's last heartbeat.</summary>
    public TimeSpan HeartbeatAge { get; init; }

    public int ProcessId { get; init; }

    /// <summary>Where the node serves its Prometheus metrics (http://host:port/metrics); null when it does not say.</summary>
    public string? MetricsUrl { get; init; }

    /// <summary>Where the node listens for AMQP 1.0 (amqp://host:port); null when it does not.</summary>
    public string? AmqpAddress { get; init; }
}

/// <summary>The whole farm at a glance (farm status).</summary>
public sealed record FarmStatusProperties
{
    public IReadOnlyList<FarmNodeProperties> Nodes { get; init; } = [];

    public IReadOnlyList<ContainerProperties> Containers { get; init; } = [];

    public long EntityCount { get; init; }

    public string Version { get; init; } = string.Empty;
}
