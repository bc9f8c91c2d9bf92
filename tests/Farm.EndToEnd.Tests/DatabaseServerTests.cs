using Farm.Client;
using Farm.Testing;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A PostgreSQL farm spread over two database servers (`farm server add`, `farm container create
/// --server`): a queue on each. When the second server stops, only its container stops serving; the
/// queue on the farm's own server keeps serving; when it starts again its queue serves again with
/// every acknowledged message. Bad placement gets one clear line.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class DatabaseServerTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(60);

    [PostgresFarmFact]
    public async Task AFarmOnTwoServers_KeepsServingTheOthersQueues_WhenOneServerStops_AndLosesNothing()
    {
        await using var database = await PostgresFarmDatabase.CreateAsync();
        await using var second = await ThrowawayPostgres.StartAsync([], "127.0.0.1/32", output.WriteLine);
        await using var farm = LocalFarm.Create();
        var up = await farm.RunAsync("up", "--detach", "--port", "0", "--store", "postgres", "--farm-connection", database.ConnectionString);
        Assert.True(up.ExitCode == 0, $"farm up --store postgres failed: {up}");
        var connection = up.Stdout.Trim();

        var secondConnection = second.ConnectionString("127.0.0.1", "postgres");
        var added = await farm.RunAsync("server", "add", "second", "--connection", secondConnection);
        var created = await farm.RunAsync("container", "create", "--server", "second");
        var unknown = await farm.RunAsync("container", "create", "--server", "nope");
        var unreachable = await farm.RunAsync("server", "add", "gone", "--connection", "Host=127.0.0.1;Port=1;Username=farm;Password=secret");
        var listed = await farm.RunAsync("server", "list");

        Assert.True(added.ExitCode == 0, added.ToString());
        Assert.DoesNotContain(second.Password, added.Stdout, StringComparison.Ordinal);
        Assert.True(created.ExitCode == 0, created.ToString());
        Assert.Equal("Created container 2.", created.Stdout.Trim());
        Assert.NotEqual(0, unknown.ExitCode);
        Assert.Contains("no database server 'nope'", unknown.Stderr, StringComparison.Ordinal);
        Assert.Single(unknown.Stderr.Trim().Split('\n'));
        Assert.NotEqual(0, unreachable.ExitCode);
        Assert.Contains("Cannot reach the PostgreSQL server 127.0.0.1:1", unreachable.Stderr, StringComparison.Ordinal);
        Assert.Matches(@"second\s+1\s+", listed.Stdout);
        Assert.DoesNotContain("gone", listed.Stdout, StringComparison.Ordinal);

        using var admin = new FarmAdministrationClient(connection);
        await admin.CreateQueueAsync(new CreateQueueOptions("home") { ContainerId = 1 });
        await admin.CreateQueueAsync(new CreateQueueOptions("away") { ContainerId = 2 });
        Assert.Equal("second", (await admin.GetContainersAsync()).Single(c => c.Id == 2).Server);
        var status = await farm.RunAsync("status");
        Assert.Matches(@"(?m)^2\s+1\s+\d+\s+1\s+\S+ \S+\s+second\s*$", status.Stdout);

        await using var client = new FarmClient(connection);
        await using var home = client.CreateSender("home");
        await using var away = client.CreateSender("away");
        var acknowledged = new List<string>();
        for (var i = 0; i < 10; i++)
        {
            await away.SendMessageAsync(new FarmMessage($"away {i}") { MessageId = $"away-{i}" });
            acknowledged.Add($"away-{i}");
        }

        // The second server goes away: only its container stops; the farm's own server serves on.
        await second.StopAsync();
        using (var refused = new CancellationTokenSource(TimeSpan.FromSeconds(8)))
        {
            await Assert.ThrowsAnyAsync<Exception>(() => away.SendMessageAsync(new FarmMessage("lost?") { MessageId = "away-while-down" }, refused.Token));
        }
        for (var i = 0; i < 10; i++)
        {
            await home.SendMessageAsync(new FarmMessage($"home {i}"));
        }
        Assert.Equal(10, (await admin.GetQueueRuntimePropertiesAsync("home")).ActiveMessageCount);

        // Back: its queue serves again, with every acknowledged message.
        await second.StartAgainAsync();
        await Eventually.UntilAsync(async () =>
        {
            try
            {
                using var attempt = new CancellationTokenSource(TimeSpan.FromSeconds(5));
                await away.SendMessageAsync(new FarmMessage("back") { MessageId = "away-back" }, attempt.Token);
                return true;
            }
            catch (Exception e) when (e is FarmException or OperationCanceledException)
            {
                return false;
            }
        }, Deadline, "the queue on the second server to take sends again");
        acknowledged.Add("away-back");

        await using var receiver = client.CreateReceiver("away", new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var ids = new HashSet<string>();
        using var deadline = new CancellationTokenSource(Deadline);
        while (!acknowledged.All(ids.Contains))
        {
            foreach (var message in await receiver.ReceiveMessagesAsync(50, TimeSpan.FromSeconds(2), deadline.Token))
            {
                ids.Add(message.MessageId!);
            }
        }
        Assert.Subset(ids, acknowledged.ToHashSet());
        await farm.DownAsync(kill: false);
    }
}
