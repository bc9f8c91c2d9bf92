namespace Farm.Broker.Entities;

/// <summary>
/// The bytes of messages all entities of a node keep in memory, against the node's budget
/// (BrokerOptions.MessageCacheSizePerNode). Past it, arriving messages stay in the container
/// database and read-backs bring in only what each sub-queue's floor allows, so a node with many
/// deep entities stays within its memory while every one of them keeps serving. Thread-safe.
/// </summary>
internal sealed class MessageCacheBudget(long limitBytes)
{
    /// <summary>What each sub-queue may hold whatever the node's budget says (at most an eighth of its own budget), so none starves.</summary>
    public const long MaxFloorBytes = 256 * 1024;

    /// <summary>
    /// The kinds of cached message an entity keeps a floor of each (active in the main queue and in
    /// the dead-letter queue, scheduled, deferred): the floors of all entities together stay within
    /// the node's budget when each is <see cref="LimitBytes"/> / (kinds x entities).
    /// </summary>
    private const int FloorKinds = 4;

    private long _used;
    private int _entities;

    /// <summary>No node-wide limit (a single entity in tests).</summary>
    public static MessageCacheBudget Unlimited => new(long.MaxValue);

    public long LimitBytes { get; } = limitBytes;

    public long UsedBytes => Interlocked.Read(ref _used);

    /// <summary>Bytes left before the limit (0 when over it).</summary>
    public long RoomBytes => Math.Max(LimitBytes - UsedBytes, 0);

    public bool HasRoomFor(long bytes) => UsedBytes + bytes <= LimitBytes;

    public void Add(long bytes) => Interlocked.Add(ref _used, bytes);

    /// <summary>A queue or subscription counts against this budget from its construction until it is unloaded.</summary>
    public void EntityLoaded() => Interlocked.Increment(ref _entities);

    public void EntityUnloaded() => Interlocked.Decrement(ref _entities);

    /// <summary>
    /// What one kind of an entity's cached messages may hold while the node's budget is spent: its
    /// own floor (<paramref name="entityFloorBytes"/>), but no more than an even share of the node's
    /// budget. A fixed floor of 256 KiB let 15,000 queues keep 3.7 GB per kind past a budget of 256 MiB;
    /// a read-back still brings at least one message, so none starves.
    /// </summary>
    public long FloorBytes(long entityFloorBytes) =>
        Math.Min(entityFloorBytes, LimitBytes / (FloorKinds * Math.Max(1L, Volatile.Read(ref _entities))));
}
