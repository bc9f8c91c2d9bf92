using Farm.Testing;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Farm.Client;
using Npgsql;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Planned moves with real processes under load: `farm container move ID --to N` and
/// `farm node drain N` hand containers over with zero failed client operations (the SDK may retry
/// inside), nothing acknowledged lost and nothing completed delivered again; a drained node that
/// starts again gets its share back. And a 3-node farm on PostgreSQL that survives a SIGKILL.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class PlannedMoveTests(ITestOutputHelper output)
{
    private static readonly TimeSpan BalanceDeadline = TimeSpan.FromSeconds(90);
    private static readonly TimeSpan TrafficDeadline = TimeSpan.FromSeconds(60);
    private static readonly TimeSpan DrainDeadline = TimeSpan.FromSeconds(60);

    /// <summary>How long the load runs before and after the move: long enough for a few thousand operations.</summary>
    private static readonly TimeSpan LoadPhase = TimeSpan.FromSeconds(3);

    [Fact]
    public async Task ContainerMove_UnderLoad_FailsNoClientOperation_LosesNothing_AndRaisesTheEpoch()
    {
        var clock = Stopwatch.StartNew();
        await using var farm = await StartBalancedFarmAsync();
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        var queue = await admin.CreateQueueAsync(LoadQueue("planned-move", containerId: null));
        var container = queue.ContainerId;
        var before = (await admin.GetContainersAsync()).Single(c => c.Id == container);
        var from = before.OwnerNode ?? throw new InvalidOperationException($"container {container} has no owner");
        var to = new[] { 1L, 2L, 3L }.First(n => n != from);
        output.WriteLine($"queue {queue.Name} in container {container} on node {from} (epoch {before.Epoch}); moving it to node {to}");

        var load = new PlannedLoad(farm.ConnectionString, queue.Name);
        load.Start();
        await load.WaitForTrafficAsync(TrafficDeadline);
        await Task.Delay(LoadPhase);

        var acknowledgedBeforeMove = load.Acknowledged;
        var move = await farm.RunAsync("container", "move", container.ToString(CultureInfo.InvariantCulture), "--to", to.ToString(CultureInfo.InvariantCulture));
        Assert.True(move.ExitCode == 0, $"farm container move failed: {move}");
        Assert.Contains($"Container {container} moved from node {from} (epoch {before.Epoch}) to node {to} (epoch ", move.Stdout, StringComparison.Ordinal);
        output.WriteLine($"{move.Stdout.Trim()} ({move.Elapsed.TotalSeconds:0.00} s)");

        // Right after the move: on the target, with a higher epoch (later rebalancing may move others, not this one so soon).
        long movedEpoch;
        using (var status = await farm.StatusJsonAsync())
        {
            var moved = ContainerOf(status, container);
            Assert.Equal(to, moved.GetProperty("owner_node").GetInt64());
            movedEpoch = moved.GetProperty("epoch").GetInt64();
            Assert.True(movedEpoch > before.Epoch, $"epoch {movedEpoch} after the move is not above {before.Epoch}");
        }

        // The moved container serves the load again, then a little more load.
        await load.WaitForAcknowledgedAsync(load.Acknowledged + 200, TrafficDeadline);
        await Task.Delay(LoadPhase);
        await load.StopAndDrainAsync(DrainDeadline);
        output.WriteLine(load.Summary());
        output.WriteLine($"acknowledged before the move {acknowledgedBeforeMove}, after {load.Acknowledged - acknowledgedBeforeMove}");

        load.AssertNothingFailedLostOrRepeated();
        using (var status = await farm.StatusJsonAsync())
        {
            var moved = ContainerOf(status, container);
            Assert.True(moved.GetProperty("epoch").GetInt64() >= movedEpoch, "the container's epoch went down");
        }

        output.WriteLine($"test took {clock.Elapsed.TotalSeconds:0.0} s");
    }

    [Fact]
    public async Task NodeDrain_UnderLoad_FailsNoClientOperation_LosesNothing_TheNodeExits_AndGetsItsShareBackWhenStarted()
    {
        const int drained = 2;
        var clock = Stopwatch.StartNew();
        await using var farm = await StartBalancedFarmAsync();
        using var admin = new FarmAdministrationClient(farm.ConnectionString);

        // The queue lives on the node to drain, so its container is one of those handed over.
        var container = (await admin.GetContainersAsync()).Where(c => c.OwnerNode == drained).Min(c => c.Id);
        var queue = await admin.CreateQueueAsync(LoadQueue("planned-drain", container));
        Assert.Equal(container, queue.ContainerId);
        var pid = farm.NodePid(drained) ?? throw new InvalidOperationException($"node {drained} has no pid");
        output.WriteLine($"queue {queue.Name} in container {container} on node {drained} (pid {pid})");

        var load = new PlannedLoad(farm.ConnectionString, queue.Name);
        load.Start();
        await load.WaitForTrafficAsync(TrafficDeadline);
        await Task.Delay(LoadPhase);

        var drain = await farm.RunAsync("node", "drain", drained.ToString(CultureInfo.InvariantCulture));
        Assert.True(drain.ExitCode == 0, $"farm node drain failed: {drain}");
        output.WriteLine($"{drain.Stdout.Trim()}{Environment.NewLine}(drain took {drain.Elapsed.TotalSeconds:0.00} s)");
        Assert.Contains($"node {drained} drained", drain.Stdout, StringComparison.Ordinal);
        Assert.Contains($"container {container}: node {drained} -> node ", drain.Stdout, StringComparison.Ordinal);

        // The process exited by itself, farm.json says so, and the other two nodes own everything.
        Assert.False(LocalFarm.IsRunning(pid), $"node {drained} (pid {pid}) still runs after the drain");
        Assert.Null(farm.NodePid(drained));
        using (var status = await farm.StatusJsonAsync())
        {
            Assert.Equal(6, status.RootElement.GetProperty("containers").GetArrayLength());
            Assert.Equal("exited", NodeOf(status, drained).GetProperty("process_state").GetString());
            Assert.NotEqual("active", NodeOf(status, drained).GetProperty("state").GetString());
        }
        // Both released containers may land on one node, which then hands one to the other by a
        // planned move, unowned for a moment (a clean-clone run read container 3 in between).
        await Eventually.UntilAsync(async () =>
        {
            var status = await admin.GetFarmStatusAsync();
            return status.Containers.Count == 6 && status.Containers.All(c => c.OwnerNode is 1L or 3L);
        }, BalanceDeadline, "every container owned by node 1 or node 3 after the drain");

        await load.WaitForAcknowledgedAsync(load.Acknowledged + 200, TrafficDeadline);
        await Task.Delay(LoadPhase);
        await load.StopAndDrainAsync(DrainDeadline);
        output.WriteLine(load.Summary());

        // Back again: rebalancing hands it two containers, by planned moves.
        var restarted = await farm.StartNodeAsync(drained);
        var balancing = Stopwatch.StartNew();
        await WaitUntilBalancedAsync(admin, [1, 2, 3]);
        output.WriteLine($"node {drained} restarted (pid {restarted}); balanced 2/2/2 again after {balancing.Elapsed.TotalSeconds:0.0} s");

        var again = await farm.RunAsync("node", "drain", "7");
        CliErrorTests.AssertOneLineError(again, 2);

        // The books last, so a failure here still shows whether the rest held.
        load.AssertNothingFailedLostOrRepeated();
        output.WriteLine($"test took {clock.Elapsed.TotalSeconds:0.0} s");
    }

    [Fact]
    public async Task ContainerMove_And_NodeDrain_RefuseBadInput_WithOneLineAndAnExitCode()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await WaitUntilBalancedAsync(admin, [1, 2, 3], containers: 1);
        var container = (await admin.GetContainersAsync()).Single();
        var owner = container.OwnerNode!.Value.ToString(CultureInfo.InvariantCulture);
        var other = container.OwnerNode == 1 ? "2" : "1";

        var unknownContainer = await farm.RunAsync("container", "move", "42", "--to", other);
        CliErrorTests.AssertOneLineError(unknownContainer, 3);
        Assert.Contains("no container 42", unknownContainer.Stderr, StringComparison.Ordinal);

        var unknownNode = await farm.RunAsync("container", "move", "1", "--to", "9");
        CliErrorTests.AssertOneLineError(unknownNode, 2);
        Assert.Contains("no node 9", unknownNode.Stderr, StringComparison.Ordinal);

        var alreadyThere = await farm.RunAsync("container", "move", "1", "--to", owner);
        CliErrorTests.AssertOneLineError(alreadyThere, 2);
        Assert.Contains("already on node " + owner, alreadyThere.Stderr, StringComparison.Ordinal);

        CliErrorTests.AssertOneLineError(await farm.RunAsync("container", "move", "1"), 2);
        CliErrorTests.AssertOneLineError(await farm.RunAsync("container", "move", "one", "--to", other), 2);
        CliErrorTests.AssertOneLineError(await farm.RunAsync("container", "move", "1", "--to", "0"), 2);
        CliErrorTests.AssertOneLineError(await farm.RunAsync("node", "drain", "5"), 2);
        CliErrorTests.AssertOneLineError(await farm.RunAsync("node", "drain", "2", "--timeout", "soon"), 2);

        // A dead node takes nothing; draining a node that is not running has nothing to do.
        await farm.KillNodeAsync(3);
        var toDead = await farm.RunAsync("container", "move", "1", "--to", "3");
        CliErrorTests.AssertOneLineError(toDead, 2);
        Assert.Contains("Node 3", toDead.Stderr, StringComparison.Ordinal);
        var drainDead = await farm.RunAsync("node", "drain", "3");
        CliErrorTests.AssertOneLineError(drainDead, 1);
        Assert.Contains("not running", drainDead.Stderr, StringComparison.Ordinal);

        // Nothing moved.
        Assert.Equal(container.Epoch, (await admin.GetContainersAsync()).Single().Epoch);
    }

    [PostgresFarmFact]
    public async Task ThreeNodeFarmOnPostgres_SurvivesKillingTheQueuesOwner_WithEveryMessage()
    {
        var clock = Stopwatch.StartNew();
        await using var database = await PostgresFarmDatabase.CreateAsync();
        await using var farm = LocalFarm.Create();

        var up = await farm.RunAsync("up", "--detach", "--port", "0", "--nodes", "3", "--store", "postgres", "--farm-connection", database.ConnectionString);
        Assert.True(up.ExitCode == 0, $"farm up --store postgres failed: {up}");
        var connection = up.Stdout.Trim();
        Assert.StartsWith("Endpoint=http://", connection, StringComparison.Ordinal);
        if (database.Password.Length > 0)
        {
            Assert.DoesNotContain(database.Password, up.Stderr, StringComparison.Ordinal);
        }
        output.WriteLine($"farm up --store postgres took {up.Elapsed.TotalSeconds:0.0} s");

        using (var record = JsonDocument.Parse(await File.ReadAllTextAsync(Path.Combine(farm.DataDirectory, "farm.json"))))
        {
            Assert.Equal("postgres", record.RootElement.GetProperty("store").GetString());
            Assert.Equal(database.ConnectionString, record.RootElement.GetProperty("farm_connection").GetString());
        }

        using (var status = await farm.StatusJsonAsync())
        {
            Assert.Equal("postgres", status.RootElement.GetProperty("store").GetString());
            Assert.Contains(database.Name, status.RootElement.GetProperty("farm_database").GetString(), StringComparison.Ordinal);
            if (database.Password.Length > 0)
            {
                Assert.DoesNotContain(database.Password, status.RootElement.GetRawText(), StringComparison.Ordinal);
            }
        }

        // The queue goes on node 2 or 3: killing node 1, the connection string's first endpoint,
        // trips a client bug of its own (see ReceiverOfAClientWhoseFirstEndpointDied_FailsOver).
        var create = await farm.RunAsync("container", "create", "--count", "2");
        Assert.True(create.ExitCode == 0, $"farm container create failed: {create}");
        using var admin = new FarmAdministrationClient(connection);
        await WaitUntilBalancedAsync(admin, [1, 2, 3], containers: 3);
        var container = (await admin.GetContainersAsync()).First(c => c.OwnerNode is 2 or 3).Id;
        var queue = await admin.CreateQueueAsync(new CreateQueueOptions("pg-orders") { MaxDeliveryCount = 100, ContainerId = container });
        await using var client = new FarmClient(connection);
        await using (var sender = client.CreateSender(queue.Name))
        {
            for (var batch = 0; batch < 10; batch++)
            {
                await sender.SendMessagesAsync(Enumerable.Range(batch * 10, 10).Select(i => new FarmMessage($"order {i}") { MessageId = $"pg-{i}" }));
            }
        }

        // A topic in the same container: stored once on PostgreSQL, its subscriptions move with it.
        await admin.CreateTopicAsync(new CreateTopicOptions("pg-events") { ContainerId = container });
        await admin.CreateSubscriptionAsync(new CreateSubscriptionOptions("pg-events", "all"));
        await admin.CreateSubscriptionAsync(new CreateSubscriptionOptions("pg-events", "even"), new CreateRuleOptions("even", new SqlRuleFilter("n % 2 = 0")));
        await using (var sender = client.CreateSender("pg-events"))
        {
            await sender.SendMessagesAsync(Enumerable.Range(0, 20).Select(i => new FarmMessage($"event {i}") { MessageId = $"ev-{i}", ApplicationProperties = { ["n"] = i } }));
        }

        // The container databases live on the server, named after the farm database.
        Assert.Contains($"{database.Name}_container_{queue.ContainerId}", await database.ListDatabasesAsync());

        var owner = (await admin.GetContainersAsync()).Single(c => c.Id == queue.ContainerId).OwnerNode
            ?? throw new InvalidOperationException($"container {queue.ContainerId} has no owner");
        await farm.KillNodeAsync((int)owner);
        output.WriteLine($"killed node {owner}, the owner of container {queue.ContainerId}");

        var received = new HashSet<string>();
        var waited = Stopwatch.StartNew();
        await using (var receiver = client.CreateReceiver(queue.Name))
        {
            while (received.Count < 100)
            {
                Assert.True(waited.Elapsed < BalanceDeadline, $"received {received.Count} of 100 within {BalanceDeadline} of the kill");
                foreach (var message in await receiver.ReceiveMessagesAsync(50, TimeSpan.FromSeconds(2)))
                {
                    await receiver.CompleteMessageAsync(message);
                    Assert.True(received.Add(message.MessageId!), $"{message.MessageId} was delivered again after it was completed");
                }
            }
        }

        output.WriteLine($"received all 100 {waited.Elapsed.TotalSeconds:0.0} s after the kill");
        Assert.Equal(Enumerable.Range(0, 100).Select(i => $"pg-{i}").Order(), received.Order());
        foreach (var (subscription, expected) in new[] { ("all", Enumerable.Range(0, 20)), ("even", Enumerable.Range(0, 20).Where(i => i % 2 == 0)) })
        {
            await using var receiver = client.CreateReceiver("pg-events", subscription);
            var events = new List<string>();
            while (await receiver.ReceiveMessagesAsync(50, TimeSpan.FromSeconds(2)) is { Count: > 0 } batch)
            {
                foreach (var message in batch)
                {
                    await receiver.CompleteMessageAsync(message);
                    events.Add(message.MessageId!);
                }
            }
            Assert.Equal(expected.Select(i => $"ev-{i}"), events);
        }
        using (var status = await farm.StatusJsonAsync())
        {
            Assert.NotEqual(owner, ContainerOf(status, queue.ContainerId).GetProperty("owner_node").GetInt64());
        }
        // The survivors told the crash by the killed node's session lock in the farm database (the
        // server ended its session with the process), not by waiting for its heartbeats to lapse.
        var survivorLogs = string.Join('\n', new[] { 1, 2, 3 }.Where(n => n != owner)
            .Select(n => File.ReadAllText(Path.Combine(farm.DataDirectory, "logs", $"node-{n}.log"))));
        Assert.Contains($"Node {owner}'s session with the farm database ended", survivorLogs, StringComparison.Ordinal);

        await farm.DownAsync(kill: false);
        output.WriteLine($"test took {clock.Elapsed.TotalSeconds:0.0} s");
    }

    [Fact]
    public async Task ReceiverOfAClientWhoseFirstEndpointDied_FailsOver()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        var queue = await admin.CreateQueueAsync(new CreateQueueOptions("first-endpoint") { MaxDeliveryCount = 100 });
        await using var client = new FarmClient(farm.ConnectionString);
        await using (var sender = client.CreateSender(queue.Name))
        {
            await sender.SendMessagesAsync(Enumerable.Range(0, 100).Select(i => new FarmMessage($"m {i}") { MessageId = $"m-{i}" }));
        }

        // Node 1 (the first endpoint) owns the farm's first container, where the queue went.
        Assert.Equal(1, (await admin.GetContainersAsync()).Single(c => c.Id == queue.ContainerId).OwnerNode);
        await farm.KillNodeAsync(1);

        var received = new HashSet<string>();
        var waited = Stopwatch.StartNew();
        await using var receiver = client.CreateReceiver(queue.Name);
        while (received.Count < 100)
        {
            Assert.True(waited.Elapsed < BalanceDeadline, $"received {received.Count} of 100 within {BalanceDeadline} of the kill");
            foreach (var message in await receiver.ReceiveMessagesAsync(50, TimeSpan.FromSeconds(2)))
            {
                await receiver.CompleteMessageAsync(message);
                received.Add(message.MessageId!);
            }
        }
    }

    /// <summary>A 3-node farm with 6 containers (`farm container create --count 5`), spread 2/2/2.</summary>
    internal static async Task<LocalFarm> StartBalancedFarmAsync()
    {
        var farm = await LocalFarm.StartAsync(nodes: 3);
        try
        {
            var create = await farm.RunAsync("container", "create", "--count", "5");
            Assert.True(create.ExitCode == 0, $"farm container create failed: {create}");
            using var admin = new FarmAdministrationClient(farm.ConnectionString);
            await WaitUntilBalancedAsync(admin, [1, 2, 3]);
            return farm;
        }
        catch
        {
            await farm.DisposeAsync();
            throw;
        }
    }

    /// <summary>
    /// Duplicate detection makes a send the client retried after a lost reply count once; a long
    /// lock keeps a slow handover from redelivering what is only in flight.
    /// </summary>
    private static CreateQueueOptions LoadQueue(string name, long? containerId) => new(name)
    {
        ContainerId = containerId,
        RequiresDuplicateDetection = true,
        LockDuration = TimeSpan.FromSeconds(30),
        MaxDeliveryCount = 100,
    };

    /// <summary>Every container owned by one of <paramref name="nodes"/> (live, active), the same number each.</summary>
    private static async Task WaitUntilBalancedAsync(FarmAdministrationClient admin, long[] nodes, int containers = 6)
    {
        var last = string.Empty;
        var balanced = await Eventually.HoldsWithinAsync(async () =>
        {
            try
            {
                var status = await admin.GetFarmStatusAsync();
                var live = status.Nodes.Where(n => n.State == "active" && n.HeartbeatAge < TimeSpan.FromSeconds(3)).Select(n => n.Id).Order().ToList();
                var counts = nodes.ToDictionary(n => n.ToString(CultureInfo.InvariantCulture), n => status.Containers.Count(c => c.OwnerNode == n));
                last = $"live nodes {string.Join(",", live)}; containers per node {JsonSerializer.Serialize(counts)}; unowned {status.Containers.Count(c => c.OwnerNode is null)}";
                var share = containers / nodes.Length;
                return live.SequenceEqual(nodes) && status.Containers.Count == containers
                    && status.Containers.All(c => c.OwnerNode is { } o && nodes.Contains(o))
                    && counts.Values.All(c => c == share || (containers % nodes.Length != 0 && c == share + 1));
            }
            catch (FarmException)
            {
                // A gateway going away; the client moves on to the next endpoint.
                return false;
            }
        }, BalanceDeadline, poll: TimeSpan.FromMilliseconds(200));
        Assert.True(balanced, $"the farm did not balance within {BalanceDeadline}: {last}");
    }

    private static JsonElement ContainerOf(JsonDocument status, long containerId)
        => status.RootElement.GetProperty("containers").EnumerateArray().Single(c => c.GetProperty("id").GetInt64() == containerId);

    private static JsonElement NodeOf(JsonDocument status, long nodeId)
        => status.RootElement.GetProperty("nodes").EnumerateArray().Single(n => n.GetProperty("id").GetInt64() == nodeId);
}

/// <summary>
/// Continuous batch sends and peek-lock receive-and-complete on one queue, keeping the books the
/// planned-move tests check: every SDK call that threw, every id acknowledged, completed, and any
/// delivery of an id after it was completed.
/// </summary>
internal sealed class PlannedLoad(string connection, string queue)
{
    private const int Senders = 2;
    private const int Receivers = 2;
    private const int BatchSize = 10;

    private readonly CancellationTokenSource _stopSending = new();
    private readonly CancellationTokenSource _stopReceiving = new();
    private readonly ConcurrentDictionary<string, byte> _acknowledged = new();
    private readonly ConcurrentDictionary<string, int> _completed = new();
    private readonly ConcurrentQueue<string> _failures = new();
    private readonly ConcurrentQueue<string> _deliveredAgain = new();
    private readonly List<Task> _tasks = [];
    private long _deliveries;
    private string _diagnosis = string.Empty;

    public int Acknowledged => _acknowledged.Count;

    public void Start()
    {
        for (var s = 0; s < Senders; s++)
        {
            var sender = s;
            _tasks.Add(Task.Run(() => SendLoopAsync(sender)));
        }

        for (var r = 0; r < Receivers; r++)
        {
            _tasks.Add(Task.Run(ReceiveLoopAsync));
        }
    }

    public async Task WaitForTrafficAsync(TimeSpan deadline)
    {
        var flowing = await Eventually.HoldsWithinAsync(() =>
        {
            Assert.True(_failures.IsEmpty, $"client operations failed before any traffic: {Summary()}");
            return !_acknowledged.IsEmpty && !_completed.IsEmpty;
        }, deadline);
        Assert.True(flowing, $"no traffic within {deadline}: {Summary()}");
    }

    public async Task WaitForAcknowledgedAsync(int count, TimeSpan deadline)
    {
        Assert.True(await Eventually.HoldsWithinAsync(() => _acknowledged.Count >= count, deadline),
            $"fewer than {count} sends acknowledged within {deadline}: {Summary()}");
    }

    /// <summary>Stops sending (between batches, so no send is left half-done), waits until every acknowledged id was completed, stops receiving.</summary>
    public async Task StopAndDrainAsync(TimeSpan deadline)
    {
        await _stopSending.CancelAsync();
        // Past the deadline the books below say what is missing.
        await Eventually.HoldsWithinAsync(
            () => _tasks.Take(Senders).All(t => t.IsCompleted) && _acknowledged.Keys.All(id => _completed.ContainsKey(id)), deadline);

        await _stopReceiving.CancelAsync();
        await Task.WhenAll(_tasks);

        if (_acknowledged.Keys.Any(id => !_completed.ContainsKey(id)))
        {
            // Tell a stalled receiver apart from messages that are gone: does a fresh one get any?
            await using var client = new FarmClient(connection);
            await using var fresh = client.CreateReceiver(queue);
            try
            {
                var messages = await fresh.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(5));
                _diagnosis = $"; after the deadline a fresh receiver got {messages.Count} message(s) at once";
            }
            catch (Exception ex)
            {
                _diagnosis = $"; after the deadline a fresh receiver failed: {ex.GetType().Name}: {ex.Message}";
            }
        }
    }

    public void AssertNothingFailedLostOrRepeated()
    {
        Assert.True(_acknowledged.Count > 500, $"too little traffic to mean anything: {Summary()}");
        Assert.True(_failures.IsEmpty, $"client operations failed: {string.Join(" | ", _failures.Take(10))}; {Summary()}");
        var lost = _acknowledged.Keys.Where(id => !_completed.ContainsKey(id)).Order().Take(20).ToList();
        Assert.True(lost.Count == 0, $"acknowledged but never received: {string.Join(", ", lost)}; {Summary()}");
        var unknown = _completed.Keys.Where(id => !_acknowledged.ContainsKey(id)).Order().Take(20).ToList();
        Assert.True(unknown.Count == 0, $"completed but never acknowledged: {string.Join(", ", unknown)}; {Summary()}");
        var twice = _completed.Where(c => c.Value > 1).Select(c => $"{c.Key} x{c.Value}").Take(20).ToList();
        Assert.True(twice.Count == 0, $"completed more than once: {string.Join(", ", twice)}; {Summary()}");
        Assert.True(_deliveredAgain.IsEmpty, $"delivered again after completion: {string.Join(", ", _deliveredAgain.Take(20))}; {Summary()}");
    }

    public string Summary() =>
        $"acknowledged {_acknowledged.Count}, completed {_completed.Count}, deliveries {Interlocked.Read(ref _deliveries)}, " +
        $"failed operations {_failures.Count}, delivered again after completion {_deliveredAgain.Count}{_diagnosis}";

    private async Task SendLoopAsync(int senderId)
    {
        await using var client = new FarmClient(connection);
        await using var sender = client.CreateSender(queue);
        // A correctness test, not a benchmark: a steady stream (a batch every 5 ms at most), not a flood.
        using var pacing = new PeriodicTimer(TimeSpan.FromMilliseconds(5));
        for (var batch = 0; !_stopSending.IsCancellationRequested; batch++)
        {
            var ids = Enumerable.Range(0, BatchSize).Select(i => $"s{senderId}-b{batch}-m{i}").ToList();
            try
            {
                await sender.SendMessagesAsync(ids.Select(id => new FarmMessage($"payload of {id}") { MessageId = id }));
                foreach (var id in ids)
                {
                    _acknowledged[id] = 0;
                }
            }
            catch (Exception ex)
            {
                _failures.Enqueue($"send {ids[0]}..: {ex.GetType().Name}: {ex.Message}");
            }

            await pacing.WaitForNextTickAsync();
        }
    }

    private async Task ReceiveLoopAsync()
    {
        await using var client = new FarmClient(connection);
        await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = 20 });
        while (!_stopReceiving.IsCancellationRequested)
        {
            IReadOnlyList<FarmReceivedMessage> messages;
            try
            {
                messages = await receiver.ReceiveMessagesAsync(20, TimeSpan.FromSeconds(1), _stopReceiving.Token);
            }
            catch (OperationCanceledException) when (_stopReceiving.IsCancellationRequested)
            {
                return;
            }
            catch (Exception ex)
            {
                _failures.Enqueue($"receive: {ex.GetType().Name}: {ex.Message}");
                continue;
            }

            // Completed concurrently: the client coalesces them into one settle call.
            await Task.WhenAll(messages.Select(CompleteAsync));

            async Task CompleteAsync(FarmReceivedMessage message)
            {
                Interlocked.Increment(ref _deliveries);
                var id = message.MessageId ?? $"(no id, sequence {message.SequenceNumber})";
                if (_completed.ContainsKey(id))
                {
                    _deliveredAgain.Enqueue($"{id} (delivery {message.DeliveryCount})");
                }

                try
                {
                    await receiver.CompleteMessageAsync(message);
                    _completed.AddOrUpdate(id, 1, (_, n) => n + 1);
                }
                catch (Exception ex)
                {
                    _failures.Enqueue($"complete {id}: {ex.GetType().Name}: {ex.Message}");
                }
            }
        }
    }
}

/// <summary>
/// A fresh farm database on the PostgreSQL server FARM_TEST_POSTGRES names (farm_e2e_{random});
/// disposing it drops it and the container databases named after it.
/// </summary>
internal sealed class PostgresFarmDatabase : IAsyncDisposable
{
    public const string Variable = "FARM_TEST_POSTGRES";

    private readonly string _admin;

    private PostgresFarmDatabase(string admin, string name)
    {
        _admin = admin;
        Name = name;
        var builder = new NpgsqlConnectionStringBuilder(admin) { Database = name, Pooling = true };
        ConnectionString = builder.ConnectionString;
        Password = builder.Password ?? string.Empty;
    }

    public static string? AdminConnectionString { get; } =
        Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } value ? value : null;

    /// <summary>Why the PostgreSQL farm test is skipped: no server, and not on CI (where that is a failure).</summary>
    public static string? SkipReason { get; } =
        AdminConnectionString is not null || string.Equals(Environment.GetEnvironmentVariable("CI"), "true", StringComparison.OrdinalIgnoreCase)
            ? null
            : $"{Variable} is not set: no PostgreSQL server to run a farm on (./test.sh starts one).";

    public string Name { get; }

    /// <summary>The farm database's connection string, as `farm up --farm-connection` takes it.</summary>
    public string ConnectionString { get; }

    public string Password { get; }

    public static async Task<PostgresFarmDatabase> CreateAsync()
    {
        var admin = AdminConnectionString ?? throw new InvalidOperationException(
            $"{Variable} is not set, but CI=true: the test script must start PostgreSQL and export {Variable}.");
        var database = new PostgresFarmDatabase(admin, $"farm_e2e_{Guid.NewGuid():N}"[..21]);
        await database.ExecuteAsync($"CREATE DATABASE \"{database.Name}\"");
        return database;
    }

    /// <summary>The farm database and every database named after it.</summary>
    public async Task<IReadOnlyList<string>> ListDatabasesAsync()
    {
        var names = new List<string>();
        await using var connection = new NpgsqlConnection(AdminOn("postgres"));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand("SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname", connection)
        {
            Parameters = { new NpgsqlParameter<string> { TypedValue = Name } },
        };
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            names.Add(reader.GetString(0));
        }

        return names;
    }

    public async ValueTask DisposeAsync()
    {
        // The farm is gone by now (disposed first); FORCE ends any session a killed node left behind.
        foreach (var name in (await ListDatabasesAsync()).OrderDescending())
        {
            await ExecuteAsync($"DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
        }
    }

    private string AdminOn(string database)
        => new NpgsqlConnectionStringBuilder(_admin) { Database = database, Pooling = false }.ConnectionString;

    private async Task ExecuteAsync(string sql)
    {
        await using var connection = new NpgsqlConnection(AdminOn("postgres"));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(sql, connection);
        await command.ExecuteNonQueryAsync();
    }
}

/// <summary>A [Fact] that needs a PostgreSQL server: skipped with the reason when there is none (failed on CI).</summary>
public sealed class PostgresFarmFactAttribute : FactAttribute
{
    public PostgresFarmFactAttribute() => Skip = PostgresFarmDatabase.SkipReason;
}
