using Farm.Client;
using Farm.Testing;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The explorer operations on a real farm, through the CLI and the SDK: purging (`farm queue
/// purge`, FarmReceiver.PurgeMessagesAsync and DeleteMessagesAsync) takes what a receiver could
/// take, from a queue and from its dead-letter queue, and leaves a locked message; resubmitting
/// (`farm dead-letter resubmit`, ResubmitDeadLetteredMessagesAsync) moves dead letters back. Bad
/// input gets a clear error and changes nothing.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class ExplorerTests
{
    /// <summary>Receives (peek-lock) until <paramref name="count"/> messages came, within 30 s.</summary>
    private static async Task<List<FarmReceivedMessage>> ReceiveAsync(FarmReceiver receiver, int count)
    {
        var received = new List<FarmReceivedMessage>();
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        while (received.Count < count)
        {
            received.AddRange(await receiver.ReceiveMessagesAsync(count - received.Count, TimeSpan.FromSeconds(5), deadline.Token));
        }
        return received;
    }

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
        var held = await ReceiveAsync(receiver, 6);
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

    [Fact]
    public async Task DeadLetterResubmit_MovesDeadLettersBack_ByNumberAndByCount()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 1);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateQueueAsync(new CreateQueueOptions("orders"));
        await using var client = new FarmClient(farm.ConnectionString);
        await using (var sender = client.CreateSender("orders"))
        {
            await sender.SendMessagesAsync([.. Enumerable.Range(1, 4).Select(i => new FarmMessage($"order {i}") { MessageId = $"o-{i}" })]);
        }
        await using var receiver = client.CreateReceiver("orders");
        var first = await ReceiveAsync(receiver, 4);
        foreach (var message in first)
        {
            await receiver.DeadLetterMessageAsync(message, "bad", "try again later");
        }

        var one = await farm.RunAsync("dead-letter", "resubmit", "orders", "--sequence-number", first[1].SequenceNumber.ToString(System.Globalization.CultureInfo.InvariantCulture));
        var bySdk = await receiver.ResubmitDeadLetteredMessagesAsync(maxMessages: 1);
        var rest = await farm.RunAsync("dead-letter", "resubmit", "orders");
        var both = await farm.RunAsync("dead-letter", "resubmit", "orders", "--count", "1", "--sequence-number", "1");
        var gone = await farm.RunAsync("dead-letter", "resubmit", "orders", "--sequence-number", first[0].SequenceNumber.ToString(System.Globalization.CultureInfo.InvariantCulture));

        Assert.True(one.ExitCode == 0, one.ToString());
        Assert.Equal("Resubmitted 1 message(s) to orders", one.Stdout.Trim());
        Assert.Equal(1, bySdk);
        Assert.Equal("Resubmitted 2 message(s) to orders", rest.Stdout.Trim());
        Assert.NotEqual(0, both.ExitCode);
        Assert.Contains("not both", both.Stderr, StringComparison.Ordinal);
        Assert.NotEqual(0, gone.ExitCode);
        Assert.Contains("is not in the dead-letter queue", gone.Stderr, StringComparison.Ordinal);

        var counts = await admin.GetQueueRuntimePropertiesAsync("orders");
        Assert.Equal((4L, 0L), (counts.ActiveMessageCount, counts.DeadLetterMessageCount));
        var again = await ReceiveAsync(receiver, 4);
        Assert.Equal(["o-2", "o-1", "o-3", "o-4"], again.Select(m => m.MessageId));
        Assert.All(again, m => Assert.Equal(1, m.DeliveryCount));
    }

    [Fact]
    public async Task DeadLetterResubmit_OfASubscription_PutsItsMessagesBackInPlace()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 1);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateTopicAsync(new CreateTopicOptions("events"));
        await admin.CreateSubscriptionAsync(new CreateSubscriptionOptions("events", "audit"));
        await using var client = new FarmClient(farm.ConnectionString);
        await using (var sender = client.CreateSender("events"))
        {
            await sender.SendMessagesAsync([.. Enumerable.Range(1, 3).Select(i => new FarmMessage($"event {i}") { MessageId = $"e-{i}" })]);
        }
        await using var receiver = client.CreateReceiver("events", "audit");
        foreach (var message in await ReceiveAsync(receiver, 3))
        {
            await receiver.DeadLetterMessageAsync(message, "bad", "later");
        }

        var byCli = await farm.RunAsync("dead-letter", "resubmit", "events/Subscriptions/audit", "--count", "2");
        var bySdk = await receiver.ResubmitDeadLetteredMessagesAsync();

        Assert.True(byCli.ExitCode == 0, byCli.ToString());
        Assert.Equal("Resubmitted 2 message(s) to events/Subscriptions/audit", byCli.Stdout.Trim());
        Assert.Equal(1, bySdk);
        var again = await ReceiveAsync(receiver, 3);
        Assert.Equal(["e-1", "e-2", "e-3"], again.Select(m => m.MessageId));
        Assert.All(again, m => Assert.Equal(1, m.DeliveryCount));
    }

    /// <summary>
    /// A node killed (SIGKILL) in the middle of resubmitting thousands of dead letters: after it
    /// comes back each message is in exactly one place, the queue or its dead-letter queue, never
    /// both and never neither. A dead-letter queue lives in its entity's container, so both halves
    /// of a resubmit are one transaction there.
    /// </summary>
    [Fact]
    public async Task DeadLetterResubmit_KilledHalfway_LeavesEachMessageInExactlyOnePlace()
    {
        const int Count = 3000;
        await using var farm = await LocalFarm.StartAsync(nodes: 1);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        // Locks that run out past one delivery dead-letter the whole queue with no call per message.
        await admin.CreateQueueAsync(new CreateQueueOptions("crash") { LockDuration = TimeSpan.FromSeconds(1), MaxDeliveryCount = 1 });
        await using (var client = new FarmClient(farm.ConnectionString))
        {
            await using (var sender = client.CreateSender("crash"))
            {
                foreach (var chunk in Enumerable.Range(0, Count).Chunk(500))
                {
                    await sender.SendMessagesAsync([.. chunk.Select(i => new FarmMessage($"message {i}") { MessageId = $"m-{i}" })]);
                }
            }
            await using var receiver = client.CreateReceiver("crash");
            await ReceiveAsync(receiver, Count);
        }
        await Eventually.UntilAsync(async () => (await admin.GetQueueRuntimePropertiesAsync("crash")).DeadLetterMessageCount == Count,
            TimeSpan.FromSeconds(60), $"all {Count} messages to be dead-lettered");

        // Resubmit 10 at a time (one commit each) and kill the node once the first ones are back.
        var resubmitted = 0L;
        var firstBack = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var resubmitting = Task.Run(async () =>
        {
            await using var client = new FarmClient(farm.ConnectionString);
            await using var deadLetters = client.CreateReceiver("crash");
            try
            {
                while (true)
                {
                    Interlocked.Add(ref resubmitted, await deadLetters.ResubmitDeadLetteredMessagesAsync(maxMessages: 10));
                    firstBack.TrySetResult();
                }
            }
            catch (FarmException)
            {
                // The node died under it: what it did is what the invariant below checks.
            }
        });
        await firstBack.Task.WaitAsync(TimeSpan.FromSeconds(60));
        // SIGKILL from here at once: `farm node kill` starts a process first (hundreds of ms), and the
        // resubmits could all be done by then (the kill must land half way).
        using (var node = System.Diagnostics.Process.GetProcessById(farm.NodePid(1) ?? throw new InvalidOperationException("farm.json names no pid for node 1.")))
        {
            node.Kill();
            await node.WaitForExitAsync();
        }
        await resubmitting.WaitAsync(TimeSpan.FromSeconds(120));
        Assert.InRange(Interlocked.Read(ref resubmitted), 10, Count - 1);

        await farm.StartNodeAsync(1);
        await using var after = new FarmClient(farm.ConnectionString);
        var inQueue = await PeekAllIdsAsync(after, "crash");
        var inDeadLetters = await PeekAllIdsAsync(after, FarmEntityPath.FormatDeadLetterPath("crash"));

        Assert.Empty(inQueue.Intersect(inDeadLetters));
        Assert.Equal(inQueue.Count + inDeadLetters.Count, inQueue.Union(inDeadLetters).Count());
        Assert.Equal(Enumerable.Range(0, Count).Select(i => $"m-{i}").Order(StringComparer.Ordinal),
            inQueue.Concat(inDeadLetters).Order(StringComparer.Ordinal));
        Assert.True(inQueue.Count >= Interlocked.Read(ref resubmitted), $"{Interlocked.Read(ref resubmitted)} resubmits were acknowledged but only {inQueue.Count} messages are back in the queue");
    }

    /// <summary>Every message id of an entity (a queue or a dead-letter queue), peeked page by page; a duplicate fails.</summary>
    private static async Task<HashSet<string>> PeekAllIdsAsync(FarmClient client, string entity)
    {
        await using var receiver = client.CreateReceiver(entity);
        var ids = new HashSet<string>(StringComparer.Ordinal);
        long from = 0;
        while (true)
        {
            var page = await receiver.PeekMessagesAsync(500, fromSequenceNumber: from);
            if (page.Count == 0)
            {
                return ids;
            }
            foreach (var message in page)
            {
                Assert.True(ids.Add(message.MessageId!), $"{message.MessageId} is twice in {entity}");
            }
            from = page[^1].SequenceNumber + 1;
        }
    }
}
