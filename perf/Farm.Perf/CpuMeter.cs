using System.Diagnostics;
using System.Globalization;

namespace Farm.Perf;

/// <summary>CPU used during a window, in cores (1.0 = one core busy the whole window).</summary>
/// <param name="NodeCores">The node process (null when the farm is not ours).</param>
/// <param name="LoadGeneratorCores">This process: senders, receivers and the checks.</param>
/// <param name="MachineBusyCores">Every process on the machine (Linux /proc/stat).</param>
/// <param name="OtherCores">What neither used: other work on a shared machine.</param>
internal sealed record CpuFigures(double? NodeCores, double LoadGeneratorCores, double? MachineBusyCores, double? OtherCores, int Cores);

/// <summary>
/// Reads CPU time of the node, of this process and of the whole machine (Linux /proc), so a result
/// can say who had the cores during its window: on a 2-core machine shared with other work that is
/// part of the figure.
/// </summary>
internal sealed class CpuMeter(int? nodeProcessId)
{
    private const double TicksPerSecond = 100; // USER_HZ on Linux

    public readonly record struct Snapshot(long Timestamp, TimeSpan Self, long? NodeTicks, long? MachineBusy, long? MachineTotal);

    public Snapshot Take()
    {
        var machine = MachineTicks();
        return new(
            Stopwatch.GetTimestamp(),
            Process.GetCurrentProcess().TotalProcessorTime,
            nodeProcessId is { } pid ? ProcessTicks(pid) : null,
            machine?.Busy,
            machine?.Total);
    }

    public static CpuFigures Between(Snapshot start, Snapshot end)
    {
        var seconds = Stopwatch.GetElapsedTime(start.Timestamp, end.Timestamp).TotalSeconds;
        var cores = Environment.ProcessorCount;
        if (seconds <= 0)
        {
            return new CpuFigures(null, 0, null, null, cores);
        }

        double? node = start.NodeTicks is { } n0 && end.NodeTicks is { } n1 ? Math.Round((n1 - n0) / TicksPerSecond / seconds, 2) : null;
        var self = Math.Round((end.Self - start.Self).TotalSeconds / seconds, 2);
        double? machine = null;
        if (start.MachineBusy is { } b0 && end.MachineBusy is { } b1 && start.MachineTotal is { } t0 && end.MachineTotal is { } t1 && t1 > t0)
        {
            machine = Math.Round((double)(b1 - b0) / (t1 - t0) * cores, 2);
        }

        double? other = machine is { } m ? Math.Round(Math.Max(0, m - self - (node ?? 0)), 2) : null;
        return new CpuFigures(node, self, machine, other, cores);
    }

    /// <summary>utime + stime of a process, in clock ticks; null when unreadable.</summary>
    private static long? ProcessTicks(int pid)
    {
        try
        {
            var stat = File.ReadAllText($"/proc/{pid}/stat");
            // The command name may hold spaces and parentheses: fields are counted after the last ')'.
            var fields = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
            // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
            return long.Parse(fields[11], CultureInfo.InvariantCulture) + long.Parse(fields[12], CultureInfo.InvariantCulture);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException or ArgumentOutOfRangeException)
        {
            return null;
        }
    }

    /// <summary>Busy and total ticks of all CPUs (the first line of /proc/stat); null when unreadable.</summary>
    private static (long Busy, long Total)? MachineTicks()
    {
        try
        {
            using var reader = new StreamReader("/proc/stat");
            var line = reader.ReadLine();
            if (line is null || !line.StartsWith("cpu ", StringComparison.Ordinal))
            {
                return null;
            }

            var values = line[4..].Split(' ', StringSplitOptions.RemoveEmptyEntries).Select(v => long.Parse(v, CultureInfo.InvariantCulture)).ToArray();
            // user nice system idle iowait irq softirq steal [guest guest_nice: already in user]
            var idle = values[3] + values[4];
            var busy = values[0] + values[1] + values[2] + values[5] + values[6] + (values.Length > 7 ? values[7] : 0);
            return (busy, busy + idle);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException)
        {
            return null;
        }
    }
}
