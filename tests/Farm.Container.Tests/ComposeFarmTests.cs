using Farm.Client;
using Farm.EndToEnd.Tests;
using Farm.Testing;
using Xunit.Abstractions;

namespace Farm.Container.Tests;

/// <summary>
/// deploy/compose.yaml as a user runs it, with podman-compose: three node containers and a
/// PostgreSQL container. Queues in every container take sends through the published ports; `farm
/// node kill 2 --engine podman` kills node 2's container and its containers are owned by the
/// survivors within the failover bound; `farm node start 2 --engine podman` brings it back and
/// the farm rebalances; every acknowledged message is received.
/// </summary>
public sealed class ComposeFarmTests(ITestOutputHelper output)
{
    private const string Connection = "Endpoint=http://127.0.0.1:5480,http://127.0.0.1:5481,http://127.0.0.1:5482";

    private static readonly TimeSpan FailoverBound = TimeSpan.FromSeconds(30);

    private static readonly TimeSpan StartDeadline = TimeSpan.FromSeconds(120);

    private static string ComposeFile => Path.Combine(TestPaths.RepositoryRoot, "deploy", "compose.yaml");

    [ComposeFact]
    public async Task AThreeNodeFarmInContainers_FailsOverAKilledNode_RebalancesWhenItReturns_AndLosesNothing()
    {
        await ComposeAsync("down", "-v", "-t", "10");
        try
        {
            var up = await ComposeAsync("up", "-d");
            Assert.True(up.ExitCode == 0, $"podman-compose up failed: {up}");
            using var admin = new FarmAdministrationClient(Connection);
            await WaitForLiveNodesAsync(admin, [1, 2, 3], StartDeadline);

            // Six containers, two a node, a queue in each.
            for (var i = 0; i < 5; i++)
            {
                await admin.CreateContainerAsync();
            }
            await WaitUntilAsync(admin, c => c.Count == 6 && c.GroupBy(x => x.OwnerNode).All(g => g.Key is not null && g.Count() == 2), StartDeadline, "two containers on each node");
            var containers = await admin.GetContainersAsync();
            foreach (var container in containers)
            {
                await admin.CreateQueueAsync(new CreateQueueOptions($"q{container.Id}") { ContainerId = container.Id });
            }

            await using var client = new FarmClient(Connection);
            var acknowledged = new Dictionary<string, List<string>>();
            await SendAsync(client, containers.Select(c => $"q{c.Id}"), "before", acknowledged);

            // Kill node 2's container (SIGKILL through the engine): its containers go to nodes 1 and 3.
            var ofNode2 = containers.Where(c => c.OwnerNode == 2).Select(c => c.Id).ToList();
            var kill = await CliAsync("node", "kill", "2", "--engine", "podman");
            Assert.True(kill.ExitCode == 0, kill.ToString());
            var killedAt = DateTimeOffset.UtcNow;
            await WaitUntilAsync(admin, c => c.Where(x => ofNode2.Contains(x.Id)).All(x => x.OwnerNode is 1 or 3), FailoverBound, "node 2's containers on the survivors");
            output.WriteLine($"node 2's containers owned by the survivors {(DateTimeOffset.UtcNow - killedAt).TotalSeconds:0.0} s after the kill");
            await SendAsync(client, containers.Select(c => $"q{c.Id}"), "during", acknowledged);

            // Back: the farm gives node 2 its share again (planned moves).
            var start = await CliAsync("node", "start", "2", "--engine", "podman");
            Assert.True(start.ExitCode == 0, start.ToString());
            await WaitUntilAsync(admin, c => c.Count(x => x.OwnerNode == 2) == 2, StartDeadline, "node 2 to get two containers back");
            await SendAsync(client, containers.Select(c => $"q{c.Id}"), "after", acknowledged);

            foreach (var (queue, ids) in acknowledged)
            {
                var received = new HashSet<string>();
                await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
                using var deadline = new CancellationTokenSource(StartDeadline);
                while (!ids.All(received.Contains))
                {
                    foreach (var message in await receiver.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(2), deadline.Token))
                    {
                        received.Add(message.MessageId!);
                    }
                }
            }
        }
        finally
        {
            var down = await ComposeAsync("down", "-v", "-t", "10");
            output.WriteLine($"podman-compose down: exit {down.ExitCode}");
        }
    }

    private static async Task SendAsync(FarmClient client, IEnumerable<string> queues, string phase, Dictionary<string, List<string>> acknowledged)
    {
        foreach (var queue in queues)
        {
            await using var sender = client.CreateSender(queue);
            var batch = Enumerable.Range(0, 20).Select(i => new FarmMessage($"{phase} {i}") { MessageId = $"{queue}-{phase}-{i}" }).ToList();
            await sender.SendMessagesAsync(batch);
            var ids = acknowledged.TryGetValue(queue, out var list) ? list : acknowledged[queue] = [];
            ids.AddRange(batch.Select(m => m.MessageId!));
        }
    }

    private static Task WaitForLiveNodesAsync(FarmAdministrationClient admin, long[] nodes, TimeSpan within) =>
        Eventually.UntilAsync(async () =>
        {
            try
            {
                var status = await admin.GetFarmStatusAsync();
                return nodes.All(id => status.Nodes.Any(n => n.Id == id && n.State == "active" && n.HeartbeatAge < TimeSpan.FromSeconds(3)));
            }
            catch (FarmException)
            {
                return false; // not serving yet
            }
        }, within, $"nodes {string.Join(", ", nodes)} to serve");

    private static Task WaitUntilAsync(FarmAdministrationClient admin, Func<IReadOnlyList<ContainerProperties>, bool> condition, TimeSpan within, string what) =>
        Eventually.UntilAsync(async () =>
        {
            try
            {
                return condition(await admin.GetContainersAsync());
            }
            catch (FarmException e) when (e.IsTransient)
            {
                return false;
            }
        }, within, what);

    private static Task<ProcessResult> ComposeAsync(params string[] arguments) =>
        ProcessRunner.RunAsync("podman-compose", ["-f", ComposeFile, .. arguments], TimeSpan.FromSeconds(180), workingDirectory: Path.GetDirectoryName(ComposeFile));

    private static Task<ProcessResult> CliAsync(params string[] arguments) =>
        ProcessRunner.RunAsync("dotnet", [TestPaths.FarmCliDll, .. arguments], TimeSpan.FromSeconds(120), environment: new Dictionary<string, string?>
        {
            ["FARM_CONNECTION"] = Connection,
            ["FARM_HOME"] = null,
        });
}

/// <summary>
/// Runs where podman-compose and the node image are (./test.sh installs and builds them, and CI runs
/// it); elsewhere it is skipped with the command that prepares them. On CI it never skips.
/// </summary>
public sealed class ComposeFactAttribute : FactAttribute
{
    public ComposeFactAttribute()
    {
        var ci = string.Equals(Environment.GetEnvironmentVariable("CI"), "true", StringComparison.OrdinalIgnoreCase);
        var ready = Environment.GetEnvironmentVariable("FARM_TEST_COMPOSE") == "1";
        if (!ci && !ready)
        {
            Skip = "The images of deploy/compose.yaml are not built: run as root deploy/build-images.sh and set FARM_TEST_COMPOSE=1 (./test.sh does both).";
        }
    }
}
