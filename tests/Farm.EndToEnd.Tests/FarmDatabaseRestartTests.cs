using Farm.Client;
using Farm.Testing;
using Npgsql;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A PostgreSQL farm tells a crashed node by its session lock in the farm database (the server
/// ends a dead process's session). A restart of that server ends every node's session at once:
/// the nodes take their locks again on new sessions, and none takes the others for crashed
/// (their locks were free only because every session was new), and nothing acknowledged is lost.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class FarmDatabaseRestartTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(60);

    /// <summary>PostgresSql.NodeLocks.Space: "Farm" in ASCII, the first key of every node lock.</summary>
    private const long NodeLockSpace = 0x4661726D;

    [PostgresFarmFact]
    public async Task ARestartOfTheFarmDatabasesServer_EndsEveryNodesSession_AndNoNodeIsTakenForCrashed()
    {
        await using var server = await ThrowawayPostgres.StartAsync([], "127.0.0.1/32", output.WriteLine);
        await server.CreateDatabaseAsync("farm");
        await using var farm = LocalFarm.Create();
        var up = await farm.RunAsync("up", "--detach", "--port", "0", "--nodes", "3", "--store", "postgres", "--farm-connection", server.ConnectionString("127.0.0.1", "farm"));
        Assert.True(up.ExitCode == 0, $"farm up --store postgres failed: {up}");
        var connection = up.Stdout.Trim();
        var created = await farm.RunAsync("container", "create", "--count", "2");
        Assert.True(created.ExitCode == 0, created.ToString());
        using var admin = new FarmAdministrationClient(connection);
        await Eventually.UntilAsync(async () => (await admin.GetContainersAsync()).Select(c => c.OwnerNode).Distinct().Count() == 3, Deadline, "each node to own a container");
        await Eventually.UntilAsync(async () => await NodeLocksHeldAsync(server) == 3, Deadline, "the three nodes to hold their session locks");

        var queue = await admin.CreateQueueAsync(new CreateQueueOptions("restart-orders") { MaxDeliveryCount = 100 });
        await using var client = new FarmClient(connection);
        await using var sender = client.CreateSender(queue.Name);
        var acknowledged = new HashSet<string>();
        for (var i = 0; i < 20; i++)
        {
            await sender.SendMessageAsync(new FarmMessage($"order {i}") { MessageId = $"before-{i}" });
            acknowledged.Add($"before-{i}");
        }

        await server.StopAsync();
        await server.StartAgainAsync();
        output.WriteLine("restarted the farm database's server");

        // Every node takes its lock again, on a new session.
        await Eventually.UntilAsync(async () => await NodeLocksHeldAsync(server) == 3, Deadline, "the three nodes to hold their session locks again");
        await Eventually.UntilAsync(async () =>
        {
            try
            {
                using var attempt = new CancellationTokenSource(TimeSpan.FromSeconds(5));
                await sender.SendMessageAsync(new FarmMessage("after") { MessageId = "after" }, attempt.Token);
                return true;
            }
            catch (Exception e) when (e is FarmException or OperationCanceledException)
            {
                return false;
            }
        }, Deadline, "the queue to take sends again");
        acknowledged.Add("after");

        await using var receiver = client.CreateReceiver(queue.Name, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var received = new HashSet<string>();
        using var deadline = new CancellationTokenSource(Deadline);
        while (!acknowledged.All(received.Contains))
        {
            foreach (var message in await receiver.ReceiveMessagesAsync(50, TimeSpan.FromSeconds(2), deadline.Token))
            {
                received.Add(message.MessageId!);
            }
        }
        Assert.Superset(acknowledged, received);

        var logs = string.Join('\n', new[] { 1, 2, 3 }.Select(n => File.ReadAllText(Path.Combine(farm.DataDirectory, "logs", $"node-{n}.log"))));
        Assert.DoesNotContain("session with the farm database ended", logs, StringComparison.Ordinal);
        await farm.DownAsync(kill: false);
    }

    /// <summary>How many node session locks (Farm's key space) are granted in the farm database.</summary>
    private static async Task<int> NodeLocksHeldAsync(ThrowawayPostgres server)
    {
        try
        {
            await using var connection = new NpgsqlConnection(server.LocalConnectionString("farm"));
            await connection.OpenAsync();
            await using var command = new NpgsqlCommand(
                "SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = 'farm') AND classid = $1::oid AND objsubid = 2",
                connection)
            {
                Parameters = { new NpgsqlParameter<long> { TypedValue = NodeLockSpace } },
            };
            return (int)(await command.ExecuteScalarAsync())!;
        }
        catch (NpgsqlException)
        {
            return -1;
        }
    }
}
