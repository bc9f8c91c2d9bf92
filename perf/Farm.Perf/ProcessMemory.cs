using System.Globalization;

namespace Farm.Perf;

/// <summary>A process's memory from /proc/PID/status (Linux): resident now (VmRSS) and its peak (VmHWM), in MiB; null when unreadable.</summary>
internal static class ProcessMemory
{
    public static double? RssMib(int pid) => Field(pid, "VmRSS:");

    public static double? PeakRssMib(int pid) => Field(pid, "VmHWM:");

    private static double? Field(int pid, string name)
    {
        try
        {
            foreach (var line in File.ReadLines($"/proc/{pid}/status"))
            {
                if (line.StartsWith(name, StringComparison.Ordinal))
                {
                    // "VmRSS:	  123456 kB"
                    var kib = long.Parse(line[name.Length..].Trim().Split(' ')[0], CultureInfo.InvariantCulture);
                    return Math.Round(kib / 1024.0, 1);
                }
            }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException)
        {
            // Gone or not Linux.
        }

        return null;
    }
}
