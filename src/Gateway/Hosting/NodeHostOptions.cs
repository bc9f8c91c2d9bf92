using System.Globalization;
using Farm.Broker;
using Farm.Broker.Node;
using Farm.Gateway.Dashboard;
using Farm.Gateway.Routing;

namespace Farm.Gateway.Hosting;

/// <summary>
/// The node host's command line: <c>--node-id N --data DIR --port P [--host 127.0.0.1]
/// [--store sqlite|postgres] [--farm-connection CS] [--forward-timeout SECONDS]
/// [--metrics-port P] [--amqp-port P] [--message-cache-size-per-entity MB] [--message-cache-size-per-node MB]
/// [--commit-delay-us MICROSECONDS] [--shed-sends-after-ms MS] [--crash-probe-ms MS] [--farm-cli PATH] [--dashboard-remote-control true] [--advertise-host NAME] [--drain-on-stop true]
/// [--expected-nodes N]</c>.
/// The `farm` CLI starts nodes this way; each option may instead come from FARM_NAME in the
/// environment (FARM_NODE_ID, FARM_FARM_CONNECTION, ...), which is how a container image sets them.
/// </summary>
internal sealed record NodeHostOptions(NodeOptions Node, string Host, int Port, int MetricsPort, ForwardingOptions Forwarding, BrokerOptions Broker, DashboardOptions Dashboard)
{
    public const string Sqlite = "sqlite";

    /// <summary>What --help prints (the README's node options table says the same).</summary>
    public const string Usage = """
        Farm node: the gateway and the broker in one process (`farm up` starts these for you).
        usage: dotnet Farm.Gateway.dll [options]   (each option may instead be FARM_NAME in the environment, e.g. FARM_NODE_ID)
          --node-id N                    unique in the farm (default 1)
          --data DIR                     SQLite files and logs (default ./.farm)
          --host ADDR, --port P          where gRPC listens (default 127.0.0.1:5480; 0 picks a free port)
          --metrics-port P               HTTP/1.1: /metrics, the dashboard at /, /healthz (default 0: a free port)
          --amqp-port P                  the AMQP 1.0 front door (default 0: a free port)
          --advertise-host NAME          the name other nodes and clients reach this node by
          --store sqlite|postgres        where the farm lives (default sqlite)
          --farm-connection CS           the farm database's Npgsql connection string (--store postgres)
          --expected-nodes N             wait up to 5 s for N nodes before taking containers, unless
                                         a live node already serves some (default 1)
          --forward-timeout SECONDS      how long a forwarded call may take (default 3)
          --drain-on-stop true           SIGTERM hands every container to the other nodes first
          --crash-probe-ms MS            how often the crash watch looks for a dead peer (default 100; 0: off)
          --shed-sends-after-ms MS       refuse new sends while work waits this long (default 1000; 0: never)
          --commit-delay-us US           a small commit waits this long for more writes (default 0)
          --message-cache-size-per-entity MB, --message-cache-size-per-node MB
          --dashboard-remote-control true, --farm-cli PATH
        """;

    /// <summary>The host other nodes and clients reach this node by (a container's service name); null: the address it listens on.</summary>
    public string? AdvertiseHost { get; init; }

    /// <summary>
    /// The port the AMQP 1.0 listener binds on <see cref="Host"/> (--amqp-port, FARM_AMQP_PORT); 0 (the
    /// default) lets the OS pick a free one. Once bound, the listener sets <see cref="NodeOptions.AmqpAddress"/>
    /// (<see cref="NodeListeners.AmqpAddressOf"/>), which the node registers in the farm database.
    /// </summary>
    public int AmqpPort { get; init; }

    /// <summary>On SIGTERM, hand every container to the other nodes before exiting (a container's stop).</summary>
    public bool DrainOnStop { get; init; }

    /// <summary>How long a stop may spend handing containers over before it stops anyway.</summary>
    public static readonly TimeSpan DrainOnStopTimeout = TimeSpan.FromSeconds(50);

    public const string Postgres = "postgres";

    public static NodeHostOptions Parse(IConfiguration configuration)
    {
        // --name value on the command line, else FARM_NAME in the environment (a container's way).
        string? Get(string name) => configuration[name] is { Length: > 0 } value ? value
            : Environment.GetEnvironmentVariable("FARM_" + name.ToUpperInvariant().Replace('-', '_')) is { Length: > 0 } fromEnvironment ? fromEnvironment
            : null;

        var nodeId = ParseLong(Get("node-id") ?? "1", "--node-id", min: 1);
        var port = (int)ParseLong(Get("port") ?? "5480", "--port", min: 0, max: 65535);
        // Prometheus scrapes over HTTP/1.1, which the HTTP/2-only gRPC port cannot serve; 0 picks a free port.
        var metricsPort = (int)ParseLong(Get("metrics-port") ?? "0", "--metrics-port", min: 0, max: 65535);
        var amqpPort = (int)ParseLong(Get("amqp-port") ?? "0", "--amqp-port", min: 0, max: 65535);
        var node = new NodeOptions
        {
            NodeId = nodeId,
            DataDirectory = Path.GetFullPath(Get("data") ?? ".farm"),
            Store = (Get("store") ?? Sqlite).Trim().ToLowerInvariant(),
            FarmConnectionString = Get("farm-connection"),
            ExpectedNodes = (int)ParseLong(Get("expected-nodes") ?? "1", "--expected-nodes", min: 1, max: 64),
        };
        var broker = new BrokerOptions();
        if (Get("message-cache-size-per-entity") is { } cacheMb)
        {
            broker.MessageCacheSizePerEntity = ParseLong(cacheMb, "--message-cache-size-per-entity (MB)", min: 1, max: 65536) * 1024 * 1024;
        }
        if (Get("message-cache-size-per-node") is { } nodeCacheMb)
        {
            broker.MessageCacheSizePerNode = ParseLong(nodeCacheMb, "--message-cache-size-per-node (MB)", min: 1, max: 65536) * 1024 * 1024;
        }
        if (Get("commit-delay-us") is { } commitDelay)
        {
            broker.CommitDelay = TimeSpan.FromMicroseconds(ParseLong(commitDelay, "--commit-delay-us (microseconds)", min: 0, max: 100_000));
        }
        if (Get("shed-sends-after-ms") is { } shedAfter)
        {
            broker.ShedSendsAfter = TimeSpan.FromMilliseconds(ParseLong(shedAfter, "--shed-sends-after-ms (milliseconds; 0: never shed)", min: 0, max: 600_000));
        }
        var forwarding = new ForwardingOptions();
        if (Get("forward-timeout") is { } forwardTimeout)
        {
            forwarding.ForwardTimeout = ParseSeconds(forwardTimeout, "--forward-timeout");
        }
        if (forwarding.Validate() is { } invalid)
        {
            throw new ArgumentException(invalid);
        }
        // A SQLite farm's nodes share one machine and data directory: a crashed one is told by its
        // process lock at once. Nodes of a PostgreSQL farm may be on other hosts: they are told by
        // their session locks in the farm database (NodeOptions.DetectEndedSessions, on by default).
        node.DetectCrashedProcesses = node.Store == Sqlite;
        // How often the crash watch looks (each look on PostgreSQL is one read of pg_locks); 0 turns
        // it off, leaving a dead peer's free lock to the next ownership pass.
        if (Get("crash-probe-ms") is { } crashProbe)
        {
            node.CrashProbeInterval = TimeSpan.FromMilliseconds(ParseLong(crashProbe, "--crash-probe-ms (milliseconds; 0: no crash watch)", min: 0, max: 60_000));
        }
        if (node.Store is not (Sqlite or Postgres))
        {
            throw new ArgumentException($"--store {node.Store} is not supported; use {Sqlite} or {Postgres}.");
        }
        // SQLite finds its farm file in the data directory; a PostgreSQL farm lives on a server only the operator can name.
        if (node.Store == Postgres && string.IsNullOrWhiteSpace(node.FarmConnectionString))
        {
            throw new ArgumentException(
                "--store postgres needs --farm-connection with the farm database's Npgsql connection string (Host=...;Database=...;Username=...;Password=...).");
        }
        var dashboard = new DashboardOptions
        {
            RemoteControl = ParseBool(Get("dashboard-remote-control") ?? "false", "--dashboard-remote-control"),
            FarmCli = string.IsNullOrWhiteSpace(Get("farm-cli")) ? null : Path.GetFullPath(Get("farm-cli")!),
        };
        var advertiseHost = Get("advertise-host")?.Trim();
        if (advertiseHost is not null && Uri.CheckHostName(advertiseHost) == UriHostNameType.Unknown)
        {
            throw new ArgumentException($"--advertise-host must be a host name or IP address; got '{advertiseHost}'.");
        }
        var drainOnStop = ParseBool(Get("drain-on-stop") ?? "false", "--drain-on-stop");
        return new NodeHostOptions(node, Get("host") ?? "127.0.0.1", port, metricsPort, forwarding, broker, dashboard)
        {
            AdvertiseHost = advertiseHost,
            DrainOnStop = drainOnStop,
            AmqpPort = amqpPort,
        };
    }

    private static bool ParseBool(string text, string name) =>
        bool.TryParse(text, out var value) ? value : throw new ArgumentException($"{name} must be true or false; got '{text}'.");

    /// <summary>A positive number of seconds, e.g. 5 or 2.5.</summary>
    private static TimeSpan ParseSeconds(string text, string name)
    {
        if (!double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out var seconds) || !(seconds > 0) || seconds > 3600)
        {
            throw new ArgumentException($"{name} must be a number of seconds above 0 and at most 3600; got '{text}'.");
        }
        return TimeSpan.FromSeconds(seconds);
    }

    private static long ParseLong(string text, string name, long min, long max = long.MaxValue)
    {
        if (!long.TryParse(text, NumberStyles.Integer, CultureInfo.InvariantCulture, out var value) || value < min || value > max)
        {
            throw new ArgumentException($"{name} must be a whole number from {min} to {max}; got '{text}'.");
        }
        return value;
    }
}
