using BenchmarkDotNet.Running;

// Micro-benchmarks of Farm's hot paths; results (JSON and Markdown) land in BenchmarkDotNet.Artifacts/.
//   dotnet run -c Release --project perf/Farm.Benchmarks -- --filter '*'
BenchmarkSwitcher.FromAssembly(typeof(Program).Assembly).Run(args, BenchmarkConfig.Create());

/// <summary>The entry point's type, for <see cref="BenchmarkSwitcher.FromAssembly"/>.</summary>
public partial class Program;
