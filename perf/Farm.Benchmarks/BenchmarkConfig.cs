using System.Reflection;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Diagnosers;
using BenchmarkDotNet.Exporters.Json;

/// <summary>
/// Allocations matter as much as time on a 2-core broker: every benchmark reports both. Results
/// are exported as JSON under perf/results/benchmarks/ of the repository the benchmarks were built from.
/// </summary>
internal static class BenchmarkConfig
{
    public static IConfig Create()
    {
        var config = DefaultConfig.Instance
            .AddDiagnoser(MemoryDiagnoser.Default)
            .AddExporter(JsonExporter.Full);
        var root = typeof(BenchmarkConfig).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .FirstOrDefault(a => a.Key == "RepositoryRoot")?.Value;
        return root is not null && Directory.Exists(root)
            ? config.WithArtifactsPath(Path.Combine(root, "perf", "results", "benchmarks"))
            : config;
    }
}
