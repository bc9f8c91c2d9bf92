using System.Reflection;

namespace Farm.EndToEnd.Tests;

/// <summary>Where the tests find what they run, fixed at build time (see the .csproj).</summary>
internal static class TestPaths
{
    /// <summary>farm.dll of the same configuration as the tests.</summary>
    public static string FarmCliDll { get; } = Metadata("FarmCliDll");

    /// <summary>The node host (Farm.Gateway.dll) of the same configuration, for tests that start nodes themselves.</summary>
    public static string NodeDll { get; } = Metadata("NodeDll");

    public static string RepositoryRoot { get; } = Metadata("RepositoryRoot");

    public static string NodeClientDirectory => Path.Combine(RepositoryRoot, "tests", "node-client");

    private static string Metadata(string key) =>
        typeof(TestPaths).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().SingleOrDefault(a => a.Key == key)?.Value
        ?? throw new InvalidOperationException($"Assembly metadata {key} is missing.");
}
