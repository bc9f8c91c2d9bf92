using System.Numerics;

namespace Farm.Perf;

/// <summary>
/// Latencies in microseconds, bucketed log-linearly (exact below 256 µs, then 128 buckets per power
/// of two: under 1% error), so concurrent receivers record with one interlocked increment and no
/// allocation. Percentiles report a bucket's midpoint.
/// </summary>
internal sealed class LatencyHistogram
{
    private const int LinearBuckets = 256;
    private const int SubBuckets = 128;
    private const int MaxShift = 40;

    private readonly long[] _counts = new long[LinearBuckets + (MaxShift * SubBuckets)];
    private long _total;

    public long Count => Interlocked.Read(ref _total);

    public void Record(long microseconds)
    {
        Interlocked.Increment(ref _counts[IndexOf(Math.Max(0, microseconds))]);
        Interlocked.Increment(ref _total);
    }

    /// <summary>The latency in milliseconds below which <paramref name="quantile"/> of the recorded values fall; 0 when empty.</summary>
    public double PercentileMs(double quantile)
    {
        var total = Count;
        if (total == 0)
        {
            return 0;
        }

        var rank = Math.Max(1, (long)Math.Ceiling(quantile * total));
        long seen = 0;
        for (var i = 0; i < _counts.Length; i++)
        {
            seen += Interlocked.Read(ref _counts[i]);
            if (seen >= rank)
            {
                return MidpointOf(i) / 1000.0;
            }
        }

        return MidpointOf(_counts.Length - 1) / 1000.0;
    }

    private static int IndexOf(long value)
    {
        if (value < LinearBuckets)
        {
            return (int)value;
        }

        var shift = Math.Min(MaxShift, 63 - BitOperations.LeadingZeroCount((ulong)value) - 7);
        var top = Math.Min(2 * SubBuckets - 1, value >> shift);
        return LinearBuckets + ((shift - 1) * SubBuckets) + (int)(top - SubBuckets);
    }

    private static double MidpointOf(int index)
    {
        if (index < LinearBuckets)
        {
            return index;
        }

        var shift = ((index - LinearBuckets) / SubBuckets) + 1;
        var top = ((index - LinearBuckets) % SubBuckets) + SubBuckets;
        return ((long)top << shift) + ((1L << shift) / 2.0);
    }
}
