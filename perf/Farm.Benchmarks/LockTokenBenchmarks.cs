using BenchmarkDotNet.Attributes;
using Farm.Broker.Entities;

namespace Farm.Benchmarks;

/// <summary>
/// A lock token per peek-lock delivery: Guid.NewGuid (the OS's secure random source, a system call
/// each) against <see cref="LockTokens.New"/> (the message's sequence number, its lock's end and 4
/// bytes of Random.Shared), which the broker uses.
/// </summary>
[MemoryDiagnoser]
public class LockTokenBenchmarks
{
    [Benchmark(Baseline = true)]
    public Guid GuidNewGuid() => Guid.NewGuid();

    private long _sequence;

    [Benchmark]
    public Guid LockTokensNew() => LockTokens.New(++_sequence, 1_800_000_060_000);
}
