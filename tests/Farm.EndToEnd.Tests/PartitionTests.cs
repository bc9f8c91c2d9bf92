using System.Diagnostics;
using System.Globalization;
using Farm.Client;
using Farm.Testing;
using Farm.Contracts;
using Grpc.Core;
using Farm.Contracts.V1;
using Google.Protobuf;
using Npgsql;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Issue 3's partition test, with real processes and a real network cut: three nodes, each in a
/// network namespace of its own joined to the host by a veth pair, on a PostgreSQL server on the
/// host side; 6 containers, 6 queues, continuous sends and receives through the SDK. Node 2's link
/// is cut: its containers go to the survivors, who raise their epochs; a write sent to node 2 from
/// beside it is not accepted; the link heals, node 2 comes back, gives up what it lost and gets its
/// share back by planned moves. Nothing acknowledged is lost and nothing completed comes back.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class PartitionTests(ITestOutputHelper output)
{
    private const int Nodes = 3;
    private const int Containers = 6;
    private const int CutNode = 2;
    private const string FarmDatabase = "farm";

    private static readonly TimeSpan StartDeadline = TimeSpan.FromSeconds(60);
    private static readonly TimeSpan BalanceDeadline = TimeSpan.FromSeconds(60);
    private static readonly TimeSpan TakeoverDeadline = TimeSpan.FromSeconds(30);
    private static readonly TimeSpan RejoinDeadline = TimeSpan.FromSeconds(60);
    private static readonly TimeSpan DrainDeadline = TimeSpan.FromSeconds(60);

    /// <summary>Sends each moved queue takes from its new owner before the link heals.</summary>
    private const int SendsDuringTheCut = 100;

    /// <summary>Acknowledged sends in all, at least, before the books are checked.</summary>
    private const int TotalSends = 1500;

    /// <summary>The node's liveness rule (NodeOptions.NodeTimeout): a heartbeat younger than this.</summary>
    private static readonly TimeSpan NodeTimeout = TimeSpan.FromSeconds(3);

    [Fact]
    public async Task CuttingANodesLink_MovesItsContainers_AcceptsNoWriteFromIt_AndItGetsItsShareBackWhenHealed()
    {
        var clock = Stopwatch.StartNew();
        var run = Directory.CreateTempSubdirectory($"farm-partition-{Environment.ProcessId}-").FullName;
        var nodes = new List<NamespacedNode>();
        ChaosLoad? load = null;
        var failed = true;
        try
        {
            await using var network = await NetworkNamespaces.CreateAsync(Nodes, output.WriteLine);
            output.WriteLine($"network: bridge {network.Bridge} {network.HostAddress}/24, nodes in namespaces {string.Join(", ", Enumerable.Range(1, Nodes).Select(n => $"{network.NamespaceOf(n)} ({network.NodeAddress(n)})"))}");
            await using var postgres = await ThrowawayPostgres.StartAsync([network.HostAddress], $"{network.Subnet}.0/24", output.WriteLine);
            await postgres.CreateDatabaseAsync(FarmDatabase);
            var farm = new FarmDatabaseView(postgres);
            Task<string> Diagnose() => DiagnoseAsync(farm, nodes);
            output.WriteLine($"PostgreSQL on {network.HostAddress}:{postgres.Port} ({clock.Elapsed.TotalSeconds:0.0} s)");

            // Node 1 first: a node that finds the farm empty creates its first container, and only one should.
            var farmConnection = postgres.ConnectionString(network.HostAddress, FarmDatabase);
            var data = Directory.CreateDirectory(Path.Combine(run, "data")).FullName;
            try
            {
                nodes.Add(NamespacedNode.Start(network, 1, farmConnection, data, run));
                await nodes[0].WaitUntilServingAsync(StartDeadline);
                nodes.AddRange(Enumerable.Range(2, Nodes - 1).Select(n => NamespacedNode.Start(network, n, farmConnection, data, run)));
                await Task.WhenAll(nodes.Skip(1).Select(n => n.WaitUntilServingAsync(StartDeadline)));
                output.WriteLine($"{Nodes} nodes serving ({clock.Elapsed.TotalSeconds:0.0} s)");

                var connection = "Endpoint=" + string.Join(",", nodes.Select(n => n.Endpoint));
                using var admin = new FarmAdministrationClient(connection);
                while ((await farm.ContainersAsync()).Count < Containers)
                {
                    await admin.CreateContainerAsync();
                }
                await WaitUntilBalancedAsync(farm, [1, 2, 3], BalanceDeadline, nodes);

                var queues = new Dictionary<string, long>();
                foreach (var container in await farm.ContainersAsync())
                {
                    var name = $"partition-{container.Id}";
                    // Duplicate detection makes a send the gateway or client retried after a lost reply count once.
                    await admin.CreateQueueAsync(new CreateQueueOptions(name)
                    {
                        ContainerId = container.Id,
                        RequiresDuplicateDetection = true,
                        LockDuration = TimeSpan.FromSeconds(5),
                        MaxDeliveryCount = 100,
                    });
                    queues[name] = container.Id;
                }

                load = new ChaosLoad(connection, [.. queues.Keys]);
                load.Start();
                await load.WaitForTrafficAsync(TimeSpan.FromSeconds(60));
                output.WriteLine($"balanced 2/2/2, traffic on all {queues.Count} queues ({clock.Elapsed.TotalSeconds:0.0} s)");

                // The cut.
                var before = (await farm.ContainersAsync()).Where(c => c.Owner == CutNode).ToList();
                Assert.Equal(2, before.Count);
                var movedQueues = queues.Where(q => before.Any(c => c.Id == q.Value)).Select(q => q.Key).ToList();
                var cutAt = Stopwatch.GetTimestamp();
                await network.CutAsync(CutNode);
                output.WriteLine($"cut node {CutNode}'s link ({network.HostLink(CutNode)} down); it held containers " +
                    string.Join(", ", before.Select(c => $"{c.Id} (epoch {c.Epoch})")));

                // One send, made at once through a surviving gateway, with no client retry or failover:
                // the gateway forwards it to node 2, which does not answer, and must give up on node 2
                // and hand the send to the new owner within the time it holds calls.
                var survivor = nodes.First(n => n.Id != CutNode);
                var heldQueue = movedQueues[^1];
                var heldId = $"held-by-gateway-{Guid.NewGuid():N}";
                using var survivorChannel = FarmChannels.Create(new Uri(survivor.Endpoint));
                var heldSend = new Contracts.V1.Messaging.MessagingClient(survivorChannel).SendAsync(new SendRequest { Entity = heldQueue, Messages = { new Message { MessageId = heldId, Body = ByteString.CopyFromUtf8("held") } } }, new CallOptions(deadline: DateTime.UtcNow.AddSeconds(60))).ResponseAsync;
                var heldAnswered = heldSend.ContinueWith(_ => Stopwatch.GetTimestamp(), TaskScheduler.Default);

                // The survivors take its containers: a new owner in the farm database, and the raised
                // epoch stored in the container database itself, which is what fences node 2 out.
                var taken = await PollAsync(async () =>
                {
                    var now = await farm.ContainersAsync();
                    var moved = before.Select(b => now.Single(c => c.Id == b.Id)).ToList();
                    if (!moved.All(c => c.Owner is { } owner && owner != CutNode && c.Epoch > before.Single(b => b.Id == c.Id).Epoch))
                    {
                        return null;
                    }
                    foreach (var container in moved)
                    {
                        if (await farm.StoredEpochAsync(container) != container.Epoch)
                        {
                            return null;
                        }
                    }
                    return moved;
                }, TakeoverDeadline, () => $"the survivors to take node {CutNode}'s containers {string.Join(", ", before.Select(c => c.Id))}", Diagnose);
                var takenAt = Stopwatch.GetTimestamp();
                output.WriteLine($"taken over {Stopwatch.GetElapsedTime(cutAt, takenAt).TotalSeconds:0.00} s after the cut: " +
                    string.Join(", ", taken.Select(c => $"container {c.Id} -> node {c.Owner} (epoch {c.Epoch}, stored epoch the same)")));

                // Node 2 still thinks it owns them. A client beside it (inside its namespace) sends to
                // it directly, after the epochs moved on: node 2 must never acknowledge that write.
                var lateQueue = movedQueues[0];
                var lateId = $"from-cut-node-{Guid.NewGuid():N}";
                var cutNode = nodes[CutNode - 1];
                var lateSendStarted = Stopwatch.GetTimestamp();
                var lateSend = NamespaceRpc.UnaryAsync(network, CutNode, cutNode.Endpoint, TimeSpan.FromSeconds(60),
                    (messaging, options) => messaging.SendAsync(
                        new SendRequest { Entity = lateQueue, Messages = { new Message { MessageId = lateId, Body = ByteString.CopyFromUtf8("late") } } },
                        options.WithHeaders(FarmMetadata.DirectHeaders())));

                // Meanwhile the new owners serve the moved queues: the partition lasts until each has
                // taken a steady stream of sends.
                foreach (var queue in movedQueues)
                {
                    await load.WaitForSendsAfterAsync(queue, takenAt, SendsDuringTheCut, TakeoverDeadline);
                    output.WriteLine($"{queue}: served by its new owner; longest time without an acknowledged send {load.LongestGapSince(queue, cutAt).TotalSeconds:0.00} s");
                }
                try
                {
                    await heldSend;
                }
                catch (RpcException e)
                {
                    Assert.Fail($"a send to {heldQueue} through node {survivor.Id}'s gateway during the cut failed instead of reaching the new owner: {e.StatusCode} {e.FarmError()}: {e.Status.Detail}");
                }
                output.WriteLine($"a send to {heldQueue} through node {survivor.Id}'s gateway, made at the cut, was acknowledged {Stopwatch.GetElapsedTime(cutAt, await heldAnswered).TotalSeconds:0.00} s after it");
                Assert.False(lateSend.IsCompletedSuccessfully && (await lateSend).Succeeded,
                    $"node {CutNode}, cut off, acknowledged a send to {lateQueue} after its container moved");
                var survivorLines = nodes.ToDictionary(n => n.Id, n => n.LineCount);
                var healedAt = Stopwatch.GetTimestamp();
                await network.HealAsync(CutNode);
                output.WriteLine($"healed node {CutNode}'s link after {Stopwatch.GetElapsedTime(cutAt).TotalSeconds:0.0} s");

                // It comes back: heartbeats again, active.
                await PollAsync(async () =>
                {
                    var node = (await farm.NodesAsync()).Single(n => n.Id == CutNode);
                    return node.State == "active" && node.HeartbeatAge < NodeTimeout ? node : null;
                }, RejoinDeadline, () => $"node {CutNode} to heartbeat again", Diagnose);
                output.WriteLine($"node {CutNode} heartbeats again {Stopwatch.GetElapsedTime(healedAt).TotalSeconds:0.0} s after the heal");

                // It gives up what it lost (no longer serving them), and its late write was refused.
                await PollAsync(() => Task.FromResult(before.All(c => cutNode.Logged($"Lost container {c.Id};")) ? "" : null),
                    RejoinDeadline, () => $"node {CutNode} to say it lost containers {string.Join(", ", before.Select(c => c.Id))}", Diagnose);
                output.WriteLine($"node {CutNode} gave up its old containers {Stopwatch.GetElapsedTime(healedAt).TotalSeconds:0.0} s after the heal");
                var late = await lateSend.WaitAsync(TimeSpan.FromSeconds(90));
                output.WriteLine($"the send to node {CutNode} from inside its namespace ended after {Stopwatch.GetElapsedTime(lateSendStarted).TotalSeconds:0.0} s: {late}");
                Assert.False(late.Succeeded, $"node {CutNode} acknowledged a send to {lateQueue} after it lost the container (epoch fence broken)");

                // It gets its share back, by planned hand-overs from the survivors.
                await WaitUntilBalancedAsync(farm, [1, 2, 3], BalanceDeadline, nodes);
                var balancedAt = Stopwatch.GetTimestamp();
                var regained = (await farm.ContainersAsync()).Where(c => c.Owner == CutNode).ToList();
                output.WriteLine($"balanced 2/2/2 again {Stopwatch.GetElapsedTime(healedAt).TotalSeconds:0.0} s after the heal; node {CutNode} got " +
                    string.Join(", ", regained.Select(c => $"container {c.Id} (epoch {c.Epoch})")));
                foreach (var container in regained)
                {
                    Assert.True(nodes.Any(n => n.Id != CutNode && n.LoggedSince(survivorLines[n.Id], $"Released container {container.Id}")),
                        $"container {container.Id} went to node {CutNode} without a planned release by its owner");
                }

                // Every queue serves after the rebalancing; then stop, drain and check the books.
                foreach (var queue in queues.Keys)
                {
                    await PollAsync(() => Task.FromResult(load.SendsAfter(queue, balancedAt) > 0 ? "" : null), TakeoverDeadline,
                        () => $"a send on {queue} to succeed after the rebalancing (last acknowledged send {load.SinceLastSend(queue)?.TotalSeconds:0.0} s ago; " +
                              $"last failure: {load.LastSendFailure(queue) ?? "none"}; {load.Summary()})", Diagnose);
                }
                await PollAsync(() => Task.FromResult(load.Acknowledged >= TotalSends ? "" : null), DrainDeadline,
                    () => $"{TotalSends} acknowledged sends ({load.Summary()})", Diagnose);
                // The held send was stored by the new owner (node 2 could reach no database): it is delivered.
                await PollAsync(() => Task.FromResult(load.WasReceived(heldId) ? "" : null), DrainDeadline,
                    () => $"{heldId}, acknowledged through node {survivor.Id}'s gateway during the cut, to be delivered", Diagnose);
                await load.StopAndDrainAsync(DrainDeadline);
                output.WriteLine(load.Summary());
                Assert.Empty(load.Lost());
                Assert.Empty(load.CompletedThenDelivered);

                // The fence in every container database is its owner's epoch, and the late write is nowhere.
                foreach (var container in await farm.ContainersAsync())
                {
                    Assert.Equal(container.Epoch, await farm.StoredEpochAsync(container));
                }
                var lateContainer = taken.Single(c => c.Id == queues[lateQueue]);
                Assert.Equal(0, await farm.CountMessagesAsync(lateContainer, lateId));
                Assert.False(load.WasReceived(lateId), $"{lateId}, sent to the cut-off node, was delivered");
                failed = false;
            }
            finally
            {
                load?.Abandon();
                foreach (var node in nodes)
                {
                    node.Dispose();
                }
            }
        }
        finally
        {
            if (failed)
            {
                var kept = Path.Combine(Path.GetTempPath(), $"farm-partition-logs-{Environment.ProcessId}");
                Directory.CreateDirectory(kept);
                foreach (var log in Directory.GetFiles(run, "*.log"))
                {
                    File.Copy(log, Path.Combine(kept, Path.GetFileName(log)), overwrite: true);
                }
                output.WriteLine($"node logs kept in {kept}");
            }
            Directory.Delete(run, recursive: true);
            output.WriteLine($"test took {clock.Elapsed.TotalSeconds:0.0} s");
        }
    }

    /// <summary>Every container owned by one of <paramref name="nodes"/>, each live and active, the same number each.</summary>
    private static Task WaitUntilBalancedAsync(FarmDatabaseView farm, long[] nodes, TimeSpan deadline, IReadOnlyList<NamespacedNode> logs)
    {
        var last = "";
        return PollAsync(async () =>
        {
            var live = (await farm.NodesAsync()).Where(n => n.State == "active" && n.HeartbeatAge < NodeTimeout).Select(n => n.Id).Order().ToList();
            var containers = await farm.ContainersAsync();
            var counts = nodes.Select(n => containers.Count(c => c.Owner == n)).ToList();
            last = $"live nodes {string.Join(",", live)}; containers per node {string.Join("/", counts)}; unowned {containers.Count(c => c.Owner is null)}";
            return live.SequenceEqual(nodes) && containers.Count == Containers && counts.All(c => c == Containers / nodes.Length) ? last : null;
        }, deadline, () => $"the farm to balance ({last})", () => DiagnoseAsync(farm, logs));
    }

    /// <summary>Polls until the probe returns something, failing with the nodes' last log lines at the deadline.</summary>
    private static async Task<T> PollAsync<T>(Func<Task<T?>> probe, TimeSpan deadline, Func<string> what, Func<Task<string>> diagnose)
        where T : class
    {
        T? found = null;
        if (!await Eventually.HoldsWithinAsync(async () => (found = await probe()) is not null, deadline, TimeSpan.FromMilliseconds(100)))
        {
            Assert.Fail($"timed out after {deadline} waiting for {what()}{Environment.NewLine}{await diagnose()}");
        }
        return found!;
    }

    /// <summary>The farm as the database sees it, what each server session waits for, and the nodes' last log lines.</summary>
    private static async Task<string> DiagnoseAsync(FarmDatabaseView farm, IReadOnlyList<NamespacedNode> nodes)
    {
        var text = new System.Text.StringBuilder();
        text.AppendLine("containers: " + string.Join(", ", (await farm.ContainersAsync()).Select(c => $"{c.Id}: node {c.Owner?.ToString(CultureInfo.InvariantCulture) ?? "-"} epoch {c.Epoch}")));
        text.AppendLine("nodes: " + string.Join(", ", (await farm.NodesAsync()).Select(n => $"{n.Id}: {n.State} heartbeat {n.HeartbeatAge.TotalSeconds:0.0} s ago")));
        text.AppendLine("sessions (database | client | state | wait | xact s | query):");
        text.AppendLine(await farm.DescribeSessionsAsync());
        foreach (var node in nodes)
        {
            text.AppendLine($"--- node {node.Id} ---").AppendLine(node.Tail(15));
        }
        return text.ToString();
    }
}

/// <summary>The farm database and the container databases, read straight from the server (from the host, whatever the nodes' network does).</summary>
internal sealed class FarmDatabaseView(ThrowawayPostgres postgres)
{
    internal sealed record ContainerRow(long Id, long? Owner, long Epoch, string Database);

    internal sealed record NodeRow(long Id, string State, TimeSpan HeartbeatAge);

    public async Task<IReadOnlyList<ContainerRow>> ContainersAsync()
    {
        var rows = new List<ContainerRow>();
        await using var connection = new NpgsqlConnection(postgres.LocalConnectionString("farm"));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand("SELECT id, owner_node, epoch, connection_string FROM containers ORDER BY id", connection);
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            var database = new NpgsqlConnectionStringBuilder(reader.GetString(3)).Database ?? "";
            rows.Add(new ContainerRow(reader.GetInt64(0), reader.IsDBNull(1) ? null : reader.GetInt64(1), reader.GetInt64(2), database));
        }
        return rows;
    }

    public async Task<IReadOnlyList<NodeRow>> NodesAsync()
    {
        var rows = new List<NodeRow>();
        await using var connection = new NpgsqlConnection(postgres.LocalConnectionString("farm"));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand("SELECT id, state, statement_timestamp() - heartbeat_at FROM nodes ORDER BY id", connection);
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            rows.Add(new NodeRow(reader.GetInt64(0), reader.GetString(1), reader.GetFieldValue<TimeSpan>(2)));
        }
        return rows;
    }

    /// <summary>The owner epoch stored in the container database: the fence every write checks.</summary>
    public async Task<long> StoredEpochAsync(ContainerRow container)
    {
        await using var connection = new NpgsqlConnection(postgres.LocalConnectionString(container.Database));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand("SELECT epoch FROM owner WHERE id = 1", connection);
        return (long)(await command.ExecuteScalarAsync())!;
    }

    /// <summary>What every server session is doing and waiting for, for a failure message.</summary>
    public async Task<string> DescribeSessionsAsync()
    {
        var lines = new List<string>();
        await using var connection = new NpgsqlConnection(postgres.LocalConnectionString("postgres"));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand(
            """
            SELECT datname, client_addr::text, state, wait_event_type, wait_event,
                   round(extract(epoch FROM statement_timestamp() - xact_start)::numeric, 1), left(query, 80)
            FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY datname, client_addr
            """, connection);
        await using var reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            var values = Enumerable.Range(0, reader.FieldCount).Select(i => reader.IsDBNull(i) ? "-" : Convert.ToString(reader.GetValue(i), CultureInfo.InvariantCulture));
            lines.Add(string.Join(" | ", values));
        }
        return string.Join(Environment.NewLine, lines);
    }

    public async Task<long> CountMessagesAsync(ContainerRow container, string messageId)
    {
        await using var connection = new NpgsqlConnection(postgres.LocalConnectionString(container.Database));
        await connection.OpenAsync();
        await using var command = new NpgsqlCommand("SELECT count(*) FROM messages WHERE message_id = $1", connection)
        {
            Parameters = { new NpgsqlParameter<string> { TypedValue = messageId } },
        };
        return (long)(await command.ExecuteScalarAsync())!;
    }
}
