using System.Diagnostics;
using Farm.Client;
using Farm.Testing;
using Farm.Contracts;
using Grpc.Core;
using Farm.Contracts.V1;
using Google.Protobuf;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Promise 3 with real processes: a node paused (SIGSTOP) past its lease loses its containers to
/// the survivors, and once resumed (SIGCONT) it writes nothing more to them: the epoch the new owner
/// raised rejects its writes, and it gives the containers up.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class PauseTests(ITestOutputHelper output)
{
    [Fact]
    public async Task APausedNode_LosesItsContainers_AndCannotWriteToThemWhenItResumes()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        for (var i = 1; i < 6; i++)
        {
            await admin.CreateContainerAsync();
        }
        var container = await LocalFarm.WaitForContainerOwnedByAsync(admin, node: 2);
        await admin.CreateQueueAsync(new CreateQueueOptions("paused") { ContainerId = container.Id });
        var epochBefore = container.Epoch;

        // Acknowledged before the pause: must survive it.
        await using var client = new FarmClient(farm.ConnectionString);
        await using var sender = client.CreateSender("paused");
        var acknowledged = new List<string>();
        for (var i = 0; i < 20; i++)
        {
            await sender.SendMessageAsync(new FarmMessage("before") { MessageId = $"before-{i}" });
            acknowledged.Add($"before-{i}");
        }

        // A client talking to node 2 directly (as redirect mode does) keeps a send in flight across the pause.
        var nodeTwo = farm.Endpoints[1];
        using var direct = FarmChannels.Create(new Uri(nodeTwo));
        var directHeaders = FarmMetadata.DirectHeaders();
        await farm.PauseNodeOutsideAWriteAsync(2);
        var inFlight = new Contracts.V1.Messaging.MessagingClient(direct).SendAsync(new SendRequest { Entity = "paused", Messages = { new Message { MessageId = "from-the-paused-node", Body = ByteString.CopyFromUtf8("late") } } }, new CallOptions(directHeaders)).ResponseAsync;

        // The survivors take the container, raising its epoch, and serve it.
        var moved = await WaitUntilAsync(async () =>
        {
            var now = (await admin.GetContainersAsync()).Single(c => c.Id == container.Id);
            return now.OwnerNode is { } owner && owner != 2 && now.Epoch > epochBefore ? now : null;
        }, TimeSpan.FromSeconds(30), "the survivors to take the paused node's container",
            () => $"{farm.NodeLogTail(1)}\n{farm.NodeLogTail(3)}\nwrite locks of node 2: {string.Join("; ", LocalFarm.WriteLocksHeldBy(farm.NodePid(2)!.Value))}");
        output.WriteLine($"container {container.Id}: node 2 at epoch {epochBefore} -> node {moved.OwnerNode} at epoch {moved.Epoch}");
        await sender.SendMessageAsync(new FarmMessage("during") { MessageId = "during-pause" });
        acknowledged.Add("during-pause");

        await farm.ResumeNodeAsync(2);
        string outcome;
        try
        {
            await inFlight.WaitAsync(TimeSpan.FromSeconds(60));
            // Acknowledged: only possible if it committed before the new owner raised the epoch,
            // and then the new owner loaded it, so it must be in the queue like any other.
            outcome = "acknowledged";
            acknowledged.Add("from-the-paused-node");
        }
        catch (RpcException e)
        {
            // A raw gRPC call sees the keep-alive ping the frozen node never answered as Internal.
            var failure = e.AsUnavailableWhenBroken();
            outcome = failure.FarmError() ?? failure.StatusCode.ToString();
            Assert.Contains(outcome, new[] { "STALE_EPOCH", "NOT_OWNER", "SERVICE_BUSY", "Unavailable" });
        }
        output.WriteLine($"the send in flight on the paused node: {outcome}");

        // Resumed, node 2 gives the container up: asked directly, it answers NOT_OWNER.
        await WaitUntilAsync(async () =>
        {
            try
            {
                await new Contracts.V1.Messaging.MessagingClient(direct).PeekAsync(new PeekRequest { Entity = "paused", MaxMessages = 1 }, new CallOptions(directHeaders)).ResponseAsync;
                return null;
            }
            catch (RpcException e) when (e.FarmError() == "NOT_OWNER")
            {
                return e;
            }
        }, TimeSpan.FromSeconds(30), "node 2 to answer NOT_OWNER for the container it lost");
        Assert.Equal(moved.Epoch, (await admin.GetContainersAsync()).Single(c => c.Id == container.Id).Epoch);

        await using var receiver = client.CreateReceiver("paused", new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var received = new List<string>();
        while (await receiver.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(2)) is { Count: > 0 } batch)
        {
            received.AddRange(batch.Select(m => m.MessageId!));
        }
        Assert.Empty(acknowledged.Except(received));
        Assert.Equal(received.Count, received.Distinct().Count());
        if (outcome != "acknowledged")
        {
            Assert.DoesNotContain("from-the-paused-node", received);
        }
    }

    /// <summary>
    /// The keep-alive every Farm channel uses (FarmChannels: a ping after 1 s without a frame, 1.5 s
    /// for its answer, checked once a second): a receive stream to a frozen node, whether the
    /// client's own or the one a gateway proxies, fails within about 3-4 s, where a silent TCP
    /// connection would hang on. (The bound below leaves room for a busy CI machine.)
    /// </summary>
    [Fact]
    public async Task ReceiveStreams_ToAFrozenNode_AreGivenUpWithinTheKeepAlive()
    {
        var giveUpWithin = TimeSpan.FromSeconds(12);
        await using var farm = await LocalFarm.StartAsync(nodes: 2);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateContainerAsync();
        var container = await LocalFarm.WaitForContainerOwnedByAsync(admin, node: 2);
        await admin.CreateQueueAsync(new CreateQueueOptions("frozen") { ContainerId = container.Id });
        await using (var client = new FarmClient(farm.ConnectionString))
        await using (var sender = client.CreateSender("frozen"))
        {
            await sender.SendMessagesAsync([new FarmMessage("one"), new FarmMessage("two")]);
        }

        // One stream straight to the owner (as redirect mode opens them), one through node 1's gateway;
        // each takes a message, so both are open end to end, then idles (an open call, so pinged).
        using var toOwner = FarmChannels.Create(new Uri(farm.Endpoints[1]));
        using var toGateway = FarmChannels.Create(new Uri(farm.Endpoints[0]));
        using var direct = await OpenAndTakeOneAsync(toOwner, FarmMetadata.DirectHeaders());
        using var proxied = await OpenAndTakeOneAsync(toGateway, headers: null);

        await farm.PauseNodeAsync(2);
        var frozenAt = Stopwatch.GetTimestamp();
        var directEnd = EndOfAsync(direct, frozenAt);
        var proxiedEnd = EndOfAsync(proxied, frozenAt);

        var (directAfter, directStatus) = await directEnd.WaitAsync(giveUpWithin);
        var (proxiedAfter, proxiedStatus) = await proxiedEnd.WaitAsync(giveUpWithin);
        output.WriteLine($"after SIGSTOP: the direct stream ended in {directAfter.TotalSeconds:0.0} s ({directStatus}), the proxied one in {proxiedAfter.TotalSeconds:0.0} s ({proxiedStatus})");
        Assert.NotEqual(StatusCode.OK, directStatus);
        Assert.Equal(StatusCode.Unavailable, proxiedStatus);
        await farm.ResumeNodeAsync(2);
    }

    /// <summary>
    /// The SDK's side of a frozen gateway: a client whose first gateway (node 1) freezes while its
    /// queue is served by node 2 tries the sends in flight there again on the next gateway of its
    /// connection string (the first retry after a lost connection goes at once), and keeps sending
    /// there while node 1 stays frozen. No send fails, and every acknowledged message is received
    /// exactly once (the sends lost on node 1 were never forwarded, or were stored once: RecentSends).
    /// How fast it moves on is measured in perf (failover --signal stop), not asserted here.
    /// </summary>
    [Fact]
    public async Task SendersWhoseGatewayFreezes_GoOnThroughTheNextGateway_NoSendFails_NothingLostOrDoubled()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 2);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateContainerAsync();
        var container = await LocalFarm.WaitForContainerOwnedByAsync(admin, node: 2);
        await admin.CreateQueueAsync(new CreateQueueOptions("through-a-frozen-gateway") { ContainerId = container.Id });
        Assert.StartsWith(farm.Endpoints[0], farm.ConnectionString["Endpoint=".Length..], StringComparison.Ordinal);

        // Node 1 is the client's first endpoint: every call goes through its gateway until it fails.
        await using var client = new FarmClient(farm.ConnectionString);
        await using var sender = client.CreateSender("through-a-frozen-gateway");
        var acknowledged = new System.Collections.Concurrent.ConcurrentQueue<string>();
        var failures = new System.Collections.Concurrent.ConcurrentQueue<string>();
        using var stop = new CancellationTokenSource();
        var nextId = 0;
        var senders = Enumerable.Range(0, 4).Select(_ => Task.Run(async () =>
        {
            while (!stop.IsCancellationRequested)
            {
                var id = $"m-{Interlocked.Increment(ref nextId)}";
                try
                {
                    await sender.SendMessageAsync(new FarmMessage(id) { MessageId = id });
                    acknowledged.Enqueue(id);
                }
                catch (FarmException e)
                {
                    failures.Enqueue($"{id}: {e.Message}");
                }
            }
        })).ToArray();

        Assert.True(await Eventually.HoldsWithinAsync(() => Task.FromResult(acknowledged.Count >= 40), TimeSpan.FromSeconds(30), TimeSpan.FromMilliseconds(50)),
            "the senders did not get going through node 1");
        await farm.PauseNodeOutsideAWriteAsync(1);
        var atPause = acknowledged.Count;
        var goingOn = await Eventually.HoldsWithinAsync(() => Task.FromResult(acknowledged.Count >= atPause + 100), TimeSpan.FromSeconds(60), TimeSpan.FromMilliseconds(50));
        // Still frozen: the sends above went through node 2's gateway.
        var frozenMeanwhile = LocalFarm.IsProcessStopped(farm.NodePid(1)!.Value);
        await stop.CancelAsync();
        await Task.WhenAll(senders);
        await farm.ResumeNodeAsync(1);

        Assert.True(goingOn, $"only {acknowledged.Count - atPause} sends were acknowledged in 60 s with node 1 frozen; failures: {string.Join("; ", failures.Take(5))}");
        Assert.True(frozenMeanwhile, "node 1 was not frozen while the sends went on");
        Assert.Empty(failures);

        await using var receiver = client.CreateReceiver("through-a-frozen-gateway", new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var received = new List<string>();
        while (await receiver.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(2)) is { Count: > 0 } batch)
        {
            received.AddRange(batch.Select(m => m.MessageId!));
        }
        output.WriteLine($"{acknowledged.Count} acknowledged ({acknowledged.Count - atPause} after node 1 froze), {received.Count} received");
        Assert.Empty(acknowledged.Except(received));
        Assert.Equal(received.Count, received.Distinct().Count());
    }

    private static async Task<AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse>> OpenAndTakeOneAsync(Grpc.Net.Client.GrpcChannel channel, Metadata? headers)
    {
        var call = new Contracts.V1.Messaging.MessagingClient(channel).Receive(new CallOptions(headers));
        await call.RequestStream.WriteAsync(new ReceiveRequest { Open = new ReceiveOpen { Entity = "frozen", Mode = ReceiveMode.ReceiveAndDelete, Credit = 1 } });
        Assert.True(await call.ResponseStream.MoveNext().WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Single(call.ResponseStream.Current.Messages);
        return call;
    }

    /// <summary>How long after <paramref name="since"/> the stream ended, and with what status.</summary>
    private static async Task<(TimeSpan After, StatusCode Status)> EndOfAsync(AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> call, long since)
    {
        try
        {
            while (await call.ResponseStream.MoveNext())
            {
            }
            return (Stopwatch.GetElapsedTime(since), StatusCode.OK);
        }
        catch (RpcException e)
        {
            return (Stopwatch.GetElapsedTime(since), e.StatusCode);
        }
    }

    private static async Task<T> WaitUntilAsync<T>(Func<Task<T?>> probe, TimeSpan deadline, string what, Func<string>? describeFailure = null)
        where T : class
    {
        T? found = null;
        var arrived = await Eventually.HoldsWithinAsync(async () =>
        {
            try
            {
                return (found = await probe()) is not null;
            }
            catch (FarmException)
            {
                return false; // a gateway on the paused node does not answer; the admin client moves on
            }
        }, deadline, TimeSpan.FromMilliseconds(100));
        Assert.True(arrived, $"timed out waiting for {what}" + (describeFailure is null ? "" : "\n" + describeFailure()));
        return found!;
    }
}
