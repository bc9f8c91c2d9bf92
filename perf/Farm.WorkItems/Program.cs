using System.Globalization;
using Microsoft.Diagnostics.Tracing.Etlx;

// Farm.WorkItems TRACE.nettrace [FRAMES] [TOP]
// Counts the thread-pool work items a process queued (FrameworkEventSource's ThreadPoolEnqueueWork
// events, with the stack EventPipe took for each), grouped by the first FRAMES frames above the
// thread pool's own: which code makes a process hop threads, and how often.
if (args.Length == 0 || !File.Exists(args[0]))
{
    Console.Error.WriteLine("usage: Farm.WorkItems TRACE.nettrace [FRAMES (default 4)] [TOP (default 25)]");
    return 2;
}

var frames = args.Length > 1 ? int.Parse(args[1], CultureInfo.InvariantCulture) : 4;
var top = args.Length > 2 ? int.Parse(args[2], CultureInfo.InvariantCulture) : 25;
using var log = new TraceLog(TraceLog.CreateFromEventPipeDataFile(args[0]));
var bySite = new Dictionary<string, int>();
var total = 0;
foreach (var e in log.Events)
{
    if (e.EventName != "ThreadPoolEnqueueWork")
    {
        continue;
    }

    total++;
    var stack = new List<string>();
    for (var frame = e.CallStack(); frame is not null && stack.Count < 64; frame = frame.Caller)
    {
        var method = frame.CodeAddress.FullMethodName;
        // The thread pool's own frames and the event's say nothing about who queued the item.
        if (stack.Count == 0 && (string.IsNullOrEmpty(method) || method.Contains("ThreadPool", StringComparison.Ordinal) || method.Contains("Diagnostics.Tracing", StringComparison.Ordinal)))
        {
            continue;
        }
        stack.Add(string.IsNullOrEmpty(method) ? $"?{frame.CodeAddress.ModuleName}" : $"{frame.CodeAddress.ModuleName}!{method}");
    }

    var site = string.Join("\n      <- ", stack.Take(frames));
    bySite[site] = bySite.GetValueOrDefault(site) + 1;
}

Console.WriteLine($"{total} work items queued");
foreach (var (site, count) in bySite.OrderByDescending(p => p.Value).Take(top))
{
    Console.WriteLine($"{count,8} {100.0 * count / Math.Max(1, total),5:F1}%  {site}");
}
return 0;
