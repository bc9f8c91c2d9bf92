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

    private long _used;

    /// <summary>No node-wide limit (a single entity in tests).</summary>
    public static MessageCacheBudget Unlimited => new(long.MaxValue);

    public long LimitBytes { get; } = limitBytes;

    public long UsedBytes => Interlocked.Read(ref _used);

    /// <summary>Bytes left before the limit (0 when over it).</summary>
    public long RoomBytes => Math.Max(LimitBytes - UsedBytes, 0);

    public bool HasRoomFor(long bytes) => UsedBytes + bytes <= LimitBytes;

    public void Add(long bytes) => Interlocked.Add(ref _used, bytes);
}
