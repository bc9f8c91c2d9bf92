using System.Buffers.Binary;

namespace Farm.Broker.Entities;

/// <summary>
/// New lock tokens: the locked message's sequence number (8 bytes), when its first lock runs out
/// (4 bytes, Unix seconds, rounded up) and 4 bytes of a counter that starts at a random value in each
/// process, as a GUID. A lock token only has to be unique: it guards against settling the wrong
/// delivery (a stale token from an earlier lock or an earlier owner), not against an attacker, who
/// could as well receive the message; two locks of one message whose locks end in the same second
/// differ in their counter part, for certain within a node and all but certainly across nodes.
/// (4 random bytes, used before, gave a duplicate in about one run in 70 of a test locking three
/// messages 20,000 times in one second, by the birthday bound; a clean-clone CI run hit it.) What it carries lets a node that never saw the lock answer a settlement
/// sent again after a failover (<see cref="TryRead"/>): the message it names is gone and its lock
/// would still hold, so the Complete whose answer was lost with the old owner was done.
/// (Guid.NewGuid, used before, read the operating system's secure random source once per GUID, a
/// system call per delivered message: 1.7% of a node's CPU in peek-lock profiles.)
/// </summary>
internal static class LockTokens
{
    private static int _counter = Random.Shared.Next();

    public static Guid New(long sequenceNumber, long lockedUntilMs)
    {
        Span<byte> bytes = stackalloc byte[16];
        BinaryPrimitives.WriteInt64LittleEndian(bytes, sequenceNumber);
        BinaryPrimitives.WriteUInt32LittleEndian(bytes[8..], (uint)Math.Clamp((lockedUntilMs + 999) / 1000, 0, uint.MaxValue));
        BinaryPrimitives.WriteUInt32LittleEndian(bytes[12..], (uint)Interlocked.Increment(ref _counter));
        return new Guid(bytes);
    }

    /// <summary>
    /// The sequence number and lock end a token of <see cref="New"/> carries, when they are
    /// plausible at <paramref name="nowMs"/>: a positive sequence number, and a lock end no further
    /// ahead than the longest lock (a random token, from an older node, almost never is).
    /// </summary>
    public static bool TryRead(Guid token, long nowMs, out long sequenceNumber, out long lockedUntilMs)
    {
        Span<byte> bytes = stackalloc byte[16];
        token.TryWriteBytes(bytes);
        sequenceNumber = BinaryPrimitives.ReadInt64LittleEndian(bytes);
        lockedUntilMs = BinaryPrimitives.ReadUInt32LittleEndian(bytes[8..]) * 1000L;
        return sequenceNumber > 0 && lockedUntilMs - nowMs <= (long)QueueSettings.MaxLockDuration.TotalMilliseconds + 1000;
    }
}
