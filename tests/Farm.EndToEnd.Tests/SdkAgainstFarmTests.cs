using System.Collections.Concurrent;
using Farm.Client;
using Farm.Contracts;
using Grpc.Core;
using Farm.Contracts.V1;
using Farm.Testing;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;

namespace Farm.EndToEnd.Tests;

/// <summary>One real farm process, driven through the client SDK and the raw gRPC contract.</summary>
public sealed class SdkFarmFixture : IAsyncLifetime
{
    internal LocalFarm Farm { get; private set; } = null!;

    public async Task InitializeAsync() => Farm = await LocalFarm.StartAsync();

    public async Task DisposeAsync() => await Farm.DisposeAsync();
}

[Collection(FarmCollection.Name)]
public sealed class SdkAgainstFarmTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    private string Connection => fixture.Farm.ConnectionString;

    private static string NewQueueName() => "q-" + Guid.NewGuid().ToString("N")[..12];

    private async Task<string> CreateQueueAsync(Action<CreateQueueOptions>? configure = null)
    {
        var name = NewQueueName();
        var options = new CreateQueueOptions(name);
        configure?.Invoke(options);
        using var admin = new FarmAdministrationClient(Connection);
        await admin.CreateQueueAsync(options);
        return name;
    }

    [Fact]
    public async Task Message_RoundTrips_WithEveryKindOfProperty()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        var sent = new FarmMessage("hello")
        {
            MessageId = "id-1",
            CorrelationId = "corr",
            Subject = "subject",
            ContentType = "text/plain",
            To = "to",
            ReplyTo = "reply",
            TimeToLive = TimeSpan.FromHours(1),
        };
        var when = new DateTimeOffset(2026, 5, 4, 3, 2, 1, TimeSpan.Zero);
        var id = Guid.NewGuid();
        sent.ApplicationProperties["s"] = "text";
        sent.ApplicationProperties["i"] = 42;
        sent.ApplicationProperties["l"] = 1L << 40;
        sent.ApplicationProperties["d"] = 2.5;
        sent.ApplicationProperties["b"] = true;
        sent.ApplicationProperties["bytes"] = new byte[] { 1, 2, 3 };
        sent.ApplicationProperties["t"] = when;
        sent.ApplicationProperties["span"] = TimeSpan.FromSeconds(90);
        sent.ApplicationProperties["g"] = id;

        var sequence = await sender.SendMessageAsync(sent);
        await using var receiver = client.CreateReceiver(queue);
        var received = await receiver.ReceiveMessageAsync(Patience);

        Assert.NotNull(received);
        Assert.Equal(sequence, received.SequenceNumber);
        Assert.Equal("hello", received.Body.ToString());
        Assert.Equal(("id-1", "corr", "subject", "text/plain", "to", "reply"),
            (received.MessageId, received.CorrelationId, received.Subject, received.ContentType, received.To, received.ReplyTo));
        Assert.Equal(TimeSpan.FromHours(1), received.TimeToLive);
        Assert.Equal("text", received.ApplicationProperties["s"]);
        Assert.Equal(42, received.ApplicationProperties["i"]);
        Assert.Equal(1L << 40, received.ApplicationProperties["l"]);
        Assert.Equal(2.5, received.ApplicationProperties["d"]);
        Assert.Equal(true, received.ApplicationProperties["b"]);
        Assert.Equal(new byte[] { 1, 2, 3 }, received.ApplicationProperties["bytes"]);
        Assert.Equal(when, received.ApplicationProperties["t"]);
        Assert.Equal(TimeSpan.FromSeconds(90), received.ApplicationProperties["span"]);
        Assert.Equal(id, received.ApplicationProperties["g"]);
        Assert.Equal(1, received.DeliveryCount);
        await receiver.CompleteMessageAsync(received);
        Assert.Null(await receiver.PeekMessageAsync());
    }

    [Fact]
    public async Task Processor_HandlesEveryMessageOnce_AndCompletesThem()
    {
        const int count = 300;
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        for (var i = 0; i < count; i += 100)
        {
            await sender.SendMessagesAsync(Enumerable.Range(i, 100).Select(n => new FarmMessage($"m{n}") { MessageId = $"m{n}" }));
        }

        var seen = new ConcurrentDictionary<string, int>();
        var allSeen = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await using var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = 4 });
        processor.ProcessMessageAsync += args =>
        {
            seen.AddOrUpdate(args.Message.MessageId!, 1, (_, n) => n + 1);
            if (seen.Count == count)
            {
                allSeen.TrySetResult();
            }
            return Task.CompletedTask;
        };
        processor.ProcessErrorAsync += args =>
        {
            allSeen.TrySetException(args.Exception);
            return Task.CompletedTask;
        };
        await processor.StartProcessingAsync();
        await allSeen.Task.WaitAsync(TimeSpan.FromSeconds(60));
        await processor.StopProcessingAsync();

        Assert.All(seen.Values, n => Assert.Equal(1, n));
        await ProcessRunner.WaitUntilAsync(
            () => fixture.Farm.GetQueueCountsAsync(queue).GetAwaiter().GetResult().TotalMessageCount == 0,
            Patience, "the processor's completions to empty the queue");
    }

    /// <summary>
    /// A processor with one call at a time waits on its worker's reusable waiter between messages
    /// (FarmReceiver.WaitForMessageAsync): each message sent while it waits wakes it, in order; a stop
    /// while it waits ends the wait at once.
    /// </summary>
    [Fact]
    public async Task ProcessorWithOneCall_IsWokenByEachMessageSentWhileItWaits_AndStopsWhileWaiting()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        var handled = new BlockingCollection<string>();
        await using var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = 1 });
        processor.ProcessMessageAsync += args =>
        {
            handled.Add(args.Message.Body.ToString());
            return Task.CompletedTask;
        };
        processor.ProcessErrorAsync += args => Task.FromException(args.Exception);
        await processor.StartProcessingAsync();

        for (var i = 0; i < 10; i++)
        {
            // Each one sent once the one before was handled: the processor is waiting again by then.
            await sender.SendMessageAsync(new FarmMessage($"m{i}"));
            Assert.True(handled.TryTake(out var body, Patience), $"message m{i} was not handled");
            Assert.Equal($"m{i}", body);
        }

        await processor.StopProcessingAsync().WaitAsync(Patience);
        Assert.False(processor.IsProcessing);
        await ProcessRunner.WaitUntilAsync(
            () => fixture.Farm.GetQueueCountsAsync(queue).GetAwaiter().GetResult().TotalMessageCount == 0,
            Patience, "the processor's completions to empty the queue");
    }

    /// <summary>
    /// A processor with several calls parks each waiting worker on the link, and each message
    /// buffered wakes one of them: messages sent one at a time while earlier handlers are still
    /// busy each reach a free worker, until every call is busy at once; and a stop while they all
    /// wait ends the waits at once.
    /// </summary>
    [Fact]
    public async Task ProcessorWithFourCalls_HandsEachMessageToAParkedWorker_WhileTheOthersAreBusy()
    {
        const int calls = 4;
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        var started = new BlockingCollection<string>();
        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var running = 0;
        var mostAtOnce = 0;
        await using var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = calls });
        processor.ProcessMessageAsync += async args =>
        {
            var now = Interlocked.Increment(ref running);
            InterlockedMax(ref mostAtOnce, now);
            started.Add(args.Message.Body.ToString());
            await release.Task;
            Interlocked.Decrement(ref running);
        };
        processor.ProcessErrorAsync += args => Task.FromException(args.Exception);
        await processor.StartProcessingAsync();

        for (var i = 0; i < calls; i++)
        {
            // Sent once the one before is in a handler that does not return: the others wait.
            await sender.SendMessageAsync(new FarmMessage($"m{i}"));
            Assert.True(started.TryTake(out var body, Patience), $"message m{i} reached no worker while {i} were busy");
            Assert.Equal($"m{i}", body);
        }
        Assert.Equal(calls, Volatile.Read(ref mostAtOnce));
        release.SetResult();

        for (var i = calls; i < calls + 10; i++)
        {
            await sender.SendMessageAsync(new FarmMessage($"m{i}"));
            Assert.True(started.TryTake(out var body, Patience), $"message m{i} was not handled");
            Assert.Equal($"m{i}", body);
        }

        await ProcessRunner.WaitUntilAsync(
            () => fixture.Farm.GetQueueCountsAsync(queue).GetAwaiter().GetResult().TotalMessageCount == 0,
            Patience, "the processor's completions to empty the queue");
        await processor.StopProcessingAsync().WaitAsync(Patience);
        Assert.False(processor.IsProcessing);
    }

    private static void InterlockedMax(ref int target, int value)
    {
        int seen;
        while ((seen = Volatile.Read(ref target)) < value && Interlocked.CompareExchange(ref target, value, seen) != seen)
        {
        }
    }

    /// <summary>A processor with one call waiting on a queue that is deleted hears of it through its error handler, as one waiting in a receive did.</summary>
    [Fact]
    public async Task ProcessorWithOneCall_ReportsTheEndOfItsQueue_WhileItWaits()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        var errors = new BlockingCollection<ProcessErrorEventArgs>();
        var handled = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await using var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = 1 });
        processor.ProcessMessageAsync += _ =>
        {
            handled.TrySetResult();
            return Task.CompletedTask;
        };
        processor.ProcessErrorAsync += args =>
        {
            errors.Add(args);
            return Task.CompletedTask;
        };
        await processor.StartProcessingAsync();
        // One message handled: its link is open, and the processor waits for the next.
        await sender.SendMessageAsync(new FarmMessage("first"));
        await handled.Task.WaitAsync(Patience);
        using (var admin = new FarmAdministrationClient(Connection))
        {
            await admin.DeleteQueueAsync(queue);
        }

        Assert.True(errors.TryTake(out var error, Patience), "the processor reported nothing");
        Assert.Equal(FarmErrorSource.Receive, error.ErrorSource);
        Assert.Equal(FarmFailureReason.MessagingEntityNotFound, Assert.IsType<FarmException>(error.Exception).Reason);
        await processor.StopProcessingAsync().WaitAsync(Patience);
    }

    /// <summary>
    /// A handler that runs well past its message's lock keeps it: the processor renews the lock
    /// ahead of expiry while the handler runs, so the auto-complete lands and the message is never
    /// handed to anyone again. Without renewal the lock would lapse after 5 s and the complete fail.
    /// The handler lasts a whole number of renewal intervals (renewals at about 2.5, 5, 7.5, 10 and
    /// 12.5 s), so a renewal wakes as it returns: it must not reach the broker after the complete
    /// (it did, now and then, and failed with MessageLockLost).
    /// </summary>
    [Fact]
    public async Task Processor_RenewsTheLock_WhileAHandlerOutlastsIt()
    {
        var lockDuration = TimeSpan.FromSeconds(5);
        var queue = await CreateQueueAsync(o => o.LockDuration = lockDuration);
        await using var client = new FarmClient(Connection);
        await using (var sender = client.CreateSender(queue))
        {
            await sender.SendMessageAsync(new FarmMessage("long work") { MessageId = "long" });
        }

        var calls = 0;
        var firstLockedUntil = DateTimeOffset.MinValue;
        var lastLockedUntil = DateTimeOffset.MinValue;
        var errors = new ConcurrentQueue<Exception>();
        await using var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = 1 });
        processor.ProcessMessageAsync += async args =>
        {
            Interlocked.Increment(ref calls);
            firstLockedUntil = args.Message.LockedUntil;
            // The work itself: two and a half lock durations, five renewal intervals.
            await Task.Delay(lockDuration * 2.5);
            lastLockedUntil = args.Message.LockedUntil;
        };
        processor.ProcessErrorAsync += args =>
        {
            errors.Enqueue(args.Exception);
            return Task.CompletedTask;
        };
        await processor.StartProcessingAsync();
        await ProcessRunner.WaitUntilAsync(
            () => fixture.Farm.GetQueueCountsAsync(queue).GetAwaiter().GetResult().TotalMessageCount == 0,
            Patience, "the long handler's message to be completed");
        await processor.StopProcessingAsync();

        Assert.Empty(errors);
        Assert.Equal(1, Volatile.Read(ref calls));
        Assert.True(lastLockedUntil > firstLockedUntil + lockDuration,
            $"the lock was not renewed while the handler ran: locked until {firstLockedUntil:O} at first, {lastLockedUntil:O} at the end");
    }

    /// <summary>
    /// Eight handlers outlast their 5 s locks together: the processor renews the locks due together
    /// in one RenewLock call (the call takes many tokens) rather than a call per message, and every
    /// lock holds until its handler returns.
    /// </summary>
    [Fact]
    public async Task Processor_RenewsTheLocksOfHandlersRunningTogether_InSharedCalls()
    {
        const int handlers = 8;
        var lockDuration = TimeSpan.FromSeconds(5);
        var queue = await CreateQueueAsync(o => o.LockDuration = lockDuration);
        await using var client = new FarmClient(Connection);
        await using (var sender = client.CreateSender(queue))
        {
            await sender.SendMessagesAsync(Enumerable.Range(0, handlers).Select(i => new FarmMessage($"work {i}")));
        }

        var running = 0;
        var allRunning = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var extended = new ConcurrentQueue<bool>();
        var errors = new ConcurrentQueue<Exception>();
        await using var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = handlers });
        processor.ProcessMessageAsync += async args =>
        {
            var firstLockedUntil = args.Message.LockedUntil;
            if (Interlocked.Increment(ref running) == handlers)
            {
                allRunning.SetResult();
            }
            await allRunning.Task.WaitAsync(Patience);
            // Two and a half lock durations: a renewal every half lock duration, five rounds.
            await Task.Delay(lockDuration * 2.5);
            extended.Enqueue(args.Message.LockedUntil > firstLockedUntil + lockDuration);
        };
        processor.ProcessErrorAsync += args =>
        {
            errors.Enqueue(args.Exception);
            return Task.CompletedTask;
        };
        var callsBefore = await fixture.Farm.MessagingCallsAsync("RenewLock");
        await processor.StartProcessingAsync();
        await ProcessRunner.WaitUntilAsync(
            () => fixture.Farm.GetQueueCountsAsync(queue).GetAwaiter().GetResult().TotalMessageCount == 0,
            Patience, "the handlers' messages to be completed");
        await processor.StopProcessingAsync();
        var calls = await fixture.Farm.MessagingCallsAsync("RenewLock") - callsBefore;

        Assert.Empty(errors);
        Assert.Equal(Enumerable.Repeat(true, handlers), extended);
        // A call per lock would be about 8 x 4 = 32; shared, about one per round.
        Assert.InRange(calls, 1, 12);
    }

    [Theory]
    [InlineData(0)]
    [InlineData(-5)]
    public async Task ZeroOrNegativeLockDuration_IsRejected_AndCreatesNothing(int seconds)
    {
        var name = NewQueueName();
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));
        var request = new CreateQueueRequest
        {
            Name = name,
            Properties = new Farm.Contracts.V1.QueueProperties { LockDuration = Duration.FromTimeSpan(TimeSpan.FromSeconds(seconds)) },
        };

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            new Contracts.V1.Management.ManagementClient(channel).CreateQueueAsync(request).ResponseAsync);

        Assert.Equal(StatusCode.InvalidArgument, error.StatusCode);
        Assert.Contains("LockDuration", error.Status.Detail);
        using var admin = new FarmAdministrationClient(Connection);
        Assert.False(await admin.QueueExistsAsync(name));
    }

    [Fact]
    public async Task ZeroMaxDeliveryCount_AndTooShortDuplicateWindow_AreRejected()
    {
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));

        var deliveries = await Assert.ThrowsAsync<RpcException>(() => new Contracts.V1.Management.ManagementClient(channel).CreateQueueAsync(new CreateQueueRequest { Name = NewQueueName(), Properties = new Farm.Contracts.V1.QueueProperties { MaxDeliveryCount = 0 } }).ResponseAsync);
        var window = await Assert.ThrowsAsync<RpcException>(() => new Contracts.V1.Management.ManagementClient(channel).CreateQueueAsync(new CreateQueueRequest { Name = NewQueueName(), Properties = new Farm.Contracts.V1.QueueProperties { DuplicateDetectionHistoryTimeWindow = Duration.FromTimeSpan(TimeSpan.FromSeconds(1)) } }).ResponseAsync);

        Assert.Contains("MaxDeliveryCount", deliveries.Status.Detail);
        Assert.Contains("DuplicateDetectionHistoryTimeWindow", window.Status.Detail);
    }

    [Fact]
    public async Task OversizedMessage_IsRejected_NamingTheLimit_AndNothingIsStored()
    {
        var queue = await CreateQueueAsync();
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));
        var request = new SendRequest
        {
            Entity = queue,
            Messages = { new Message { Body = ByteString.CopyFrom(new byte[300 * 1024]) } },
        };

        var error = await Assert.ThrowsAsync<RpcException>(() => new Contracts.V1.Messaging.MessagingClient(channel).SendAsync(request).ResponseAsync);

        Assert.Equal("MESSAGE_SIZE_EXCEEDED", error.FarmError());
        Assert.Contains("262144 bytes", error.Status.Detail);
        Assert.Equal(0, (await fixture.Farm.GetQueueCountsAsync(queue)).TotalMessageCount);
    }

    /// <summary>
    /// Completes settled over the receive stream: a node answers settlements that all succeeded
    /// with their count (all_succeeded), and the SDK takes each as done; one that fails among them
    /// still fails alone, with its own reason.
    /// </summary>
    [Fact]
    public async Task CompletesOnTheStream_SucceedTogether_AndACompleteOfAGoneLockFailsAlone()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        await sender.SendMessagesAsync([new FarmMessage("a"), new FarmMessage("b"), new FarmMessage("c")]);
        await using var receiver = client.CreateReceiver(queue);
        var received = new List<FarmReceivedMessage>();
        while (received.Count < 3)
        {
            received.AddRange(await receiver.ReceiveMessagesAsync(3, Patience));
        }

        await Task.WhenAll(received.Take(2).Select(m => receiver.CompleteMessageAsync(m)));
        var again = await Assert.ThrowsAsync<FarmException>(() => Task.WhenAll(
            receiver.CompleteMessageAsync(received[2]), receiver.CompleteMessageAsync(received[0])));
        Assert.Equal(FarmFailureReason.MessageLockLost, again.Reason);

        Assert.Equal(0, (await fixture.Farm.GetQueueCountsAsync(queue)).TotalMessageCount);
    }

    [Fact]
    public async Task SettlingWithAnUnknownLockToken_FailsWithLockLost_AndTheMessageStays()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        await sender.SendMessageAsync(new FarmMessage("keep me"));
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));

        var response = await new Contracts.V1.Messaging.MessagingClient(channel).SettleAsync(new SettleRequest { Entity = queue, Settlements = { new Settlement { LockToken = Guid.NewGuid().ToString(), Disposition = Disposition.Complete } } }).ResponseAsync;

        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(response.Results).ErrorCode);
        Assert.Equal(1, (await fixture.Farm.GetQueueCountsAsync(queue)).ActiveMessageCount);
    }

    /// <summary>
    /// Twelve subscriptions of a topic received through one client (one receive session): the node
    /// may send each message once for all of them (shared_messages). Every receiver still gets every
    /// message whole, with its own lock and delivery count, and what one receiver does with its copy
    /// (dead-letter it with properties, abandon it) reaches no other subscription's.
    /// </summary>
    [Fact]
    public async Task ManySubscriptionsReceivedThroughOneClient_EachGetEveryMessageWhole_AndSettleAlone()
    {
        var topic = "t-" + Guid.NewGuid().ToString("N")[..12];
        using var admin = new FarmAdministrationClient(Connection);
        await admin.CreateTopicAsync(new CreateTopicOptions(topic));
        var subscriptions = Enumerable.Range(0, 12).Select(i => $"s{i}").ToList();
        foreach (var subscription in subscriptions)
        {
            await admin.CreateSubscriptionAsync(new CreateSubscriptionOptions(topic, subscription));
        }
        await using var client = new FarmClient(Connection);
        var receivers = subscriptions.Select(s => client.CreateReceiver(topic, s, new FarmReceiverOptions { PrefetchCount = 50 })).ToList();
        // Receives waiting on every subscription first, so one send goes to all of them at once.
        using var deadline = new CancellationTokenSource(Patience);
        var firstReceives = receivers.Select(r => r.ReceiveMessagesAsync(10, Patience, deadline.Token)).ToList();
        await using (var sender = client.CreateSender(topic))
        {
            var body = Enumerable.Range(0, 2000).Select(i => (byte)i).ToArray();
            await sender.SendMessagesAsync(Enumerable.Range(0, 10).Select(i =>
                new FarmMessage(body) { MessageId = $"m{i}", Subject = "fan", ApplicationProperties = { ["n"] = i } }).ToList());
        }

        var got = new Dictionary<string, List<FarmReceivedMessage>>();
        for (var i = 0; i < receivers.Count; i++)
        {
            var messages = (await firstReceives[i]).ToList();
            while (messages.Count < 10)
            {
                messages.AddRange(await receivers[i].ReceiveMessagesAsync(10 - messages.Count, Patience, deadline.Token));
            }
            got[subscriptions[i]] = messages;
        }
        foreach (var (subscription, messages) in got)
        {
            Assert.Equal(Enumerable.Range(0, 10).Select(i => $"m{i}"), messages.Select(m => m.MessageId));
            Assert.All(messages, m => Assert.Equal(Enumerable.Range(0, 2000).Select(i => (byte)i), m.Body.ToArray()));
            Assert.Equal(Enumerable.Range(0, 10).Select(i => (object?)i), messages.Select(m => m.ApplicationProperties["n"]));
            Assert.All(messages, m => Assert.Equal(1, m.DeliveryCount));
        }
        Assert.Equal(12 * 10, got.Values.SelectMany(m => m).Select(m => m.LockToken).Distinct().Count());

        // s0 dead-letters m0 with a property of its own, s1 abandons m0; everyone completes the rest.
        await receivers[0].DeadLetterMessageAsync(got["s0"][0], "reason", "description", new Dictionary<string, object?> { ["why"] = "s0's" });
        await receivers[1].AbandonMessageAsync(got["s1"][0]);
        for (var i = 0; i < receivers.Count; i++)
        {
            foreach (var message in got[subscriptions[i]].Skip(i < 2 ? 1 : 0))
            {
                await receivers[i].CompleteMessageAsync(message);
            }
        }

        var again = Assert.Single(await receivers[1].ReceiveMessagesAsync(1, Patience, deadline.Token));
        Assert.Equal(("m0", 2), (again.MessageId, again.DeliveryCount));
        Assert.False(again.ApplicationProperties.ContainsKey("why"));
        await using var deadLetters = client.CreateReceiver(FarmEntityPath.FormatDeadLetterPath(FarmEntityPath.FormatSubscriptionPath(topic, "s0")));
        var dead = Assert.Single(await deadLetters.ReceiveMessagesAsync(1, Patience, deadline.Token));
        Assert.Equal(("m0", "s0's", "reason"), (dead.MessageId, dead.ApplicationProperties["why"], dead.DeadLetterReason));
        for (var i = 2; i < receivers.Count; i++)
        {
            Assert.Empty(await receivers[i].ReceiveMessagesAsync(1, TimeSpan.FromMilliseconds(200), deadline.Token));
        }
        foreach (var receiver in receivers)
        {
            await receiver.DisposeAsync();
        }
    }

    /// <summary>
    /// The first endpoint of the connection string leads nowhere (a killed container's published
    /// port): its connect runs out of time, and the SDK goes on to the next endpoint rather than
    /// failing the call as an error nobody should retry.
    /// </summary>
    [Fact]
    public async Task AnEndpointNoConnectionCanBeSetUpTo_IsPassedOver_ForTheNext()
    {
        var queue = await CreateQueueAsync();
        using var hole = await BlackHoleEndpoint.OpenAsync();
        var connection = $"Endpoint={hole.Address.ToString().TrimEnd('/')},{fixture.Farm.Address}";
        using var admin = new FarmAdministrationClient(connection);
        await using var client = new FarmClient(connection);
        await using var sender = client.CreateSender(queue);

        Assert.True(await admin.QueueExistsAsync(queue));
        await sender.SendMessageAsync(new FarmMessage("past the hole"));

        Assert.Equal(1, (await fixture.Farm.GetQueueCountsAsync(queue)).ActiveMessageCount);
    }

    [Fact]
    public async Task SendingToAnUnknownQueue_FailsWithEntityNotFound()
    {
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender("no-such-queue");

        var error = await Assert.ThrowsAsync<FarmException>(() => sender.SendMessageAsync(new FarmMessage("x")));

        Assert.Equal(FarmFailureReason.MessagingEntityNotFound, error.Reason);
        Assert.Contains("no-such-queue", error.Message);
    }

    [Fact]
    public async Task DeadLetterQueue_IsAddressableByPath_WithTheReason()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        await sender.SendMessageAsync(new FarmMessage("bad"));
        await using var receiver = client.CreateReceiver(queue);
        var message = await receiver.ReceiveMessageAsync(Patience);
        Assert.NotNull(message);
        await receiver.DeadLetterMessageAsync(message, "Invalid", "no customer");

        await using var deadLetters = client.CreateReceiver(queue + "/$DeadLetterQueue");
        var dead = await deadLetters.ReceiveMessageAsync(Patience);

        Assert.NotNull(dead);
        Assert.Equal("bad", dead.Body.ToString());
        Assert.Equal("Invalid", dead.DeadLetterReason);
        Assert.Equal("no customer", dead.DeadLetterErrorDescription);
        await deadLetters.CompleteMessageAsync(dead);
    }
}
