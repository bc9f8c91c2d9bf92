using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Purging through the CLI (`farm queue purge`) and the SDK (FarmReceiver.PurgeMessagesAsync,
/// DeleteMessagesAsync) on a real farm: what a receiver could take goes, from the queue and from
/// its dead-letter queue; a locked message stays; bad input gets a clear error and deletes nothing.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class PurgeTests
{
    [Fact]
    public async Task FarmQueuePurge_EmptiesTheQueueAndItsDeadLetterQueue_ButNotALockedMessage()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 1);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateQueueAsync(new CreateQueueOptions("orders") { LockDuration = TimeSpan.FromMinutes(5) });
        await admin.CreateTopicAsync(new CreateTopicOptions("events"));
        await using var client = new FarmClient(farm.ConnectionString);
        await using (var sender = client.CreateSender("orders"))
        {
            await sender.SendMessagesAsync([.. Enumerable.Range(1, 30).Select(i => new FarmMessage($"order {i}"))]);
        }
        await using var receiver = client.CreateReceiver("orders");
        var held = await receiver.ReceiveMessagesAsync(6, TimeSpan.FromSeconds(10));
        Assert.Equal(6, held.Count);
        foreach (var message in held.Skip(1))
        {
            await receiver.DeadLetterMessageAsync(message, "test", "purge me");
        }

        var queue = await farm.RunAsync("queue", "purge", "orders");
        var deadLetters = await farm.RunAsync("queue", "purge", "orders", "--dead-letter-queue");
        var again = await farm.RunAsync("queue", "purge", "orders");
        var topic = await farm.RunAsync("queue", "purge", "events");
        var missing = await farm.RunAsync("queue", "purge", "nope");

        Assert.True(queue.ExitCode == 0, queue.ToString());
        Assert.Equal("Purged 24 message(s) from orders", queue.Stdout.Trim());
        Assert.Equal("Purged 5 message(s) from orders/$DeadLetterQueue", deadLetters.Stdout.Trim());
        Assert.Equal("Purged 0 message(s) from orders", again.Stdout.Trim());
        Assert.NotEqual(0, topic.ExitCode);
        Assert.Contains("events", topic.Stderr, StringComparison.Ordinal);
        Assert.NotEqual(0, missing.ExitCode);
        Assert.Contains("nope", missing.Stderr, StringComparison.Ordinal);

        var counts = await admin.GetQueueRuntimePropertiesAsync("orders");
        Assert.Equal((1L, 0L), (counts.ActiveMessageCount, counts.DeadLetterMessageCount));
        await receiver.CompleteMessageAsync(held[0]);
        Assert.Equal(0, (await admin.GetQueueRuntimePropertiesAsync("orders")).ActiveMessageCount);
    }

    [Fact]
    public async Task TheSdk_DeletesInBoundedCalls_AndPurgesWhatIsLeft()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 1);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateQueueAsync(new CreateQueueOptions("jobs"));
        await using var client = new FarmClient(farm.ConnectionString);
        await using (var sender = client.CreateSender("jobs"))
        {
            await sender.SendMessagesAsync([.. Enumerable.Range(1, 250).Select(i => new FarmMessage($"job {i}"))]);
        }
        await using var receiver = client.CreateReceiver("jobs");

        Assert.Equal(100, await receiver.DeleteMessagesAsync(100));
        Assert.Equal(150, await receiver.PurgeMessagesAsync());
        Assert.Equal(0, await receiver.PurgeMessagesAsync());
        Assert.Null(await receiver.PeekMessageAsync(fromSequenceNumber: 0));
        await Assert.ThrowsAsync<ArgumentOutOfRangeException>(() => receiver.DeleteMessagesAsync(0));
    }
}
