using System.Runtime.InteropServices;

namespace Farm.Perf;

/// <summary>What the figures were measured on; ratios travel between machines, absolute numbers do not.</summary>
internal sealed record MachineInfo(int Cores, double MemoryGib, string Os, string Cpu, string Dotnet)
{
    /// <summary>1 KiB appends with fdatasync per second, as perf/run.sh measured them at its start (null: not run by it).</summary>
    public double? FsyncPerSec { get; init; }

    /// <summary>The disk the temporary data directories are on, as perf/run.sh described it.</summary>
    public string? Disk { get; init; }

    public static MachineInfo Current() => new(
        Environment.ProcessorCount,
        Math.Round(GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / (1024.0 * 1024 * 1024), 1),
        RuntimeInformation.OSDescription,
        CpuModel(),
        RuntimeInformation.FrameworkDescription)
    {
        FsyncPerSec = double.TryParse(Environment.GetEnvironmentVariable("FARM_PERF_FSYNC_PER_SEC"), System.Globalization.NumberStyles.Float, System.Globalization.CultureInfo.InvariantCulture, out var fsync) ? fsync : null,
        Disk = Environment.GetEnvironmentVariable("FARM_PERF_DISK") is { Length: > 0 } disk ? disk : null,
    };

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
