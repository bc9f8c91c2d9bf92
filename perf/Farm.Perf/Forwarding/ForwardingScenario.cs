using System.Diagnostics;
using System.Globalization;
using Farm.Client;

namespace Farm.Perf.Forwarding;

/// <summary>
/// Auto-forwarding measured: how fast a queue's backlog drains through ForwardTo, and what it costs
/// the nodes a message. Its own farm (--nodes 1, or 3 with a container on each node). Each round
/// fills a source queue with --messages 1 KB messages, sets ForwardTo to an empty target and times
/// the drain until the target holds every message (and the source none); with three nodes a second
/// pair, whose target lives in a container of another node, drains after it (the forwarder's sends
/// cross the loopback). Each path drains 50,000 messages unmeasured first (the JIT). The target
/// must end with exactly --messages: a message stored twice fails the run. No published figure to compare with: it tracks forwarding's own cost (its records).
/// </summary>
internal sealed class ForwardingScenario(PerfOptions options)
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;
    private static readonly TimeSpan DrainTimeout = TimeSpan.FromMinutes(5);

    /// <summary>Messages of each path's warm-up drain (round 0, not reported).</summary>
    private const long WarmupMessages = 50_000;

    public async Task<ForwardingReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        await using var farm = await LocalFarm.StartAsync(options.Nodes, cancellationToken).ConfigureAwait(false);
        var connection = farm.ConnectionString(redirect: false);
        using var admin = new FarmAdministrationClient(connection);
        await using var client = new FarmClient(connection);

        var containers = await ContainersByOwnerAsync(farm, admin, cancellationToken).ConfigureAwait(false);
        var first = containers[0];
        var paths = new List<(string Name, long SourceContainer, long TargetContainer)> { ("same-node", first.Container, first.Container) };
        if (containers.Count > 1)
        {
            paths.Add(("across-nodes", first.Container, containers[1].Container));
        }

        // A short drain of each path first, unmeasured: every node's code is JIT-compiled and tiered
        // up by then (a target node idle until its path's turn spent a fifth of its samples in the JIT).
        foreach (var (name, sourceContainer, targetContainer) in paths)
        {
            await DrainOnceAsync(farm, admin, client, name, 0, sourceContainer, targetContainer, WarmupMessages, cancellationToken).ConfigureAwait(false);
        }

        var rounds = new List<ForwardingDrain>();
        for (var round = 1; round <= options.Rounds; round++)
        {
            foreach (var (name, sourceContainer, targetContainer) in paths)
            {
                var drain = await DrainOnceAsync(farm, admin, client, name, round, sourceContainer, targetContainer, options.Messages, cancellationToken).ConfigureAwait(false);
                Console.Error.WriteLine(string.Create(Inv,
                    $"perf: forwarding: {name} round {round}: {drain.Messages} messages in {drain.Seconds:0.00} s, {drain.MsgsPerSec:0} msg/s; node CPU {drain.NodeUsPerMessage:0.0} us a message ({string.Join(", ", drain.NodeCores.Select(n => $"node {n.Key} {n.Value:0.00} cores"))})"));
                rounds.Add(drain);
            }
        }

        var figures = paths.Select(p => Median(p.Name, rounds.Where(r => r.Path == p.Name).ToList())).ToList();
        return new ForwardingReport("forwarding", command, MachineInfo.Current(), options.Nodes, options.Messages, options.Size, options.Batch, figures, rounds);
    }

    /// <summary>One drain: fill a fresh source, forward it to a fresh target, time until the target holds every message.</summary>
    private async Task<ForwardingDrain> DrainOnceAsync(
        LocalFarm farm, FarmAdministrationClient admin, FarmClient client, string path, int round, long sourceContainer, long targetContainer, long messages, CancellationToken cancellationToken)
    {
        var source = $"fwd-{path}-{round}-source";
        var target = $"fwd-{path}-{round}-target";
        // Room for the whole backlog: the default 1 GB holds it too, but --messages may be raised.
        var megabytes = (int)Math.Max(1024, messages * (options.Size + 512) / (1024 * 1024) * 2);
        await admin.CreateQueueAsync(new CreateQueueOptions(target) { ContainerId = targetContainer, MaxSizeInMegabytes = megabytes }, cancellationToken).ConfigureAwait(false);
        var properties = await admin.CreateQueueAsync(new CreateQueueOptions(source) { ContainerId = sourceContainer, MaxSizeInMegabytes = megabytes }, cancellationToken).ConfigureAwait(false);
        var fill = Stopwatch.StartNew();
        await Load.QueueFill.FillAsync(client, source, messages, options, cancellationToken).ConfigureAwait(false);
        Console.Error.WriteLine(string.Create(Inv, $"perf: forwarding: {source} filled with {messages} messages in {fill.Elapsed.TotalSeconds:0.0} s; forwarding it to {target}"));

        var meters = farm.NodeIds.ToDictionary(id => id, id => new CpuMeter(farm.Node(id).ProcessId));
        var before = meters.ToDictionary(m => m.Key, m => m.Value.Take());
        var clock = Stopwatch.StartNew();
        properties.ForwardTo = target;
        await admin.UpdateQueueAsync(properties, cancellationToken).ConfigureAwait(false);

        long held = 0;
        while (true)
        {
            var counts = await admin.GetQueueRuntimePropertiesAsync(target, cancellationToken).ConfigureAwait(false);
            held = counts.TotalMessageCount;
            if (held >= messages)
            {
                break;
            }
            if (clock.Elapsed > DrainTimeout)
            {
                throw new TimeoutException($"{target} held {held} of {messages} messages after {DrainTimeout.TotalMinutes:0} minutes of forwarding");
            }
            // Each poll is a management call through the nodes: often enough to time the drain to 1%, not so often it shows in their CPU.
            await Task.Delay(100, cancellationToken).ConfigureAwait(false);
        }
        var seconds = clock.Elapsed.TotalSeconds;
        var cores = meters.ToDictionary(m => m.Key, m => CpuMeter.Between(before[m.Key], m.Value.Take()).NodeCores ?? 0);

        // Exactly once: the target holds each message once and the source is empty. A forward that
        // stored a message twice shows here once the source has drained.
        var left = (await admin.GetQueueRuntimePropertiesAsync(source, cancellationToken).ConfigureAwait(false)).TotalMessageCount;
        held = (await admin.GetQueueRuntimePropertiesAsync(target, cancellationToken).ConfigureAwait(false)).TotalMessageCount;
        if (held != messages || left != 0)
        {
            throw new InvalidOperationException($"forwarding {source} to {target}: the target holds {held} messages and the source {left}, for {messages} sent");
        }

        await admin.DeleteQueueAsync(source, cancellationToken).ConfigureAwait(false);
        await admin.DeleteQueueAsync(target, cancellationToken).ConfigureAwait(false);
        var nodeSeconds = cores.Values.Sum() * seconds;
        return new ForwardingDrain(
            path, round, messages, Math.Round(seconds, 2), Math.Round(messages / seconds),
            Math.Round(nodeSeconds / messages * 1e6, 1), cores);
    }

    /// <summary>
    /// One container per node, each owned by its node, in node order: the farm's first container
    /// on one node; on three, two more are created and the farm balances them one a node.
    /// </summary>
    private static async Task<List<(long Node, long Container)>> ContainersByOwnerAsync(LocalFarm farm, FarmAdministrationClient admin, CancellationToken cancellationToken)
    {
        var nodes = farm.NodeIds;
        for (var i = (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false)).Count; i < nodes.Count; i++)
        {
            await admin.CreateContainerAsync(cancellationToken).ConfigureAwait(false);
        }

        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < TimeSpan.FromMinutes(2))
        {
            var owned = (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false))
                .Where(c => c.OwnerNode is not null)
                .GroupBy(c => c.OwnerNode!.Value)
                .ToDictionary(g => g.Key, g => g.First().Id);
            if (nodes.All(owned.ContainsKey))
            {
                return [.. nodes.Select(n => (n, owned[n]))];
            }
            await Task.Delay(200, cancellationToken).ConfigureAwait(false);
        }
        throw new TimeoutException($"the {nodes.Count}-node farm did not give each node a container within 2 minutes");
    }

    /// <summary>The round with the median rate stands for the path.</summary>
    private static ForwardingDrain Median(string path, List<ForwardingDrain> drains) =>
        drains.OrderBy(d => d.MsgsPerSec).ElementAt(drains.Count / 2) with { Path = path };
}

/// <summary>perf/results/forwarding.json.</summary>
internal sealed record ForwardingReport(
    string Scenario, string Command, MachineInfo Machine, int Nodes, long Messages, int MessageBytes, int SendBatch,
    IReadOnlyList<ForwardingDrain> Farm, IReadOnlyList<ForwardingDrain> Rounds);

/// <param name="Path">same-node: source and target in one container; across-nodes: the target in another node's container.</param>
/// <param name="NodeUsPerMessage">CPU of every node together during the drain, per message forwarded.</param>
/// <param name="NodeCores">Each node's CPU during the drain, in cores.</param>
internal sealed record ForwardingDrain(
    string Path, int Round, long Messages, double Seconds, double MsgsPerSec, double NodeUsPerMessage, IReadOnlyDictionary<long, double> NodeCores);
