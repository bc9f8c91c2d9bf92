using Farm.Testing;
using Farm.Client;
using Farm.Contracts;
using Grpc.Core;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Credit on a receive stream must never outlive the call that granted it (issue 8, path 4), and a
/// receive response must fit what a standard gRPC client takes (path 15). A real node process,
/// driven through the SDK and the raw contract.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class ReceiveCreditTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    /// <summary>How long a message the broker would push on stray credit gets to be taken (it takes milliseconds).</summary>
    private static readonly TimeSpan StrayWindow = TimeSpan.FromSeconds(1);

    private string Connection => fixture.Farm.ConnectionString;

    private async Task<string> CreateQueueAsync()
    {
        var name = "credit-" + Guid.NewGuid().ToString("N")[..12];
        using var admin = new FarmAdministrationClient(Connection);
        await admin.CreateQueueAsync(name);
        return name;
    }

    private async Task<QueueRuntimeProperties> CountsAsync(string queue)
    {
        using var admin = new FarmAdministrationClient(Connection);
        return await admin.GetQueueRuntimePropertiesAsync(queue);
    }

    /// <summary>Waits up to <see cref="StrayWindow"/> for the queue to hold no active message; true if that happened.</summary>
    private Task<bool> TakenWithinStrayWindowAsync(string queue) =>
        Eventually.HoldsWithinAsync(async () => (await CountsAsync(queue)).ActiveMessageCount == 0, StrayWindow, TimeSpan.FromMilliseconds(20));

    /// <summary>Credit frames the node has received on receive streams for <paramref name="queue"/> (its farm_receive_credit_grants_total).</summary>
    private async Task<double> CreditGrantsAsync(string queue)
    {
        var text = await fixture.Farm.SingleNodeMetricsAsync();
        var pattern = new System.Text.RegularExpressions.Regex(
            $@"^farm_receive_credit_grants_total\{{[^}}]*messaging_destination_name=""{queue}""[^}}]*\}} ([0-9.eE+]+)", System.Text.RegularExpressions.RegexOptions.Multiline);
        return pattern.Matches(text).Sum(m => double.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture));
    }

    /// <summary>
    /// Receives <paramref name="count"/> messages one receive at a time, completing each in
    /// peek-lock, within <see cref="Patience"/>: their message ids, in the order received.
    /// </summary>
    private static async Task<List<string>> ReceiveOneAtATimeAsync(FarmReceiver receiver, int count)
    {
        using var deadline = new CancellationTokenSource(Patience);
        var order = new List<string>();
        while (order.Count < count)
        {
            if (await receiver.ReceiveMessageAsync(TimeSpan.FromSeconds(5), deadline.Token) is { } message)
            {
                order.Add(message.MessageId!);
                if (receiver.ReceiveMode == FarmReceiveMode.PeekLock)
                {
                    await receiver.CompleteMessageAsync(message, deadline.Token);
                }
            }
        }
        return order;
    }

    /// <summary>
    /// A prefetching receiver that takes its messages one at a time refills its credit once half its
    /// prefetch is used, not with a frame per message taken (issue 14: at low rates each frame woke
    /// both sides), and still gets every message, in order. Receive-and-delete: no settlement to
    /// carry the refill, so it goes in credit frames.
    /// </summary>
    [Fact]
    public async Task APrefetchingReceiver_TakingOneAtATime_RefillsCreditInBatches_AndGetsEveryMessageInOrder()
    {
        const int count = 60;
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using (var sender = client.CreateSender(queue))
        {
            await sender.SendMessagesAsync(Enumerable.Range(0, count).Select(i => new FarmMessage($"m{i}") { MessageId = $"m{i}" }));
        }

        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = 20, ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var order = await ReceiveOneAtATimeAsync(receiver, count);
        await receiver.DisposeAsync();

        Assert.Equal(Enumerable.Range(0, count).Select(i => $"m{i}"), order);
        var grants = 0.0;
        await Eventually.UntilAsync(async () => (grants = await CreditGrantsAsync(queue)) > 0, Patience, "the node to count the receiver's credit frames");
        // 60 taken with a prefetch of 20: a refill of 10 after every 10, about 6 frames (one per message before).
        Assert.InRange(grants, 1, 12);
    }

    /// <summary>
    /// In peek-lock the settlement of a message the application took carries the prefetch refill
    /// (ReceiveSettle.credit): a receiver completing its messages one at a time, and a processor
    /// given lone messages, send no credit frame at all, and get every message.
    /// </summary>
    [Fact]
    public async Task PeekLock_TheRefillRidesTheSettlements_NoCreditFrame_AndEveryMessageArrives()
    {
        const int count = 60;
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using var sender = client.CreateSender(queue);
        await sender.SendMessagesAsync(Enumerable.Range(0, count).Select(i => new FarmMessage($"m{i}") { MessageId = $"m{i}" }));

        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = 20 });
        var order = await ReceiveOneAtATimeAsync(receiver, count);
        await receiver.DisposeAsync();
        Assert.Equal(Enumerable.Range(0, count).Select(i => $"m{i}"), order);

        // A processor (prefetch 3, one call at a time) given one message at a time: each waits alone.
        using var deadline = new CancellationTokenSource(Patience);
        var second = await CreateQueueAsync();
        await using var secondSender = client.CreateSender(second);
        var handled = System.Threading.Channels.Channel.CreateUnbounded<string>();
        await using var processor = client.CreateProcessor(second, new FarmProcessorOptions { MaxConcurrentCalls = 1 });
        processor.ProcessMessageAsync += args => handled.Writer.WriteAsync(args.Message.MessageId!).AsTask();
        processor.ProcessErrorAsync += _ => Task.CompletedTask;
        await processor.StartProcessingAsync();
        for (var i = 0; i < 12; i++)
        {
            await secondSender.SendMessageAsync(new FarmMessage($"lone{i}") { MessageId = $"lone{i}" });
            Assert.Equal($"lone{i}", await handled.Reader.ReadAsync(deadline.Token));
        }
        await Eventually.UntilAsync(async () => (await CountsAsync(second)).ActiveMessageCount == 0, Patience, "the processor to complete every message");
        await processor.StopProcessingAsync();

        Assert.Equal(0, await CreditGrantsAsync(queue));
        Assert.Equal(0, await CreditGrantsAsync(second));
    }

    [Fact]
    public async Task ReceiveAndDelete_ATimedOutReceive_LeavesNoCredit_SoClosingTheReceiverLosesNothing()
    {
        // Before: the timed-out receive left its credit on the stream; the next message sent was
        // deleted by the broker into the receiver's buffer, and closing the receiver dropped it.
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        Assert.Null(await receiver.ReceiveMessageAsync(TimeSpan.FromMilliseconds(200)));

        await using var sender = client.CreateSender(queue);
        await sender.SendMessageAsync(new FarmMessage("acknowledged") { MessageId = "m-1" });
        var takenByNobody = await TakenWithinStrayWindowAsync(queue);
        await receiver.DisposeAsync();

        Assert.False(takenByNobody, "the broker handed the message to a receiver that had asked for nothing");
        await using var next = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var received = await next.ReceiveMessageAsync(Patience);
        Assert.Equal("m-1", received?.MessageId);
    }

    [Fact]
    public async Task PeekLock_StrayCredit_DoesNotRaiseTheDeliveryCount()
    {
        // Before: the stray credit locked the next message for a receiver that never asked for it,
        // and its delivery count rose toward the dead-letter queue while it sat unseen.
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        var receiver = client.CreateReceiver(queue);
        Assert.Null(await receiver.ReceiveMessageAsync(TimeSpan.FromMilliseconds(200)));

        await using var sender = client.CreateSender(queue);
        await sender.SendMessageAsync(new FarmMessage("one") { MessageId = "m-1" });
        await TakenWithinStrayWindowAsync(queue);
        await receiver.DisposeAsync();

        await using var next = client.CreateReceiver(queue);
        var received = await next.ReceiveMessageAsync(Patience);
        Assert.NotNull(received);
        Assert.Equal(1, received.DeliveryCount);
        await next.CompleteMessageAsync(received);
    }

    [Fact]
    public async Task PeekLock_MessagesPrefetchedButNeverHandedOut_AreReleasedOnClose_WithoutCountingADelivery()
    {
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using (var sender = client.CreateSender(queue))
        {
            for (var i = 0; i < 5; i++)
            {
                await sender.SendMessageAsync(new FarmMessage($"m{i}") { MessageId = $"m-{i}" });
            }
        }
        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = 5 });
        var first = await receiver.ReceiveMessageAsync(Patience);
        Assert.NotNull(first);
        await receiver.CompleteMessageAsync(first);
        await receiver.DisposeAsync();

        await using var next = client.CreateReceiver(queue);
        var rest = new List<FarmReceivedMessage>();
        while (rest.Count < 4 && await next.ReceiveMessageAsync(Patience) is { } message)
        {
            rest.Add(message);
            await next.CompleteMessageAsync(message);
        }

        Assert.Equal(4, rest.Count);
        Assert.All(rest, m => Assert.Equal(1, m.DeliveryCount));
    }

    [Fact]
    public async Task TwentyFourMessagesOf250KB_ComeInResponsesAStandardGrpcClientTakes()
    {
        // Before: one response carried all 24 (6 MB), which a client with gRPC's usual 4 MB limit
        // refuses, after the broker had locked all 24 and counted a delivery for each.
        var queue = await CreateQueueAsync();
        await using var client = new FarmClient(Connection);
        await using (var sender = client.CreateSender(queue))
        {
            for (var i = 0; i < 24; i++)
            {
                await sender.SendMessageAsync(new FarmMessage(new byte[250 * 1024]) { MessageId = $"big-{i}" });
            }
        }

        using var standard = Grpc.Net.Client.GrpcChannel.ForAddress(fixture.Farm.Address) /* grpc-dotnet defaults: 4 MB */;
        var received = new List<ReceivedMessage>();
        while (received.Count < 24)
        {
            var response = await new Contracts.V1.Messaging.MessagingClient(standard).ReceiveBatchAsync(new ReceiveBatchRequest { Entity = queue, Mode = ReceiveMode.PeekLock, MaxMessages = 24, MaxWait = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(Patience) }).ResponseAsync;
            Assert.NotEmpty(response.Messages);
            Assert.True(response.CalculateSize() <= 4 * 1024 * 1024);
            received.AddRange(response.Messages);
        }

        Assert.Equal(24, received.Select(m => m.Message.MessageId).Distinct().Count());
        Assert.All(received, m => Assert.Equal(1, m.DeliveryCount));
    }

    [Fact]
    public async Task AReceiveWithNoMode_IsRefused_AndTakesNothing()
    {
        // Zero used to be PEEK_LOCK; an unset mode now names the field instead of guessing.
        var queue = await CreateQueueAsync();
        await using (var client = new FarmClient(Connection))
        await using (var sender = client.CreateSender(queue))
        {
            await sender.SendMessageAsync(new FarmMessage("m"));
        }
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));

        var error = await Assert.ThrowsAsync<RpcException>(() => new Contracts.V1.Messaging.MessagingClient(channel).ReceiveBatchAsync(new ReceiveBatchRequest { Entity = queue, MaxMessages = 1 }).ResponseAsync);

        Assert.Equal(StatusCode.InvalidArgument, error.StatusCode);
        Assert.Contains("receive mode is required", error.Status.Detail);
        Assert.Equal(1, (await CountsAsync(queue)).ActiveMessageCount);
    }
}
