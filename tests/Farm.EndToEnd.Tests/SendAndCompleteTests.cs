using Farm.Client;
using Farm.Testing;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The SDK's send that completes what it forwards (FarmSender.SendMessageAndCompleteAsync, a
/// processor's args.SendMessageAndCompleteAsync) against a real node: one transaction when both
/// entities share a container, a clear refusal (and the lock still held) when they do not.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class SendAndCompleteTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    private string Connection => fixture.Farm.ConnectionString;

    private static string NewName() => "via-" + Guid.NewGuid().ToString("N")[..12];

    /// <summary>Queues created together in one container (the farm places a new queue in its emptiest container otherwise).</summary>
    private async Task<string[]> CreateQueuesAsync(int count, long? containerId = null)
    {
        using var admin = new FarmAdministrationClient(Connection);
        var names = new string[count];
        for (var i = 0; i < count; i++)
        {
            names[i] = NewName();
            var created = await admin.CreateQueueAsync(new CreateQueueOptions(names[i]) { ContainerId = containerId });
            containerId = created.ContainerId;
        }
        return names;
    }

    private async Task<long> TotalAsync(string queue)
    {
        using var admin = new FarmAdministrationClient(Connection);
        return (await admin.GetQueueRuntimePropertiesAsync(queue)).TotalMessageCount;
    }

    /// <summary>
    /// A three-queue chain whose handlers forward with args.SendMessageAndCompleteAsync: every
    /// message reaches the end once, the queues it passed are empty, and no handler's message was
    /// completed a second time (the processor's auto-complete knows it is settled).
    /// </summary>
    [Fact]
    public async Task AProcessorChain_ForwardingWithSendAndComplete_DeliversEachMessageOnce_AndLeavesNothingBehind()
    {
        const int count = 40;
        var queues = await CreateQueuesAsync(3);
        await using var client = new FarmClient(Connection);
        var errors = new List<Exception>();
        var processors = new List<FarmProcessor>();
        for (var hop = 0; hop < 2; hop++)
        {
            var next = client.CreateSender(queues[hop + 1]);
            var processor = client.CreateProcessor(queues[hop], new FarmProcessorOptions { MaxConcurrentCalls = 4 });
            processor.ProcessMessageAsync += args => args.SendMessageAndCompleteAsync(next, new FarmMessage(args.Message), args.CancellationToken);
            processor.ProcessErrorAsync += args =>
            {
                lock (errors)
                {
                    errors.Add(args.Exception);
                }
                return Task.CompletedTask;
            };
            await processor.StartProcessingAsync();
            processors.Add(processor);
        }

        await using (var sender = client.CreateSender(queues[0]))
        {
            await sender.SendMessagesAsync(Enumerable.Range(0, count).Select(i => new FarmMessage($"m{i}") { MessageId = $"m{i}" }));
        }
        await using var end = client.CreateReceiver(queues[2], new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var arrived = new List<string>();
        await Eventually.UntilAsync(async () =>
        {
            arrived.AddRange((await end.ReceiveMessagesAsync(count, TimeSpan.FromMilliseconds(500))).Select(m => m.MessageId!));
            return arrived.Count >= count;
        }, Patience, "every message at the end of the chain");
        foreach (var processor in processors)
        {
            await processor.StopProcessingAsync();
        }

        Assert.Equal(Enumerable.Range(0, count).Select(i => $"m{i}").Order(), arrived.Order());
        Assert.Null(await end.ReceiveMessageAsync(TimeSpan.FromMilliseconds(300)));
        Assert.Equal(0, await TotalAsync(queues[0]));
        Assert.Equal(0, await TotalAsync(queues[1]));
        Assert.Empty(errors);
    }

    [Fact]
    public async Task WhenTheLockIsGone_TheSendFailsWithMessageLockLost_AndNothingIsSent()
    {
        var queues = await CreateQueuesAsync(2);
        await using var client = new FarmClient(Connection);
        await using (var sender = client.CreateSender(queues[0]))
        {
            await sender.SendMessageAsync(new FarmMessage("work"));
        }
        await using var receiver = client.CreateReceiver(queues[0]);
        var received = await receiver.ReceiveMessageAsync(Patience);
        Assert.NotNull(received);
        await receiver.CompleteMessageAsync(received);
        await using var forward = client.CreateSender(queues[1]);

        var failure = await Assert.ThrowsAsync<FarmException>(() => forward.SendMessageAndCompleteAsync(new FarmMessage(received), received));

        Assert.Equal(FarmFailureReason.MessageLockLost, failure.Reason);
        Assert.Equal(0, await TotalAsync(queues[1]));
    }

    /// <summary>
    /// Two containers are two databases, so no one transaction: the send is refused with
    /// NotSupported before anything is stored, and the received message is still locked by its
    /// receiver, which completes it the ordinary way.
    /// </summary>
    [Fact]
    public async Task AcrossContainers_TheSendIsRefusedWithNotSupported_AndTheLockIsStillHeld()
    {
        using var admin = new FarmAdministrationClient(Connection);
        var other = await admin.CreateContainerAsync();
        await Eventually.UntilAsync(async () => (await admin.GetContainersAsync()).Any(c => c.Id == other.Id && c.OwnerNode is not null),
            TimeSpan.FromSeconds(60), $"container {other.Id} to be owned");
        var first = (await admin.GetContainersAsync()).First(c => c.Id != other.Id);
        var from = (await CreateQueuesAsync(1, first.Id))[0];
        var to = (await CreateQueuesAsync(1, other.Id))[0];
        Assert.NotEqual((await admin.GetQueueAsync(from)).ContainerId, (await admin.GetQueueAsync(to)).ContainerId);
        await using var client = new FarmClient(Connection);
        await using (var sender = client.CreateSender(from))
        {
            await sender.SendMessageAsync(new FarmMessage("work"));
        }
        await using var receiver = client.CreateReceiver(from);
        var received = await receiver.ReceiveMessageAsync(Patience);
        Assert.NotNull(received);
        await using var forward = client.CreateSender(to);

        var failure = await Assert.ThrowsAsync<FarmException>(() => forward.SendMessageAndCompleteAsync(new FarmMessage(received), received));

        Assert.Equal(FarmFailureReason.NotSupported, failure.Reason);
        Assert.Contains("different message containers", failure.Message);
        Assert.Equal(0, await TotalAsync(to));
        await receiver.CompleteMessageAsync(received);
        Assert.Equal(0, await TotalAsync(from));
    }

    [Fact]
    public async Task AMessageReceivedWithoutALock_OrMessagesOfTwoEntities_AreRefusedBeforeSending()
    {
        var queues = await CreateQueuesAsync(3);
        await using var client = new FarmClient(Connection);
        foreach (var queue in queues[..2])
        {
            await using var sender = client.CreateSender(queue);
            await sender.SendMessagesAsync([new FarmMessage("a"), new FarmMessage("b")]);
        }
        await using var deleting = client.CreateReceiver(queues[0], new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        await using var locking0 = client.CreateReceiver(queues[0]);
        await using var locking1 = client.CreateReceiver(queues[1]);
        var unlocked = (await deleting.ReceiveMessageAsync(Patience))!;
        var fromFirst = (await locking0.ReceiveMessageAsync(Patience))!;
        var fromSecond = (await locking1.ReceiveMessageAsync(Patience))!;
        await using var forward = client.CreateSender(queues[2]);

        await Assert.ThrowsAsync<InvalidOperationException>(() => forward.SendMessageAndCompleteAsync(new FarmMessage("x"), unlocked));
        await Assert.ThrowsAsync<ArgumentException>(() => forward.SendMessagesAndCompleteAsync([new FarmMessage("x")], [fromFirst, fromSecond]));

        Assert.Equal(0, await TotalAsync(queues[2]));
    }
}
