using System.Reflection;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Diagnosers;
using BenchmarkDotNet.Exporters.Json;
using BenchmarkDotNet.Jobs;
using BenchmarkDotNet.Toolchains.InProcess.Emit;

/// <summary>
/// Allocations matter as much as time on a 2-core broker: every benchmark reports both. Results
/// are exported as JSON under perf/results/benchmarks/ of the repository the benchmarks were built from.
/// The benchmarks run in this process (in-process toolchain): BenchmarkDotNet's default builds a
/// host project of its own, and that build compiles Farm.Contracts' generated gRPC code twice at
/// once (through Farm.Client and Farm.Broker) and fails ("Source file ...ErrorsGrpc.cs could not be
/// found"). A `--job` given on the command line sets the run's length as before.
/// </summary>
internal static class BenchmarkConfig
{
    public static IConfig Create()
    {
        var config = DefaultConfig.Instance
            .AddJob(Job.Default.WithToolchain(InProcessEmitToolchain.Instance).AsDefault())
            .AddDiagnoser(MemoryDiagnoser.Default)
            .AddExporter(JsonExporter.Full);
        var root = typeof(BenchmarkConfig).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .FirstOrDefault(a => a.Key == "RepositoryRoot")?.Value;
        return root is not null && Directory.Exists(root)
            ? config.WithArtifactsPath(Path.Combine(root, "perf", "results", "benchmarks"))
            : config;
    }
}
