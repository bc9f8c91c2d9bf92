namespace Farm.Broker.Entities;

/// <summary>
/// New lock tokens: random version-4 GUIDs from <see cref="Random.Shared"/> (a fast generator
/// seeded from the operating system's randomness when the process starts). Guid.NewGuid reads the
/// operating system's secure random source once per GUID, a system call per delivered message
/// that showed as 1.7% of a node's CPU in peek-lock profiles. A lock token only has to be unique:
/// it guards against settling the wrong delivery (a stale token from an earlier lock or an earlier
/// owner), not against an attacker, who could as well receive the message.
/// </summary>
internal static class LockTokens
{
    public static Guid New()
    {
        Span<byte> bytes = stackalloc byte[16];
        Random.Shared.NextBytes(bytes);
        // The version (4: random) and variant (RFC 9562) bits, as Guid.NewGuid sets them.
        bytes[7] = (byte)((bytes[7] & 0x0F) | 0x40);
        bytes[8] = (byte)((bytes[8] & 0x3F) | 0x80);
        return new Guid(bytes);
    }
}
