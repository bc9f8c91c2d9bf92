using System.Globalization;
using System.Text.Json;
using System.Text.Json.Serialization;
using Farm.Perf;
using Farm.Perf.SingleQueue;

// The load generator: `dotnet run -c Release --project perf/Farm.Perf -- single-queue [options]`.
// Runs the scenario against a farm (its own single node unless --connection is given), then the
// storage peer, prints one summary line and writes the JSON result. Exits 1 when the run lost,
// duplicated or failed to deliver a message, 2 on bad arguments.
PerfOptions options;
try
{
    options = PerfOptions.Parse(args);
}
catch (ArgumentException e)
{
    Console.Error.WriteLine($"perf: {e.Message}");
    Console.Error.WriteLine(PerfOptions.Usage);
    return 2;
}

using var cancel = new CancellationTokenSource();
Console.CancelKeyPress += (_, e) =>
{
    e.Cancel = true;
    cancel.Cancel();
};

FarmFigures farm;
LocalNode? node = null;
try
{
    var connection = options.Connection;
    if (connection is null)
    {
        node = await LocalNode.StartAsync(cancel.Token);
        connection = node.ConnectionString;
        Console.Error.WriteLine($"perf: started a single node (pid {node.ProcessId}) at {node.Address}");
    }

    farm = await new SingleQueueScenario(options, connection, externalFarm: options.Connection is not null).RunAsync(cancel.Token);
}
catch (Exception e) when (e is InvalidOperationException or TimeoutException or Farm.Client.FarmException or OperationCanceledException)
{
    Console.Error.WriteLine($"perf: the run failed: {e.Message}");
    return 1;
}
finally
{
    if (node is not null)
    {
        await node.DisposeAsync();
    }
}

PeerFigures? peer = null;
if (options.RunPeer)
{
    Console.Error.WriteLine($"perf: storage peer {SqlitePeer.Name}, batches of {options.PeerBatch}, {options.Duration.TotalSeconds:0.#} s");
    peer = SqlitePeer.Run(options.PeerBatch, options.Size, SqlitePeer.Warmup, options.Duration);
}

var ratio = peer is { MsgsPerSec: > 0 } ? Math.Round(farm.MsgsPerSec / peer.MsgsPerSec, 3) : (double?)null;
var report = new PerfReport(
    options.Scenario,
    farm,
    peer,
    ratio,
    MachineInfo.Current(),
    DateTimeOffset.UtcNow,
    "dotnet run -c Release --project perf/Farm.Perf -- " + string.Join(' ', args));

var json = JsonSerializer.Serialize(report, new JsonSerializerOptions
{
    PropertyNamingPolicy = JsonNamingPolicy.SnakeCaseLower,
    WriteIndented = true,
    // Names such as "raw-sqlite-insert+delete" stay readable; the file is not embedded in HTML.
    Encoder = System.Text.Encodings.Web.JavaScriptEncoder.UnsafeRelaxedJsonEscaping,
    DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
});
var output = options.Out ?? DefaultOutput(options.Scenario);
Directory.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(output))!);
await File.WriteAllTextAsync(output, json + Environment.NewLine);

var inv = CultureInfo.InvariantCulture;
var peerSummary = peer is null ? "no peer" : string.Create(inv, $"peer {peer.Name} {peer.MsgsPerSec:0} rows/s, ratio {ratio:0.00}");
Console.WriteLine(string.Create(inv,
    $"single-queue: farm {farm.MsgsPerSec:0} msg/s received ({farm.SentPerSec:0} sent), p50 {farm.P50Ms:0.0} ms, p99 {farm.P99Ms:0.0} ms over {farm.DurationS:0.#} s; {peerSummary}; {farm.Verification.Acknowledged} sent, {farm.Verification.ReceivedUnique} received -> {output}"));

if (!farm.Verification.Passed)
{
    Console.Error.WriteLine();
    Console.Error.WriteLine("perf: !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    Console.Error.WriteLine("perf: THE RUN FAILED ITS DELIVERY CHECK: the figures above do not count.");
    foreach (var problem in farm.Verification.Problems)
    {
        Console.Error.WriteLine($"perf:   - {problem}");
    }

    Console.Error.WriteLine("perf: !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    return 1;
}

return 0;

// perf/results/<scenario>.json under the repository the tool was built from, else the current directory.
static string DefaultOutput(string scenario)
{
    var root = typeof(PerfOptions).Assembly.GetCustomAttributes(typeof(System.Reflection.AssemblyMetadataAttribute), false)
        .OfType<System.Reflection.AssemblyMetadataAttribute>()
        .FirstOrDefault(a => a.Key == "RepositoryRoot")?.Value;
    var directory = root is not null && Directory.Exists(root) ? Path.Combine(root, "perf", "results") : Path.Combine("perf", "results");
    return Path.Combine(directory, scenario + ".json");
}
