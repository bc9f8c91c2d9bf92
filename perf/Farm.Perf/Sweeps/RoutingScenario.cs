using System.Diagnostics;
using Farm.Client;
using Farm.Perf.Failover;

namespace Farm.Perf.Sweeps;

/// <summary>
/// Forward against redirect: a 3-node farm, a queue in a container owned by node 2, and the
/// single-queue load from clients that know only node 1's gateway. Forward: node 1 proxies every
/// call to node 2. Redirect (EnableRedirect=true): the client asks node 1 once who owns the queue,
/// then calls node 2 directly. Each mode on a fresh queue in that container, after a shared
/// warm-up that runs both.
/// </summary>
internal sealed class RoutingScenario(PerfOptions options)
{
    private const long Owner = 2;
    private const long Gateway = 1;
    private static readonly TimeSpan BalanceTimeout = TimeSpan.FromSeconds(60);

    public async Task<SweepReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        Console.Error.WriteLine("perf: routing: starting a 3-node farm");
        await using var farm = await LocalFarm.StartAsync(3, cancellationToken).ConfigureAwait(false);
        using var watch = new FarmWatch(farm);
        var container = await ContainerOfAsync(farm, watch, cancellationToken).ConfigureAwait(false);
        Console.Error.WriteLine($"perf: routing: container {container} is owned by node {Owner}; clients connect to node {Gateway} ({farm.AddressOf(Gateway)})");

        var gateway = farm.ConnectionString(redirect: false, only: [Gateway]);
        var load = SweepScenario.BasePlan(options, gateway) with { ContainerId = container };
        var forward = load with { Name = $"forward (node {Gateway} proxies to node {Owner})", X = 1, Route = $"forward: Endpoint=node {Gateway}" };
        var redirect = load with
        {
            Name = $"redirect (client calls node {Owner})",
            X = 2,
            Connection = farm.ConnectionString(redirect: true, only: [Gateway]),
            Route = $"redirect: Endpoint=node {Gateway};EnableRedirect=true",
        };

        var run = new PointRun(gateway, farm.Node(Owner).ProcessId, "routing");
        var warmup = await SweepScenario.WarmUpAsync(run, [forward, redirect], options.Warmup, cancellationToken).ConfigureAwait(false);
        var points = new List<SweepPoint>
        {
            await run.MeasureAsync(forward, options.RunWarmup, options.Duration, cancellationToken).ConfigureAwait(false),
            await run.MeasureAsync(redirect, options.RunWarmup, options.Duration, cancellationToken).ConfigureAwait(false),
        };

        var passed = points.All(p => p.Verification.Passed) && warmup.Verifications.All(v => v.Passed);
        var ratio = SweepScenario.Ratio(points[1], points[0]);
        return new SweepReport("routing", points[1], points[0], ratio, points, [], warmup, passed, Math.Round(clock.Elapsed.TotalSeconds, 1), MachineInfo.Current(), DateTimeOffset.UtcNow, command)
        {
            Figures = new Dictionary<string, object?>
            {
                ["ratio_is"] = "redirect / forward, msg/s received",
                ["p99_redirect_to_forward"] = points[0].P99Ms > 0 ? Math.Round(points[1].P99Ms / points[0].P99Ms, 3) : null,
            },
        };
    }

    /// <summary>Creates a container per node, waits until each node owns one, and returns node 2's.</summary>
    private static async Task<long> ContainerOfAsync(LocalFarm farm, FarmWatch watch, CancellationToken cancellationToken)
    {
        using var admin = new FarmAdministrationClient(farm.ConnectionString(redirect: false));
        var nodes = farm.NodeIds;
        var existing = (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false)).Count;
        for (var i = existing; i < nodes.Count; i++)
        {
            await admin.CreateContainerAsync(cancellationToken).ConfigureAwait(false);
        }

        var clock = Stopwatch.StartNew();
        while (true)
        {
            var status = await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false);
            if (FarmWatch.IsBalanced(status, nodes, perNode: 1))
            {
                return status.Containers.First(c => c.OwnerNode == Owner).Id;
            }

            if (clock.Elapsed > BalanceTimeout)
            {
                throw new TimeoutException($"the farm was not balanced (one container per node) within {BalanceTimeout.TotalSeconds:0} s: {FarmWatch.Describe(status)}");
            }

            await Task.Delay(100, cancellationToken).ConfigureAwait(false);
        }
    }
}
