namespace Farm.Broker;

/// <summary>Broker tuning and limits. Defaults follow Azure Service Bus (standard tier) where it has one.</summary>
public sealed class BrokerOptions
{
    /// <summary>Largest message (body + properties), in bytes: 256 KB as in Azure Service Bus standard.</summary>
    public int MaxMessageSizeBytes { get; set; } = 256 * 1024;

    /// <summary>Largest send batch, in bytes.</summary>
    public int MaxBatchSizeBytes { get; set; } = 1024 * 1024;

    /// <summary>
    /// Peek-lock receive streams take settlements when the client asks (ReceiveOpen.settle_on_stream).
    /// Off, the broker behaves as one from before: it does not answer the ask, and clients settle by
    /// Settle calls (tests use it to stand in for an older broker).
    /// </summary>
    public bool SettleOnReceiveStream { get; set; } = true;

    /// <summary>How often expired locks, due scheduled messages and expired TTLs are swept.</summary>
    public TimeSpan SweepInterval { get; set; } = TimeSpan.FromMilliseconds(250);

    /// <summary>Most operations one group commit carries.</summary>
    public int MaxOperationsPerCommit { get; set; } = 4096;

    /// <summary>
    /// How long a container's commit loop waits for more writes before it commits fewer than
    /// <see cref="CommitDelayBelow"/> (PostgreSQL's commit_delay and commit_siblings): fewer
    /// commits, fewer WAL pages and fsyncs per message at low and moderate rates, at that much more
    /// latency per write. Zero (the default) commits at once. Measured in perf/README.md
    /// ("Session 16"): the 15-queue chain at 125 msg/s took about a third less CPU with 1 ms, and
    /// its p50 rose from 17 to about 70 ms end to end.
    /// </summary>
    public TimeSpan CommitDelay { get; set; } = TimeSpan.Zero;

    /// <summary>A commit of at least this many writes goes at once, whatever <see cref="CommitDelay"/> says.</summary>
    public int CommitDelayBelow { get; set; } = 16;

    /// <summary>
    /// Most message bytes of sends waiting for a container's commit: past it, sends to that
    /// container get SERVICE_BUSY (a transient error the SDK retries) instead of queueing more in
    /// memory. 64 MiB is over a second of the single-queue peak rate.
    /// </summary>
    public long MaxWaitingCommitBytes { get; set; } = 64L * 1024 * 1024;

    /// <summary>
    /// Load shedding: while the node's work waits this long or longer in its thread pool
    /// (<see cref="Overload.ThreadPoolLag"/>), new sends get SERVICE_BUSY, nothing stored, so an
    /// overloaded node slows its senders down instead of falling so far behind that its clients take
    /// its connections for dead (their liveness probe cuts one silent for 1.5 s). Zero: never shed.
    /// </summary>
    public TimeSpan ShedSendsAfter { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>Most messages handed out by one receive call or stream push.</summary>
    public int MaxMessagesPerReceive { get; set; } = 256;

    /// <summary>
    /// How often a container deletes duplicate-detection history past its window from its database
    /// (memory forgets it as it expires), so the history does not grow without end.
    /// </summary>
    public TimeSpan DuplicatePruneInterval { get; set; } = TimeSpan.FromMinutes(1);

    /// <summary>
    /// Most bytes of messages in one receive response (a batch, or one push of a stream); the rest
    /// stay available. gRPC clients refuse messages over 4 MB by default (grpc-dotnet, grpc-js,
    /// grpc-java), and a refused response would come after the broker locked its messages and
    /// counted a delivery for each. At least one message is always sent (one is at most 256 KB).
    /// </summary>
    public int MaxReceiveResponseBytes { get; set; } = (4 * 1024 * 1024) - (256 * 1024);

    /// <summary>
    /// SBWS's MessageCacheSizePerEntity: the bytes of messages a queue or subscription keeps in
    /// memory, for each of its active messages, its dead-letter queue, its scheduled messages (the
    /// first to come due) and its deferred ones (locked messages are among the active ones); the
    /// rest stays in its container database and is read back as it is needed. 8 MiB holds about
    /// 8,000 1 KB messages, a fifth of a second at the single-queue peak rate, which keeps receivers
    /// fed while the next part is read; SBWS's 500 MB default would let a handful of deep queues fill
    /// a small node. A topic keeps none of its stored copies in memory.
    /// </summary>
    public long MessageCacheSizePerEntity { get; set; } = 8L * 1024 * 1024;

    /// <summary>
    /// The bytes of messages all entities of a node keep in memory together. Past it, arriving
    /// messages stay in the database and read-backs bring in only what each entity's floor allows
    /// (an eighth of its own budget, at most 256 KiB), so none starves. 256 MiB keeps a node with
    /// any number of deep entities at about 400 MiB of RSS (the runtime and the rest take some 130
    /// MiB), under the 512 MiB the issue "Bounded memory" aims at. A topic's message shared by
    /// several subscriptions counts once for each.
    /// </summary>
    public long MessageCacheSizePerNode { get; set; } = 256L * 1024 * 1024;

    /// <summary>
    /// What taking a container reads of each queue's and subscription's head before it serves it (at
    /// most <see cref="MessageCacheSizePerEntity"/>): 256 KiB, some 250 1 KB messages, is read in a few
    /// milliseconds, and the rest of the cache fills by read-back while the entity already serves, so
    /// the first message after a takeover does not wait for 8 MiB to be read and parsed.
    /// </summary>
    public long TakeoverLoadBytes { get; set; } = 256L * 1024;

    /// <summary>
    /// Sequence numbers one step of counting a taken-over queue's stored tail covers. Each step runs
    /// between two commits of the container (commits wait for it): 100,000 is some 10 ms of an
    /// indexed count, and a 10,000,000-message tail is counted in about a second of steps.
    /// </summary>
    public long TailCountStep { get; set; } = 100_000;

    /// <summary>Most messages one read-back of a paged queue brings into memory (it runs between two commits of the container).</summary>
    public int MaxMessagesPerRefill { get; set; } = 1024;

    /// <summary>
    /// MessageIds duplicate detection keeps exactly in memory per entity, the newest (about 150 bytes
    /// each with a GUID id: some 2.5 MB). Older ids of the window stay in the container database and
    /// in Bloom filters of about 14 bits an id; a send whose id a filter may hold looks it up by key.
    /// </summary>
    public int DuplicateIdsInMemoryPerEntity { get; set; } = 16 * 1024;

    /// <summary>Most forwarding hops a message takes through ForwardTo chains (Azure allows 4).</summary>
    public int MaxForwardHops { get; set; } = 4;
}
