using System.Globalization;

namespace Farm.Perf;

/// <summary>How receivers take messages off the queue.</summary>
internal enum ReceiveStyle
{
    /// <summary>FarmReceiver loops: receive up to a batch from the prefetch buffer, complete each message.</summary>
    Receiver,

    /// <summary>FarmProcessor with MaxConcurrentCalls = --concurrency and auto-complete.</summary>
    Processor,
}

/// <summary>
/// The load generator's command line. The defaults are the best configuration measured on the
/// reference machine (2 cores); see perf/README.md.
/// </summary>
internal sealed record PerfOptions
{
    public const string Usage = """
        usage: Farm.Perf single-queue [options]
               Farm.Perf failover [--kills 20] [--redirect] [--seed N] [--out FILE]
        single-queue:
          --connection CS     farm to drive (default: start a single node on a temporary data directory)
          --duration 20s      measured time (units ms, s, m), after the warm-up
          --warmup 20s        load before measuring, not counted (the node JITs and tiers up)
          --size 1024         message body bytes
          --senders 2         concurrent senders (each its own FarmSender)
          --inflight 1        send calls in flight per sender
          --batch 50          messages per send call (one atomic batch)
          --receivers 2       concurrent receivers
          --prefetch 500      receiver prefetch (credit kept on the stream)
          --receive-style receiver|processor
          --concurrency 128   completes in flight per receiver (receiver) or MaxConcurrentCalls (processor)
          --complete sdk|batch  sdk: FarmReceiver.CompleteMessageAsync per message (the figure to quote);
                              batch: one raw Settle call per received batch, bypassing the SDK (an experiment)
          --peer-batch 100    rows per SQLite transaction in the storage peer
          --no-peer           skip the storage peer
          --out FILE          JSON result (default perf/results/single-queue.json)
        failover (starts its own 3-node farm; SIGKILLs a node --kills times under light load):
          --kills 20          nodes to kill, one after the other (restarted and rebalanced in between)
          --redirect          clients use EnableRedirect=true (default: forward through the gateways)
          --seed N            seed of the random choice of node to kill (default: from the clock)
          --out FILE          JSON result (default perf/results/failover.json, failover-redirect.json with --redirect)
        """;

    /// <summary>The options of the failover scenario; every other option belongs to single-queue.</summary>
    private static readonly HashSet<string> FailoverOptions = ["--kills", "--redirect", "--seed", "--out"];

    public string Scenario { get; init; } = "single-queue";

    public string? Connection { get; init; }

    public TimeSpan Duration { get; init; } = TimeSpan.FromSeconds(20);

    public TimeSpan Warmup { get; init; } = TimeSpan.FromSeconds(20);

    public int Size { get; init; } = 1024;

    public int Senders { get; init; } = 2;

    public int InFlight { get; init; } = 1;

    public int Batch { get; init; } = 50;

    public int Receivers { get; init; } = 2;

    public int Prefetch { get; init; } = 500;

    public ReceiveStyle ReceiveStyle { get; init; } = ReceiveStyle.Receiver;

    public int Concurrency { get; init; } = 128;

    /// <summary>False: <c>--complete batch</c>, the raw batched-settlement experiment (receiver style only).</summary>
    public bool CompleteWithSdk { get; init; } = true;

    public int PeerBatch { get; init; } = 100;

    public bool RunPeer { get; init; } = true;

    public string? Out { get; init; }

    /// <summary>failover: how many nodes to kill.</summary>
    public int Kills { get; init; } = 20;

    /// <summary>failover: clients in redirect mode (EnableRedirect=true).</summary>
    public bool Redirect { get; init; }

    /// <summary>failover: seed of the choice of node to kill; null: from the clock.</summary>
    public int? Seed { get; init; }

    /// <summary>Parses the arguments; throws <see cref="ArgumentException"/> naming what was wrong.</summary>
    public static PerfOptions Parse(IReadOnlyList<string> args)
    {
        if (args.Count == 0 || args[0].StartsWith('-'))
        {
            throw new ArgumentException("name a scenario first: single-queue or failover");
        }

        var options = new PerfOptions { Scenario = args[0] };
        if (options.Scenario is not ("single-queue" or "failover"))
        {
            throw new ArgumentException($"unknown scenario '{options.Scenario}'; the scenarios are: single-queue, failover");
        }

        var failover = options.Scenario == "failover";
        for (var i = 1; i < args.Count; i++)
        {
            var name = args[i];
            if (failover && !FailoverOptions.Contains(name))
            {
                throw new ArgumentException($"'{name}' is not an option of failover (it takes --kills, --redirect, --seed, --out)");
            }

            if (!failover && FailoverOptions.Contains(name) && name != "--out")
            {
                throw new ArgumentException($"{name} belongs to the failover scenario");
            }

            if (name == "--no-peer")
            {
                options = options with { RunPeer = false };
                continue;
            }

            if (name == "--redirect")
            {
                options = options with { Redirect = true };
                continue;
            }

            if (i + 1 >= args.Count)
            {
                throw new ArgumentException($"{name} needs a value");
            }

            var value = args[++i];
            options = name switch
            {
                "--connection" => options with { Connection = value },
                "--duration" => options with { Duration = ParseDuration(name, value) },
                "--warmup" => options with { Warmup = ParseDuration(name, value, allowZero: true) },
                "--size" => options with { Size = ParseInt(name, value, 0, 200 * 1024) },
                "--senders" => options with { Senders = ParseInt(name, value, 0, 1024) },
                "--inflight" => options with { InFlight = ParseInt(name, value, 1, 1024) },
                "--batch" => options with { Batch = ParseInt(name, value, 1, 4500) },
                "--receivers" => options with { Receivers = ParseInt(name, value, 1, 1024) },
                "--prefetch" => options with { Prefetch = ParseInt(name, value, 0, 100_000) },
                "--receive-style" => options with { ReceiveStyle = ParseStyle(value) },
                "--concurrency" => options with { Concurrency = ParseInt(name, value, 1, 10_000) },
                "--complete" => options with { CompleteWithSdk = ParseComplete(value) },
                "--peer-batch" => options with { PeerBatch = ParseInt(name, value, 1, 100_000) },
                "--out" => options with { Out = value },
                "--kills" => options with { Kills = ParseInt(name, value, 1, 1000) },
                "--seed" => options with { Seed = ParseInt(name, value, int.MinValue, int.MaxValue) },
                _ => throw new ArgumentException($"unknown option '{name}'"),
            };
        }

        if (!options.CompleteWithSdk && options.ReceiveStyle == ReceiveStyle.Processor)
        {
            throw new ArgumentException("--complete batch works with --receive-style receiver only");
        }

        return options;
    }

    private static int ParseInt(string name, string value, int min, int max)
    {
        if (!int.TryParse(value, NumberStyles.Integer, CultureInfo.InvariantCulture, out var result) || result < min || result > max)
        {
            throw new ArgumentException($"{name} must be a whole number from {min} to {max}; got '{value}'");
        }

        return result;
    }

    private static ReceiveStyle ParseStyle(string value) => value switch
    {
        "receiver" => ReceiveStyle.Receiver,
        "processor" => ReceiveStyle.Processor,
        _ => throw new ArgumentException($"--receive-style must be receiver or processor; got '{value}'"),
    };

    private static bool ParseComplete(string value) => value switch
    {
        "sdk" => true,
        "batch" => false,
        _ => throw new ArgumentException($"--complete must be sdk or batch; got '{value}'"),
    };

    /// <summary>"20s", "500ms", "2m", or plain seconds.</summary>
    private static TimeSpan ParseDuration(string name, string value, bool allowZero = false)
    {
        var (number, unit) = value switch
        {
            _ when value.EndsWith("ms", StringComparison.Ordinal) => (value[..^2], 0.001),
            _ when value.EndsWith('s') => (value[..^1], 1.0),
            _ when value.EndsWith('m') => (value[..^1], 60.0),
            _ => (value, 1.0),
        };
        if (!double.TryParse(number, NumberStyles.Float, CultureInfo.InvariantCulture, out var amount)
            || amount < 0 || (amount == 0 && !allowZero) || amount * unit > 24 * 3600)
        {
            throw new ArgumentException($"{name} must be a duration such as 20s, 500ms or 2m; got '{value}'");
        }

        return TimeSpan.FromSeconds(amount * unit);
    }
}
