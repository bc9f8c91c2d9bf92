using System.Runtime.InteropServices;

namespace Farm.Perf;

/// <summary>What the figures were measured on; ratios travel between machines, absolute numbers do not.</summary>
internal sealed record MachineInfo(int Cores, double MemoryGib, string Os, string Cpu, string Dotnet)
{
    public static MachineInfo Current() => new(
        Environment.ProcessorCount,
        Math.Round(GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / (1024.0 * 1024 * 1024), 1),
        RuntimeInformation.OSDescription,
        CpuModel(),
        RuntimeInformation.FrameworkDescription);

    /// <summary>The first "model name" of /proc/cpuinfo (Linux); the architecture elsewhere.</summary>
    private static string CpuModel()
    {
        try
        {
            foreach (var line in File.ReadLines("/proc/cpuinfo"))
            {
                if (line.StartsWith("model name", StringComparison.Ordinal) && line.IndexOf(':') is var colon and >= 0)
                {
                    return line[(colon + 1)..].Trim();
                }
            }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // Not Linux, or not readable: fall through.
        }

        return RuntimeInformation.ProcessArchitecture.ToString();
    }
}
