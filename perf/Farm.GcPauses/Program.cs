using System.Globalization;
using Microsoft.Diagnostics.Tracing;
using Microsoft.Diagnostics.Tracing.Analysis;

// Usage: dotnet run --project perf/Farm.GcPauses -- TRACE.nettrace [--each]
// The trace: dotnet-trace collect -p PID --clrevents gc --clreventlevel informational --duration 00:00:00:30
// Prints, per process and generation, how many collections ran and how long they paused the
// process (TraceEvent's GC analysis: suspension to restart); --each lists every gen2 collection
// and every pause over 50 ms.
if (args.Length is < 1 or > 2 || (args.Length == 2 && args[1] != "--each") || !File.Exists(args[0]))
{
    Console.Error.WriteLine("usage: Farm.GcPauses TRACE.nettrace [--each]   (a dotnet-trace file with --clrevents gc)");
    return 2;
}
var each = args.Length == 2;
var inv = CultureInfo.InvariantCulture;
using var source = new EventPipeEventSource(args[0]);
source.NeedLoadedDotNetRuntimes();
try
{
    source.Process();
}
catch (FormatException e)
{
    // A process that exits while traced leaves the file cut short: what was read still counts.
    Console.Error.WriteLine($"{args[0]}: the trace ends early ({e.Message}); the collections before that follow");
}
var found = false;
foreach (var process in source.Processes())
{
    if (process.LoadedDotNetRuntime()?.GC?.GCs is not { Count: > 0 } collections)
    {
        continue;
    }
    found = true;
    var traced = TimeSpan.FromMilliseconds(collections[^1].StartRelativeMSec - collections[0].StartRelativeMSec);
    var paused = collections.Sum(c => c.PauseDurationMSec);
    Console.WriteLine(string.Create(inv,
        $"process {process.ProcessID}: {collections.Count} collections over {traced.TotalSeconds:0.0} s, paused {paused:0} ms in all"));
    foreach (var generation in collections.GroupBy(c => c.Generation).OrderBy(g => g.Key))
    {
        var pauses = generation.Select(c => c.PauseDurationMSec).Order().ToList();
        var kinds = string.Join(", ", generation.GroupBy(c => c.Type).Select(k => $"{k.Key} {k.Count()}"));
        Console.WriteLine(string.Create(inv,
            $"  gen{generation.Key}: {pauses.Count}, pause mean {pauses.Average():0.0} ms, p50 {pauses[pauses.Count / 2]:0.0}, max {pauses[^1]:0.0} ({kinds})"));
    }
    if (each)
    {
        foreach (var c in collections.Where(c => c.Generation == 2 || c.PauseDurationMSec > 50))
        {
            Console.WriteLine(string.Create(inv,
                $"    #{c.Number} gen{c.Generation} {c.Type} ({c.Reason}): paused {c.PauseDurationMSec:0.0} ms, heap after {c.HeapSizeAfterMB:0} MB, promoted {c.PromotedMB:0} MB"));
        }
    }
}
if (!found)
{
    Console.Error.WriteLine($"{args[0]}: no GC events (was it collected with --clrevents gc?)");
    return 1;
}
return 0;
