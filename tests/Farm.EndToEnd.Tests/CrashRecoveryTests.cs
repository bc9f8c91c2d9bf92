using System.Security.Cryptography;
using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>The must-show: nothing acknowledged is lost when the node is SIGKILLed.</summary>
[Collection(FarmCollection.Name)]
public sealed class CrashRecoveryTests
{
    private const int MessageCount = 1000;
    private const int MessageSize = 1024;

    [Fact]
    public async Task SentMessages_SurviveSigkillAndRestart_AndAreReceivedExactlyOnce()
    {
        await using var farm = await LocalFarm.StartAsync();
        var create = await farm.RunAsync("queue", "create", "orders");
        Assert.True(create.ExitCode == 0, $"farm queue create failed: {create}");

        var sent = new Dictionary<string, byte[]>(MessageCount);
        await using (var client = new FarmClient(farm.ConnectionString))
        {
            await using var sender = client.CreateSender("orders");
            for (var batchStart = 0; batchStart < MessageCount; batchStart += 100)
            {
                var batch = new List<FarmMessage>();
                for (var i = batchStart; i < batchStart + 100; i++)
                {
                    var body = RandomNumberGenerator.GetBytes(MessageSize);
                    var id = $"order-{i:D4}-{Guid.NewGuid():N}";
                    sent.Add(id, body);
                    batch.Add(new FarmMessage(body) { MessageId = id });
                }

                var sequenceNumbers = await sender.SendMessagesAsync(batch);
                Assert.Equal(batch.Count, sequenceNumbers.Count);
            }
        }

        var killedPids = farm.NodePids();
        Assert.NotEmpty(killedPids);
        await farm.DownAsync(kill: true);

        await farm.UpAsync();
        Assert.Empty(killedPids.Intersect(farm.NodePids()));

        var received = new List<string>(MessageCount);
        await using (var client = new FarmClient(farm.ConnectionString))
        {
            await using var receiver = client.CreateReceiver("orders");
            var deadline = DateTime.UtcNow.AddSeconds(120);
            while (received.Count < MessageCount && DateTime.UtcNow < deadline)
            {
                var messages = await receiver.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(5));
                foreach (var message in messages)
                {
                    received.Add(message.MessageId!);
                    Assert.True(sent.TryGetValue(message.MessageId!, out var body), $"received a message that was never sent: {message.MessageId}");
                    Assert.True(body.AsSpan().SequenceEqual(message.Body.ToMemory().Span), $"the body of {message.MessageId} changed");
                    await receiver.CompleteMessageAsync(message);
                }
            }

            Assert.Equal(MessageCount, received.Count);
            Assert.Equal(MessageCount, received.Distinct().Count());
            Assert.Equal(sent.Keys.Order(StringComparer.Ordinal), received.Order(StringComparer.Ordinal));

            var extra = await receiver.ReceiveMessagesAsync(10, TimeSpan.FromSeconds(2));
            Assert.Empty(extra);
        }

        var counts = await farm.GetQueueCountsAsync("orders");
        Assert.Equal(0, counts.ActiveMessageCount);
        Assert.Equal(0, counts.LockedMessageCount);
        Assert.Equal(0, counts.TotalMessageCount);
    }
}
