using System.Text.Json;
using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A farm whose queues keep 1 MB of messages in memory (`farm up --message-cache-size-per-entity 1
/// --message-cache-size-per-node 2`) holding a queue three times deeper, and a topic whose slow
/// subscription is as far behind its fast one, on SQLite and on PostgreSQL: the node is SIGKILLed
/// and started again (`farm node start` reads the settings from farm.json), then every message
/// comes back exactly once, in sequence order, peek reaches the stored part, and the topic's
/// stored copies go once both subscriptions have them.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class DeepQueueFarmTests
{
    private const int Messages = 3000;

    [Fact]
    public async Task DeepQueueOnSqlite_SurvivesSigkill_AndDrainsInOrderExactlyOnce()
    {
        await using var farm = LocalFarm.Create();
        await RunAsync(farm, []);
    }

    [PostgresFarmFact]
    public async Task DeepQueueOnPostgres_SurvivesSigkill_AndDrainsInOrderExactlyOnce()
    {
        await using var database = await PostgresFarmDatabase.CreateAsync();
        await using var farm = LocalFarm.Create();
        await RunAsync(farm, ["--store", "postgres", "--farm-connection", database.ConnectionString]);
    }

    private static async Task RunAsync(LocalFarm farm, string[] store)
    {
        var up = await farm.RunAsync(["up", "--detach", "--port", "0", "--message-cache-size-per-entity", "1", "--message-cache-size-per-node", "2", .. store]);
        Assert.True(up.ExitCode == 0, $"farm up failed: {up}");
        var connection = up.Stdout.Trim();
        using (var record = JsonDocument.Parse(await File.ReadAllTextAsync(Path.Combine(farm.DataDirectory, "farm.json"))))
        {
            Assert.Equal(1, record.RootElement.GetProperty("message_cache_size_per_entity_mb").GetInt32());
            Assert.Equal(2, record.RootElement.GetProperty("message_cache_size_per_node_mb").GetInt32());
        }

        using var admin = new FarmAdministrationClient(connection);
        await admin.CreateQueueAsync(new CreateQueueOptions("deep"));
        await admin.CreateTopicAsync("events");
        await admin.CreateSubscriptionAsync("events", "fast");
        await admin.CreateSubscriptionAsync("events", "slow");
        await using (var client = new FarmClient(connection))
        await using (var sender = client.CreateSender("deep"))
        await using (var topicSender = client.CreateSender("events"))
        await using (var fast = client.CreateReceiver("events", "fast"))
        {
            for (var i = 0; i < Messages; i += 100)
            {
                await sender.SendMessagesAsync(Enumerable.Range(i, 100).Select(n => new FarmMessage(new string((char)('a' + (n % 26)), 1024)) { MessageId = $"deep-{n}" }));
                await topicSender.SendMessagesAsync(Enumerable.Range(i, 100).Select(n => new FarmMessage(new string('t', 1024)) { MessageId = $"event-{n}" }));
            }
            Assert.Equal(Enumerable.Range(0, Messages).Select(n => $"event-{n}"), (await DrainAsync(fast, Messages)).Select(m => m.MessageId));
        }

        await farm.KillNodeAsync(1);
        await farm.StartNodeAsync(1);

        // The restarted node serves at once and counts the stored tail meanwhile.
        await Farm.Testing.Eventually.UntilAsync(async () => (await admin.GetQueueRuntimePropertiesAsync("deep")).ActiveMessageCount == Messages,
            TimeSpan.FromSeconds(30), "the restarted node to count every message");
        await using (var client = new FarmClient(connection))
        await using (var receiver = client.CreateReceiver("deep"))
        {
            var peeked = await receiver.PeekMessagesAsync(10, fromSequenceNumber: 2990);
            Assert.Equal(Enumerable.Range(2990, 10).Select(n => (long)n), peeked.Select(m => m.SequenceNumber));

            var received = await DrainAsync(receiver, Messages);

            Assert.Equal(Enumerable.Range(0, Messages).Select(n => $"deep-{n}"), received.Select(m => m.MessageId));
            Assert.Equal(Enumerable.Range(1, Messages).Select(n => (long)n), received.Select(m => m.SequenceNumber));
            Assert.Empty(await receiver.ReceiveMessagesAsync(10, TimeSpan.FromSeconds(1)));
        }

        Assert.Equal(0, (await admin.GetQueueRuntimePropertiesAsync("deep")).TotalMessageCount);

        await Farm.Testing.Eventually.UntilAsync(async () => (await admin.GetSubscriptionRuntimePropertiesAsync("events", "slow")).ActiveMessageCount == Messages,
            TimeSpan.FromSeconds(30), "the slow subscription's tail to be counted");
        await using (var client = new FarmClient(connection))
        await using (var slow = client.CreateReceiver("events", "slow"))
        {
            var peeked = await slow.PeekMessagesAsync(10, fromSequenceNumber: 2990);
            Assert.Equal(Enumerable.Range(2990, 10).Select(n => $"event-{n - 1}"), peeked.Select(m => m.MessageId));
            Assert.Equal(Enumerable.Range(0, Messages).Select(n => $"event-{n}"), (await DrainAsync(slow, Messages)).Select(m => m.MessageId));
        }
        await Farm.Testing.Eventually.UntilAsync(async () => (await admin.GetTopicRuntimePropertiesAsync("events")).SizeInBytes == 0,
            TimeSpan.FromSeconds(30), "the topic's stored copies to go");
        await farm.DownAsync(kill: true);
    }

    /// <summary>Receives and completes until <paramref name="count"/> messages came (or two minutes passed).</summary>
    private static async Task<List<FarmReceivedMessage>> DrainAsync(FarmReceiver receiver, int count)
    {
        var received = new List<FarmReceivedMessage>();
        var deadline = DateTime.UtcNow.AddSeconds(120);
        while (received.Count < count && DateTime.UtcNow < deadline)
        {
            var batch = await receiver.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(5));
            foreach (var message in batch)
            {
                await receiver.CompleteMessageAsync(message);
            }
            received.AddRange(batch);
        }
        return received;
    }
}
