namespace Farm.ContainerStore.FarmDatabase;

/// <summary>
/// A node's claim on its id that the farm database's server keeps for one session of its own and
/// drops the moment that session ends: when the node's process dies (SIGKILL included), its socket
/// closes and the server ends the session at once, on whatever host the node ran. So the other
/// nodes can tell a crash without waiting for its heartbeats to lapse. A frozen process, or one cut
/// off from the server by the network, keeps its session open: for those the heartbeat timeout
/// stays the rule. (PostgreSQL: a session-level advisory lock. SQLite farms use a lock file per
/// node instead, see the broker's NodeProcessLock.)
/// </summary>
public interface INodeSessionLock : IAsyncDisposable
{
    /// <summary>
    /// Makes sure this process holds its node's lock: checks the session it holds it on, and takes
    /// it again on a new session when that one is gone (the server restarted, the connection
    /// broke). Returns when the session it is held on began (null: not held, another session holds
    /// it still, or the server cannot be reached).
    /// </summary>
    Task<DateTimeOffset?> EnsureHeldAsync(TimeProvider clock, CancellationToken cancellationToken = default);

    /// <summary>
    /// Whose session holds node <paramref name="nodeId"/>'s lock. When none does (its process is
    /// gone, or never took it), takes it and returns the hold: the caller keeps it while it releases
    /// that node's containers, so a new process of that node cannot start taking them in between,
    /// and disposes it after. A lock held by another node's probe says nothing of the node itself
    /// (after a server restart, a survivor probing a node not back yet holds its lock for a moment).
    /// </summary>
    Task<NodeLockProbe> ProbeAsync(long nodeId, CancellationToken cancellationToken = default);

    /// <summary>
    /// The nodes whose lock some session holds now, in one read that takes nothing (null when the
    /// server cannot be asked): cheap enough to ask every 100 ms, so a crash watch can tell a node
    /// whose lock went free and wake the ownership pass, which then judges it by
    /// <see cref="ProbeAsync"/>.
    /// </summary>
    Task<IReadOnlySet<long>?> ListHeldAsync(CancellationToken cancellationToken = default);
}

/// <summary>What a probe of a node's session lock found (<see cref="INodeSessionLock.ProbeAsync"/>).</summary>
public enum NodeLockHolder
{
    /// <summary>Nothing was learnt: the probing session does not hold its own lock, or the server could not be asked.</summary>
    Unknown,

    /// <summary>The node's own session holds it: its process is alive as far as the server can tell.</summary>
    ItsNode,

    /// <summary>Another session holds it (another node's probe): says nothing of the node.</summary>
    AnotherSession,

    /// <summary>No session held it: the probe holds it now (<see cref="NodeLockProbe.Hold"/>).</summary>
    Nobody,
}

/// <summary>A probe's finding, and the hold on the lock when it was free (disposed to let it go).</summary>
public sealed record NodeLockProbe(NodeLockHolder Holder, IAsyncDisposable? Hold = null)
{
    public static readonly NodeLockProbe Unknown = new(NodeLockHolder.Unknown);
}
