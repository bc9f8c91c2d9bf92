using System.IO.Hashing;
using System.Runtime.InteropServices;

namespace Farm.Broker.Entities;

/// <summary>
/// A Bloom filter of MessageIds: "certainly not added" or "maybe added" in about 14 bits an id
/// (one false "maybe" in a thousand), instead of the id itself. Duplicate detection keeps the ids
/// that left its memory here, so a new id is told apart from them without a database read.
/// Not thread-safe: its entity's lock guards it.
/// </summary>
internal sealed class IdFilter
{
    private const int BitsPerId = 14;
    private const int Probes = 10;

    private readonly ulong[] _bits;
    private readonly ulong _bitCount;

    public IdFilter(int capacity)
    {
        Capacity = Math.Max(capacity, 64);
        _bitCount = (ulong)Capacity * BitsPerId;
        _bits = new ulong[(_bitCount + 63) / 64];
    }

    /// <summary>How many ids it takes before "maybe" gets wrong more often than it should.</summary>
    public int Capacity { get; }

    public int Count { get; private set; }

    /// <summary>The latest expiry among its ids: once past, the whole filter can go.</summary>
    public long LastExpiresAtMs { get; private set; }

    public bool IsFull => Count >= Capacity;

    /// <summary>Bytes it holds, for tests of the bound.</summary>
    public long SizeInBytes => _bits.Length * sizeof(ulong);

    public void Add(string id, long expiresAtMs)
    {
        var (h1, h2) = Hash(id);
        for (ulong i = 0; i < Probes; i++)
        {
            var bit = (h1 + (i * h2)) % _bitCount;
            _bits[bit >> 6] |= 1UL << (int)(bit & 63);
        }
        Count++;
        LastExpiresAtMs = Math.Max(LastExpiresAtMs, expiresAtMs);
    }

    public bool MightContain(string id)
    {
        var (h1, h2) = Hash(id);
        for (ulong i = 0; i < Probes; i++)
        {
            var bit = (h1 + (i * h2)) % _bitCount;
            if ((_bits[bit >> 6] & (1UL << (int)(bit & 63))) == 0)
            {
                return false;
            }
        }
        return true;
    }

    /// <summary>Two hashes from one 128-bit XXH3 (Kirsch and Mitzenmacher: the probes are h1 + i*h2).</summary>
    private static (ulong, ulong) Hash(string id)
    {
        var hash = XxHash128.HashToUInt128(MemoryMarshal.AsBytes(id.AsSpan()));
        return ((ulong)(hash >> 64), (ulong)hash | 1);
    }
}
