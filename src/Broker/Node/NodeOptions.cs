namespace Farm.Broker.Node;

/// <summary>Who this node is and where its farm lives.</summary>
public sealed class NodeOptions
{
    public long NodeId { get; set; } = 1;

    /// <summary>
    /// How many nodes start together (`farm up --nodes N` on a farm that ran before): before its
    /// first ownership pass a node waits until that many are live, or <see cref="ExpectedNodesWait"/>
    /// passed, so each takes its share of the containers at once, instead of the first one up taking
    /// them all and handing them back one at a time. No wait when a live peer already serves
    /// containers: the farm is running, and this node joins it. 1 (the default): no wait.
    /// </summary>
    public int ExpectedNodes { get; set; } = 1;

    /// <summary>The longest a starting node waits for <see cref="ExpectedNodes"/>; then it takes what it can, as alone.</summary>
    public TimeSpan ExpectedNodesWait { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>The farm's data directory (SQLite farm database and container databases).</summary>
    public string DataDirectory { get; set; } = ".farm";

    /// <summary>"sqlite" (default).</summary>
    public string Store { get; set; } = "sqlite";

    /// <summary>The farm database; empty means DataDirectory/farm.db for SQLite.</summary>
    public string? FarmConnectionString { get; set; }

    /// <summary>
    /// Where this node listens for AMQP 1.0 (amqp://host:port, the host clients reach it by), or null
    /// when it does not. The node registers it in the farm database when it starts (nodes.amqp_address;
    /// `farm status` and `farm connection-string --amqp` read it there), so the AMQP listener sets it
    /// once its socket is bound, before the node starts: in its hosted service's StartAsync, which
    /// the host runs before BrokerNodeService.StartedAsync starts the node.
    /// </summary>
    public string? AmqpAddress { get; set; }

    /// <summary>
    /// Tell a crashed node at once by its process lock (<see cref="NodeProcessLock"/>) instead of
    /// waiting <see cref="NodeTimeout"/> for its heartbeats to lapse. Only where every node runs on
    /// this machine with one data directory: a SQLite farm (the node host turns it on for those).
    /// </summary>
    public bool DetectCrashedProcesses { get; set; }

    /// <summary>
    /// How often the crash watch tries the locks of the live peers (their process locks with
    /// <see cref="DetectCrashedProcesses"/>, or which session locks the farm database holds with
    /// <see cref="DetectEndedSessions"/>): a peer found gone wakes the ownership pass at once, so a
    /// killed node's containers move within about this long plus the take, not a pass or a heartbeat later.
    /// Zero: no crash watch; the ownership pass still tries a dead peer's lock every <see cref="HeartbeatInterval"/>.
    /// </summary>
    public TimeSpan CrashProbeInterval { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>
    /// Tell a crashed node at once by its session lock in the farm database (INodeSessionLock:
    /// PostgreSQL ends a dead process's session, and its lock with it, on any host) instead of
    /// waiting <see cref="NodeTimeout"/>: the crash watch reads which locks are held every
    /// <see cref="CrashProbeInterval"/>, and the ownership pass judges a peer whose lock went free.
    /// On where the farm database can tell (PostgreSQL); SQLite farms use <see cref="DetectCrashedProcesses"/>.
    /// </summary>
    public bool DetectEndedSessions { get; set; } = true;

    /// <summary>How long a container lease lasts without renewal (database clock).</summary>
    public TimeSpan LeaseDuration { get; set; } = TimeSpan.FromSeconds(3);

    /// <summary>
    /// A node stops serving a container this long before its lease would run out unless renewed
    /// (counted from when the renewal was asked for, on the node's own clock), so it is never
    /// serving from memory when the farm may already give the container to another node.
    /// </summary>
    public TimeSpan LeaseSafetyMargin { get; set; } = TimeSpan.FromMilliseconds(500);

    /// <summary>
    /// How long one take of a container (lease, open, raise the epoch) may last before the
    /// ownership pass gives it up and tries again on a later pass.
    /// </summary>
    public TimeSpan TakeTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// How often the node heartbeats and renews its leases (on their own loop, never behind a slow
    /// take), and how often it looks at the farm's containers.
    /// </summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromMilliseconds(500);

    /// <summary>A node whose heartbeat is older than this (database clock) counts as dead.</summary>
    public TimeSpan NodeTimeout { get; set; } = TimeSpan.FromSeconds(3);

    /// <summary>
    /// An orphaned container (no owner, or a dead one) goes to a node with room under its fair
    /// share at once; after this long any live node takes it, so availability beats balance.
    /// </summary>
    public TimeSpan OrphanGrace { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>A container stays at least this long with a node before rebalancing moves it, so ownership never flaps.</summary>
    public TimeSpan MinimumStay { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>How long a planned hand-over waits for receivers to settle the locks they hold.</summary>
    public TimeSpan HandOverLockWait { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>At most one planned move per this interval per node.</summary>
    public TimeSpan RebalanceInterval { get; set; } = TimeSpan.FromSeconds(5);
}
