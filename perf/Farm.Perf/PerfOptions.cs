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

/// <summary>The peer single-queue measures after Farm.</summary>
internal enum PeerKind
{
    /// <summary>Raw SQLite insert+delete: the storage ceiling.</summary>
    Sqlite,

    /// <summary>A RabbitMQ broker under the same workload.</summary>
    RabbitMq,
}

/// <summary>
/// The load generator's command line. The defaults are the best configuration measured on the
/// reference machine (2 cores); see perf/README.md.
/// </summary>
internal sealed partial record PerfOptions
{
    public const string Usage = """
        usage: Farm.Perf single-queue [options]
               Farm.Perf topics [options]
               Farm.Perf failover [--kills 20] [--redirect] [--seed N] [--signal kill|stop] [--farm-connection CS] [--out FILE]
               Farm.Perf deep-backlog [options]
               Farm.Perf many-queues [options]
               Farm.Perf chain [options]
               Farm.Perf forwarding [options]
        single-queue:
          --connection CS     farm to drive (default: start a single node on a temporary data directory)
          --duration 20s      measured time (units ms, s, m), after the warm-up
          --warmup 20s        load before measuring, not counted (the node JITs and tiers up)
          --size 1024         message body bytes
          --senders 4         concurrent senders (each its own FarmSender; 2 in the sweeps and topics)
          --inflight 1        send calls in flight per sender
          --batch 50          messages per send call (one atomic batch)
          --receivers 4       concurrent receivers (2 in the sweeps and topics)
          --prefetch 500      receiver prefetch (credit kept on the stream)
          --receive-style receiver|processor
          --concurrency N     completes in flight per receiver (receiver; default: the prefetch) or
                              MaxConcurrentCalls (processor; default 128)
          --complete sdk|batch|none  sdk: FarmReceiver.CompleteMessageAsync per message (the figure to quote);
                              batch: one raw Settle call per received batch, bypassing the SDK (an experiment);
                              none: receive-and-delete, nothing settled (to profile against peek-lock)
          --peer sqlite|rabbitmq|none  the peer measured after Farm in the same run (default sqlite: the
                              storage ceiling; rabbitmq: a RabbitMQ broker at --peer-uri, see perf/run.sh)
          --peer-batch 100    rows per SQLite transaction in the storage peer
          --peer-lag 0        rows the storage peer keeps between a row's insert and its delete (a
                              backlog; 0: each transaction deletes the batch before it)
          --no-peer           skip the peer (--peer none)
          --peer-only         measure the peer alone (no farm; tuning the peer)
        single-queue --peer rabbitmq (same warm-up, window, body, drain and check as Farm):
          --peer-uri amqp://guest:guest@127.0.0.1:5672/
          --peer-queue-type classic|quorum  durable queue of that type (default classic)
          --peer-producers N  publishers, each its own connection; --peer-consumers N  consumers, likewise
                              (default: both measured, as many as Farm's --senders/--receivers and 2/2,
                              RabbitMQ's best in the tuning sweep; the faster counts as the peer)
          --peer-window N     publishes awaiting their confirm per producer (default 50)
          --peer-prefetch N   basic.qos per consumer (default 500)
          --peer-ack-every N  consumers ack with multiple=true every N deliveries (default 100)
          --rounds 1          Farm and then the peer this many times in turn, each round a fresh node and
                              queue; the round with the median farm/peer ratio is the result, every
                              round's figures go in the JSON's "rounds"
          --out FILE          JSON result (default perf/results/single-queue.json)
        topics (queue vs topic-1-sub, topic with 1,000 subscriptions, ordering on vs off; one run, one node):
          --connection CS     farm to drive (default: start a single node on a temporary data directory)
          --warmup 20s        shared warm-up first: queue, 1-subscription topic and filtered topic loaded at once
          --run-warmup 3s     load before each measured window, not counted
          --duration 20s      measured time of each figure's side; comparisons split it over --rounds windows
          --rounds 4          queue/topic and on/off take turns in this many rounds, in ABBA order
          --size 1024         message body bytes (every load)
          --senders, --inflight, --batch, --receivers, --prefetch, --concurrency
                              queue vs topic-1-sub: the single-queue load, same defaults (2, 1, 50, 2, 500, the prefetch)
          --subscriptions 1000  subscriptions ($Default rule) of the fan-out topic
          --fanout-rate 0     messages/s into it (0: as fast as --fanout-backlog lets, then a
                              second run paced at half the rate reached, one message a send,
                              for its latency, and a third at the target's 100,000 deliveries/s
                              with the same batches, which the target judges)
          --fanout-senders 1  --fanout-batch 20
          --fanout-backlog 100000  deliveries owed but not yet received above which its senders wait
          --fanout-clients 4  FarmClients its receivers (one per subscription) are spread over
          --fanout-prefetch 200  prefetch of each, also the most messages taken per receive
          --fanout-style receiver|processor  --fanout-concurrency N (default: the prefetch; 1 for processors)
          --ordering-subscriptions 64  --ordering-senders 8  --ordering-batch 20
                              the ordering topic: SQL-filtered subscriptions, concurrent senders, messages per send
          --only LIST         some of: queue-vs-topic,fanout,ordering (default: all)
          --out FILE          JSON result (default perf/results/topics.json)
        failover (starts its own 3-node farm; SIGKILLs a node --kills times under light load):
          --kills 20          nodes to kill, one after the other (restarted and rebalanced in between)
          --redirect          clients use EnableRedirect=true (default: forward through the gateways)
          --signal kill|stop  kill: SIGKILL (default); stop: SIGSTOP the owner, measure the takeover, then SIGCONT it
                              (writes perf/results/failover-stop.json)
          --seed N            seed of the random choice of node to kill (default: from the clock)
          --farm-connection CS  run the farm on PostgreSQL: CS names an existing, empty farm database
                              (perf/run.sh failover-postgres starts a throwaway server; writes failover-postgres.json)
          --out FILE          JSON result (default perf/results/failover.json, failover-redirect.json with --redirect)
        deep-backlog (starts its own 3-node farm on SQLite; see DeepBacklog/DeepBacklogScenario.cs):
          --messages 10000000 messages queued in the deep queue
          --shallow 200000    messages of the shallow queue whose drain rate is the peer
          --drain 1000000     messages drained off the deep queue for its rate
          --size 1024  --senders 4  --batch 100  --receivers 4  --prefetch 500
          --out FILE          JSON result (default perf/results/deep-backlog.json)
        many-queues (its own farm; a FarmProcessor per queue, paced single sends; see ManyQueues/ManyQueuesScenario.cs):
          --queues 15000      queues to create and load
          --rate-per-queue 1  messages/s sent to each queue, spread evenly over the second
          --nodes 1           1, or 3 (2 containers per node, the queues spread over them)
          --containers-per-node N  containers each node owns, each with its own commit loop
                              (default 1 on one node, 2 on three)
          --senders 4         sender clients, each covering a slice of the queues
          --clients 8         FarmClients the processors are spread over
          --create-concurrency 16  create calls in flight (after the first 200, made one by one)
          --restart           SIGKILL every node once the queues exist and start it again, so the
                              receivers' first use loads every queue from the store (a restart's storm)
          --warmup 30s  --duration 60s  --size 1024
          --out FILE          JSON result (default perf/results/many-queues.json)
        chain (its own node; a FarmProcessor per queue forwarding to the next; see Chain/ChainScenario.cs):
          --queues 15         queues in the chain
          --rates 25,75,125   messages/s injected into the first queue, one point each
          --concurrency 8     MaxConcurrentCalls of each queue's processor
          --forward with-send  how a handler forwards: with-send (args.SendMessageAndCompleteAsync:
                              the send and the completion in one transaction) or then-complete
                              (SendMessageAsync, then the processor's auto-complete)
          --warmup 20s        before the first point   --run-warmup 5s  before each later point
          --duration 30s      measured window of each point   --size 1024
          --out FILE          JSON result (default perf/results/chain.json)
        forwarding (its own farm; a queue's backlog drained through ForwardTo; see Forwarding/ForwardingScenario.cs):
          --nodes 3           3: source and target on one node, then a target in another node's container; 1: the first only
          --messages 200000   messages in the source before ForwardTo is set
          --rounds 1          drains of each path, alternating (the median round is the result)
          --size 1024  --senders 4  --batch 100  (the fill)
          --out FILE          JSON result (default perf/results/forwarding.json)
        """ + SweepUsage;

    /// <summary>The options each scenario takes.</summary>
    private static readonly HashSet<string> FailoverOptions = ["--kills", "--redirect", "--seed", "--signal", "--farm-connection", "--out"];

    private static readonly HashSet<string> DeepBacklogOptions = ["--messages", "--shallow", "--drain", "--size", "--senders", "--batch", "--receivers", "--prefetch", "--out"];

    private static readonly HashSet<string> ManyQueuesOptions = ["--queues", "--rate-per-queue", "--nodes", "--containers-per-node", "--senders", "--clients", "--create-concurrency", "--restart", "--warmup", "--duration", "--size", "--out"];

    private static readonly HashSet<string> ForwardingOptions = ["--nodes", "--messages", "--rounds", "--size", "--senders", "--batch", "--out"];

    private static readonly HashSet<string> ChainOptions = ["--queues", "--rates", "--concurrency", "--forward", "--warmup", "--run-warmup", "--duration", "--size", "--out"];

    private static readonly HashSet<string> SingleQueueOptions =
    [
        "--connection", "--duration", "--warmup", "--size", "--senders", "--inflight", "--batch", "--receivers", "--prefetch",
        "--receive-style", "--concurrency", "--complete", "--peer-batch", "--peer-lag", "--no-peer", "--out",
        "--peer", "--peer-only", "--peer-uri", "--peer-queue-type", "--peer-producers", "--peer-consumers", "--peer-window",
        "--peer-prefetch", "--peer-ack-every",
        "--rate", "--rounds",
    ];

    private static readonly HashSet<string> TopicsOptions =
    [
        "--connection", "--duration", "--warmup", "--run-warmup", "--rounds", "--size", "--senders", "--inflight", "--batch", "--receivers",
        "--prefetch", "--concurrency", "--subscriptions", "--fanout-rate", "--fanout-senders", "--fanout-batch", "--fanout-clients",
        "--fanout-prefetch", "--fanout-style", "--fanout-concurrency", "--fanout-backlog", "--ordering-subscriptions", "--ordering-senders", "--ordering-batch",
        "--only", "--out",
    ];

    /// <summary>The figures of the topics scenario, for --only.</summary>
    public static readonly IReadOnlyList<string> TopicsParts = ["queue-vs-topic", "fanout", "ordering"];

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

    /// <summary>chain: a handler completes what it forwards in the send's own transaction (true), or after it (false).</summary>
    public bool ForwardWithSend { get; init; } = true;

    /// <summary>--concurrency: a processor's MaxConcurrentCalls (the chain's handlers, the prefetch sweep), and a receiver's completes in flight when given.</summary>
    public int Concurrency { get; init; } = 128;

    /// <summary>True when --concurrency was given.</summary>
    public bool ConcurrencyGiven { get; init; }

    /// <summary>
    /// What the load's receivers use: a FarmReceiver completes up to its prefetch in flight unless
    /// --concurrency says otherwise, as a RabbitMQ consumer holds up to its prefetch unacknowledged;
    /// a processor runs --concurrency calls.
    /// </summary>
    public int ReceiverConcurrency => ReceiveStyle == ReceiveStyle.Receiver && !ConcurrencyGiven && Prefetch > 0 ? Prefetch : Concurrency;

    /// <summary>False: <c>--complete batch</c>, the raw batched-settlement experiment (receiver style only).</summary>
    public bool CompleteWithSdk { get; init; } = true;

    /// <summary><c>--complete none</c>: receive-and-delete, nothing to settle (to profile against peek-lock).</summary>
    public bool ReceiveAndDelete { get; init; }

    public int PeerBatch { get; init; } = 100;

    /// <summary>Rows the SQLite peer keeps between insert and delete beyond the batch before (a backlog).</summary>
    public int PeerLag { get; init; }

    public bool RunPeer { get; init; } = true;

    /// <summary>single-queue: which peer runs after Farm (when <see cref="RunPeer"/>).</summary>
    public PeerKind Peer { get; init; } = PeerKind.Sqlite;

    /// <summary>single-queue: skip Farm, measure the peer alone.</summary>
    public bool PeerOnly { get; init; }

    public Uri PeerUri { get; init; } = new("amqp://guest:guest@127.0.0.1:5672/");

    public string PeerQueueType { get; init; } = "classic";

    /// <summary>RabbitMQ producers and consumers; null: as many as Farm's senders and receivers.</summary>
    public int? PeerProducers { get; init; }

    public int? PeerConsumers { get; init; }

    // The RabbitMQ defaults are the best of a sweep on the reference machine (perf/README.md).
    public int PeerWindow { get; init; } = 50;

    public int PeerPrefetch { get; init; } = 500;

    public int PeerAckEvery { get; init; } = 100;

    public string? Out { get; init; }

    /// <summary>deep-backlog: messages in the deep queue, in the shallow one, and drained off the deep one.</summary>
    public long Messages { get; init; } = 10_000_000;

    public long Shallow { get; init; } = 200_000;

    public long Drain { get; init; } = 1_000_000;

    /// <summary>failover: how many nodes to kill.</summary>
    public int Kills { get; init; } = 20;

    /// <summary>failover: clients in redirect mode (EnableRedirect=true).</summary>
    public bool Redirect { get; init; }

    /// <summary>failover: seed of the choice of node to kill; null: from the clock.</summary>
    public int? Seed { get; init; }

    /// <summary>failover: a PostgreSQL farm database (existing, empty) the farm runs on; null: SQLite.</summary>
    public string? FarmConnection { get; init; }

    /// <summary>topics: load before each measured window (after the shared --warmup at the start).</summary>
    public TimeSpan RunWarmup { get; init; } = TimeSpan.FromSeconds(3);

    /// <summary>
    /// topics: rounds the two sides of a comparison take turns in (ABBA), splitting --duration between them;
    /// single-queue: Farm and then the peer this many times in turn (default 1), the median round reported.
    /// </summary>
    public int Rounds { get; init; } = 2;

    /// <summary>topics: subscriptions of the fan-out topic.</summary>
    public int Subscriptions { get; init; } = 1000;

    /// <summary>topics: messages per second into the fan-out topic (0: as fast as the backlog limit lets).</summary>
    public int FanoutRate { get; init; }

    public int FanoutSenders { get; init; } = 1;

    public int FanoutBatch { get; init; } = 20;

    /// <summary>topics: FarmClients the fan-out receivers are spread over.</summary>
    public int FanoutClients { get; init; } = 4;

    public int FanoutPrefetch { get; init; } = 200;

    public ReceiveStyle FanoutStyle { get; init; } = ReceiveStyle.Receiver;

    /// <summary>topics: completes in flight per fan-out receiver, or each processor's MaxConcurrentCalls (null: the prefetch, or 1 for a processor).</summary>
    public int? FanoutConcurrency { get; init; }

    /// <summary>topics: deliveries owed but not received above which fan-out senders wait.</summary>
    public int FanoutBacklog { get; init; } = 100_000;

    /// <summary>topics: subscriptions (each with a SQL filter) of the ordering topic.</summary>
    public int OrderingSubscriptions { get; init; } = 64;

    public int OrderingSenders { get; init; } = 8;

    public int OrderingBatch { get; init; } = 20;

    /// <summary>topics: which figures to run (default: all).</summary>
    public IReadOnlySet<string> Only { get; init; } = TopicsParts.ToHashSet();

    /// <summary>many-queues: queues created and loaded; chain: queues in the chain.</summary>
    public int Queues { get; init; } = 15_000;

    /// <summary>many-queues: messages per second to each queue.</summary>
    public double RatePerQueue { get; init; } = 1;

    /// <summary>many-queues: nodes of its own farm (1 or 3).</summary>
    public int Nodes { get; init; } = 1;

    /// <summary>many-queues: containers each node owns (each has its own commit loop); null: 1 on one node, 2 on three.</summary>
    public int? ContainersPerNode { get; init; }

    /// <summary>many-queues: SIGKILL and restart every node after the queues are created, so they are loaded from the store on first use.</summary>
    public bool Restart { get; init; }

    /// <summary>many-queues: FarmClients the per-queue processors are spread over.</summary>
    public int ReceiverClients { get; init; } = 8;

    /// <summary>many-queues: create calls in flight.</summary>
    public int CreateConcurrency { get; init; } = 16;

    /// <summary>chain: messages per second injected, one measured point each.</summary>
    public IReadOnlyList<double> Rates { get; init; } = [25, 75, 125];

    /// <summary>failover: "kill" (SIGKILL) or "stop" (SIGSTOP, then SIGCONT).</summary>
    public string Signal { get; init; } = "kill";

    /// <summary>Parses the arguments; throws <see cref="ArgumentException"/> naming what was wrong.</summary>
    public static PerfOptions Parse(IReadOnlyList<string> args)
    {
        if (args.Count == 0 || args[0].StartsWith('-'))
        {
            throw new ArgumentException("name a scenario first: single-queue, topics, failover or deep-backlog");
        }

        var options = new PerfOptions { Scenario = args[0] };
        var sweep = SweepScenarios.Contains(options.Scenario);
        if (!sweep && options.Scenario is not ("single-queue" or "failover" or "topics" or "deep-backlog" or "many-queues" or "chain" or "forwarding"))
        {
            throw new ArgumentException($"unknown scenario '{options.Scenario}'; the scenarios are: single-queue, topics, failover, deep-backlog, many-queues, chain, forwarding, {string.Join(", ", SweepScenarios)}");
        }
        if (options.Scenario == "topics")
        {
            // Four alternating windows a side (5 s each of the default 20 s): with two, the
            // queue/topic ratio of one build moved 0.87-1.09 from run to run (perf/README "Session 50").
            options = options with { Rounds = 4 };
        }
        if (options.Scenario == "deep-backlog")
        {
            // Its own defaults: a fill and drain that keep the node busy, not the single-queue's latency mix.
            options = options with { Senders = 4, Batch = 100, Receivers = 4 };
        }
        if (options.Scenario == "single-queue")
        {
            // Farm's best on the reference machine (perf/README.md, session 33): four of each
            // moved 8-27% more than two in seven comparisons of nine (about the same in the other
            // two), with sent = received (no backlog building). One round unless --rounds says.
            options = options with { Senders = 4, Receivers = 4, Rounds = 1 };
        }
        if (options.Scenario == "many-queues")
        {
            options = options with { Senders = 4, Warmup = TimeSpan.FromSeconds(30), Duration = TimeSpan.FromSeconds(60) };
        }
        if (options.Scenario == "chain")
        {
            options = options with { Queues = 15, Concurrency = 8, Warmup = TimeSpan.FromSeconds(20), RunWarmup = TimeSpan.FromSeconds(5), Duration = TimeSpan.FromSeconds(30) };
        }
        if (options.Scenario == "forwarding")
        {
            options = options with { Nodes = 3, Messages = 200_000, Senders = 4, Batch = 100, Rounds = 1 };
        }
        if (sweep)
        {
            options = WithSweepDefaults(options);
        }

        var allowed = options.Scenario switch
        {
            "failover" => FailoverOptions,
            "topics" => TopicsOptions,
            "deep-backlog" => DeepBacklogOptions,
            "many-queues" => ManyQueuesOptions,
            "chain" => ChainOptions,
            "forwarding" => ForwardingOptions,
            _ when sweep => SweepOptions,
            _ => SingleQueueOptions,
        };
        for (var i = 1; i < args.Count; i++)
        {
            var name = args[i];
            if (!allowed.Contains(name))
            {
                var owner = new[] { ("single-queue", SingleQueueOptions), ("topics", TopicsOptions), ("failover", FailoverOptions), ("deep-backlog", DeepBacklogOptions) }
                    .Where(o => o.Item2.Contains(name)).Select(o => o.Item1).ToList();
                throw new ArgumentException(owner.Count == 0
                    ? $"unknown option '{name}'"
                    : $"'{name}' is not an option of {options.Scenario} (it belongs to {string.Join(" and ", owner)})");
            }

            if (name == "--no-peer")
            {
                options = options with { RunPeer = false };
                continue;
            }

            if (name == "--peer-only")
            {
                options = options with { PeerOnly = true };
                continue;
            }

            if (name == "--redirect")
            {
                options = options with { Redirect = true };
                continue;
            }

            if (name == "--restart")
            {
                options = options with { Restart = true };
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
                "--concurrency" => options with { Concurrency = ParseInt(name, value, 1, 10_000), ConcurrencyGiven = true },
                "--forward" => options with
                {
                    ForwardWithSend = value switch
                    {
                        "with-send" => true,
                        "then-complete" => false,
                        _ => throw new ArgumentException($"--forward must be with-send or then-complete; got '{value}'"),
                    },
                },
                "--complete" => value == "none" ? options with { ReceiveAndDelete = true } : options with { CompleteWithSdk = ParseComplete(value) },
                "--peer-batch" => options with { PeerBatch = ParseInt(name, value, 1, 100_000) },
                "--peer-lag" => options with { PeerLag = ParseInt(name, value, 0, 10_000_000) },
                "--out" => options with { Out = value },
                "--farm-connection" => options with { FarmConnection = value },
                "--peer" => ParsePeer(options, value),
                "--peer-uri" => options with { PeerUri = ParseUri(name, value) },
                "--peer-queue-type" => options with { PeerQueueType = value is "classic" or "quorum" ? value : throw new ArgumentException($"--peer-queue-type must be classic or quorum; got '{value}'") },
                "--peer-producers" => options with { PeerProducers = ParseInt(name, value, 1, 1024) },
                "--peer-consumers" => options with { PeerConsumers = ParseInt(name, value, 1, 1024) },
                "--peer-window" => options with { PeerWindow = ParseInt(name, value, 1, 100_000) },
                "--peer-prefetch" => options with { PeerPrefetch = ParseInt(name, value, 1, ushort.MaxValue) },
                "--peer-ack-every" => options with { PeerAckEvery = ParseInt(name, value, 1, ushort.MaxValue) },
                "--messages" => options with { Messages = ParseInt(name, value, 3, int.MaxValue) },
                "--shallow" => options with { Shallow = ParseInt(name, value, 3, int.MaxValue) },
                "--drain" => options with { Drain = ParseInt(name, value, 1, int.MaxValue) },
                "--kills" => options with { Kills = ParseInt(name, value, 1, 1000) },
                "--seed" => options with { Seed = ParseInt(name, value, int.MinValue, int.MaxValue) },
                "--rounds" => options with { Rounds = ParseInt(name, value, 1, 100) },
                "--run-warmup" => options with { RunWarmup = ParseDuration(name, value, allowZero: true) },
                "--subscriptions" => options with { Subscriptions = ParseInt(name, value, 1, 5000) },
                "--fanout-rate" => options with { FanoutRate = ParseInt(name, value, 0, 1_000_000) },
                "--fanout-senders" => options with { FanoutSenders = ParseInt(name, value, 1, 1024) },
                "--fanout-batch" => options with { FanoutBatch = ParseInt(name, value, 1, 4500) },
                "--fanout-clients" => options with { FanoutClients = ParseInt(name, value, 1, 5000) },
                "--fanout-prefetch" => options with { FanoutPrefetch = ParseInt(name, value, 0, 100_000) },
                "--fanout-style" => options with { FanoutStyle = ParseStyle(value) },
                "--fanout-concurrency" => options with { FanoutConcurrency = ParseInt(name, value, 1, 10_000) },
                "--fanout-backlog" => options with { FanoutBacklog = ParseInt(name, value, 0, int.MaxValue) },
                "--ordering-subscriptions" => options with { OrderingSubscriptions = ParseInt(name, value, 1, 5000) },
                "--ordering-senders" => options with { OrderingSenders = ParseInt(name, value, 1, 1024) },
                "--ordering-batch" => options with { OrderingBatch = ParseInt(name, value, 1, 4500) },
                "--only" => options with { Only = ParseOnly(value) },
                "--queues" => options with { Queues = ParseInt(name, value, 1, 100_000) },
                "--rate-per-queue" => options with { RatePerQueue = ParseRate(name, value) },
                "--nodes" => options with { Nodes = value is "1" or "3" ? int.Parse(value, CultureInfo.InvariantCulture) : throw new ArgumentException($"--nodes must be 1 or 3; got '{value}'") },
                "--containers-per-node" => options with { ContainersPerNode = ParseInt(name, value, 1, 64) },
                "--clients" => options with { ReceiverClients = ParseInt(name, value, 1, 1000) },
                "--create-concurrency" => options with { CreateConcurrency = ParseInt(name, value, 1, 1000) },
                "--rates" => options with { Rates = [.. value.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(r => ParseRate(name, r))] },
                "--signal" => options with { Signal = value is "kill" or "stop" ? value : throw new ArgumentException($"--signal must be kill or stop; got '{value}'") },
                "--rate" => options with { Rate = ParseInt(name, value, 1, 10_000_000) },
                "--max-backlog" => options with { MaxBacklog = ParseInt(name, value, 0, int.MaxValue) },
                "--points" => options with { Points = ParsePoints(name, value) },
                _ => throw new ArgumentException($"unknown option '{name}'"),
            };
        }

        if (!options.CompleteWithSdk && options.ReceiveStyle == ReceiveStyle.Processor)
        {
            throw new ArgumentException("--complete batch works with --receive-style receiver only");
        }

        if (options.PeerAckEvery > options.PeerPrefetch)
        {
            // The consumer would wait for deliveries the broker holds back until it acks: a stall.
            throw new ArgumentException($"--peer-ack-every ({options.PeerAckEvery}) must not exceed --peer-prefetch ({options.PeerPrefetch})");
        }

        if (options.PeerOnly && !options.RunPeer)
        {
            throw new ArgumentException("--peer-only needs a peer");
        }

        return options;
    }

    /// <summary>A rate in messages per second, above 0 and at most 100,000.</summary>
    private static double ParseRate(string name, string value)
        => double.TryParse(value, NumberStyles.Float, CultureInfo.InvariantCulture, out var rate) && rate > 0 && rate <= 100_000
            ? rate
            : throw new ArgumentException($"{name} takes rates in messages per second above 0 (at most 100000); got '{value}'");

    private static PerfOptions ParsePeer(PerfOptions options, string value) => value switch
    {
        "sqlite" => options with { Peer = PeerKind.Sqlite, RunPeer = true },
        "rabbitmq" => options with { Peer = PeerKind.RabbitMq, RunPeer = true },
        "none" => options with { RunPeer = false },
        _ => throw new ArgumentException($"--peer must be sqlite, rabbitmq or none; got '{value}'"),
    };

    private static Uri ParseUri(string name, string value)
        => Uri.TryCreate(value, UriKind.Absolute, out var uri) && uri.Scheme is "amqp" or "amqps"
            ? uri
            : throw new ArgumentException($"{name} must be an amqp:// URI; got '{value}'");

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

    private static IReadOnlySet<string> ParseOnly(string value)
    {
        var parts = value.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToHashSet(StringComparer.Ordinal);
        var unknown = parts.Except(TopicsParts).ToList();
        if (parts.Count == 0 || unknown.Count > 0)
        {
            throw new ArgumentException($"--only takes a comma-separated list of {string.Join(", ", TopicsParts)}; got '{value}'");
        }

        return parts;
    }

    private static bool ParseComplete(string value) => value switch
    {
        "sdk" => true,
        "batch" => false,
        _ => throw new ArgumentException($"--complete must be sdk, batch or none; got '{value}'"),
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
