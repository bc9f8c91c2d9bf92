using System.Globalization;

namespace Farm.Perf;

/// <summary>
/// The sweeps (Sweeps/): settlement, batch-sizes, prefetch, concurrency, latency, routing. Each
/// measures several configurations ("points") on one farm started once, each point on a fresh
/// queue after a short warm-up of its own.
/// </summary>
internal sealed partial record PerfOptions
{
    private const string SweepUsage = """

        sweeps (one node started once, or a 3-node farm for routing; each point a fresh queue; see perf/README.md):
               Farm.Perf settlement|batch-sizes|prefetch|concurrency|latency|routing [options]
          --warmup 20s        warm-up at the start, per load compared, not counted (the node's JIT)
          --run-warmup 3s     load before each point's window, not counted
          --duration 10s      each point's measured window
          --size --senders --inflight --batch --receivers --prefetch --concurrency
                              the single-queue load (2, 1, 50, 2, 500, 128); a sweep varies one of them
          --points LIST       the values swept: batch-sizes messages per send (1,10,100,900), prefetch
                              multiples of --concurrency (0,1,3,10,30), concurrency senders = receivers (1,2,4,8)
          --max-backlog 10000 messages sent but not received above which senders wait (0: none)
          --rounds 3          settlement: receive-and-delete and batched peek-lock take turns in this many
                              rounds (AB, BA, AB...; the first also runs one complete at a time), each point
                              on a fresh queue; the ratio is the median of the rounds' ratios
          --rate N            latency: pace the senders to N msg/s instead of half the measured maximum
          --connection CS     farm to drive (not routing, which starts its own 3 nodes)
          --out FILE          JSON result (default perf/results/<scenario>.json)
        """;

    /// <summary>The sweep scenarios, each writing perf/results/&lt;name&gt;.json.</summary>
    public static readonly IReadOnlySet<string> SweepScenarios = new HashSet<string>(StringComparer.Ordinal)
    {
        "settlement", "batch-sizes", "prefetch", "concurrency", "latency", "routing",
    };

    private static readonly HashSet<string> SweepOptions =
    [
        "--connection", "--duration", "--warmup", "--run-warmup", "--size", "--senders", "--inflight", "--batch", "--receivers",
        "--prefetch", "--concurrency", "--receive-style", "--points", "--max-backlog", "--rate", "--rounds", "--out",
    ];

    /// <summary>Messages per second over all senders (single-queue, latency); 0: as fast as the farm acknowledges.</summary>
    public int Rate { get; init; }

    /// <summary>Sweeps: messages sent but not yet received above which senders wait; 0: no limit.</summary>
    public long MaxBacklog { get; init; } = 10_000;

    /// <summary>Sweeps: the values swept (null: the scenario's own).</summary>
    public IReadOnlyList<int>? Points { get; init; }

    /// <summary>
    /// A sweep measures several points in one run: shorter windows than single-queue's, so a
    /// scenario stays within about 3 minutes on 2 cores.
    /// </summary>
    private static PerfOptions WithSweepDefaults(PerfOptions options) => options with { Duration = TimeSpan.FromSeconds(10), Rounds = 3 };

    private static int[] ParsePoints(string name, string value)
    {
        var parts = value.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        var points = new int[parts.Length];
        for (var i = 0; i < parts.Length; i++)
        {
            if (!int.TryParse(parts[i], NumberStyles.Integer, CultureInfo.InvariantCulture, out points[i]) || points[i] < 0 || points[i] > 100_000)
            {
                throw new ArgumentException($"{name} takes a comma-separated list of whole numbers from 0 to 100000; got '{value}'");
            }
        }

        return parts.Length > 0 ? points : throw new ArgumentException($"{name} needs at least one value");
    }
}
