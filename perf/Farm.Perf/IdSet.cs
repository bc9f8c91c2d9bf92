namespace Farm.Perf;

/// <summary>
/// A set of message ids (0, 1, 2, ...), one bit each in chunks allocated on first use, safe for
/// concurrent adds. <see cref="Add"/> says whether the id was new, which is how duplicates show.
/// </summary>
internal sealed class IdSet
{
    private const int ChunkBits = 1 << 20;
    private const int WordsPerChunk = ChunkBits / 64;

    private readonly Lock _grow = new();
    private long[]?[] _chunks = new long[]?[16];
    private long _count;

    public long Count => Interlocked.Read(ref _count);

    /// <summary>True when <paramref name="id"/> was not in the set before.</summary>
    public bool Add(long id)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(id);
        var chunk = ChunkFor(id / ChunkBits);
        var bit = id % ChunkBits;
        var mask = 1L << (int)(bit % 64);
        var before = Interlocked.Or(ref chunk[bit / 64], mask);
        if ((before & mask) != 0)
        {
            return false;
        }

        Interlocked.Increment(ref _count);
        return true;
    }

    public bool Contains(long id)
    {
        var index = id / ChunkBits;
        var chunks = Volatile.Read(ref _chunks);
        if (id < 0 || index >= chunks.Length || chunks[index] is not { } chunk)
        {
            return false;
        }

        var bit = id % ChunkBits;
        return (Volatile.Read(ref chunk[bit / 64]) & (1L << (int)(bit % 64))) != 0;
    }

    private long[] ChunkFor(long index)
    {
        var chunks = Volatile.Read(ref _chunks);
        if (index < chunks.Length && chunks[index] is { } existing)
        {
            return existing;
        }

        lock (_grow)
        {
            chunks = _chunks;
            if (index >= chunks.Length)
            {
                var grown = new long[]?[Math.Max(chunks.Length * 2, (int)index + 1)];
                Array.Copy(chunks, grown, chunks.Length);
                chunks = grown;
            }

            var chunk = chunks[index] ??= new long[WordsPerChunk];
            Volatile.Write(ref _chunks, chunks);
            return chunk;
        }
    }
}
