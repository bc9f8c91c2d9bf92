using System.Text.RegularExpressions;
using Farm.Testing;
using Farm.Client;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// With FarmClientOptions.SettleOnReceiveStream (the default), the SDK settles
/// peek-lock messages over the receive stream they came on, with no Settle call
/// (issue 14: a call per settlement batch is the SDK's dearest cost at many queues or low rates):
/// receivers and processors, completes, abandons and dead-letters, on the node that owns the queue
/// and through another node's gateway that proxies the stream. Real node processes; the calls are
/// counted by the nodes' own request metrics (/metrics).
/// </summary>
[Collection(FarmCollection.Name)]
public sealed partial class StreamSettlementTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);
    private static readonly HttpClient Http = new();

    /// <summary>Settle calls a node has served so far (ASP.NET Core's request counter for the method).</summary>
    private static async Task<double> SettleCallsAsync(Uri metrics)
    {
        var text = await Http.GetStringAsync(metrics);
        return SettleCounter().Matches(text).Sum(m => double.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture));
    }

    [GeneratedRegex(@"^http_server_request_duration_seconds_count\{[^}]*http_route=""/farm\.v1\.Messaging/Settle""[^}]*\} ([0-9.eE+]+)", RegexOptions.Multiline)]
    private static partial Regex SettleCounter();

    private static async Task<IReadOnlyList<Uri>> MetricsUrlsAsync(LocalFarm farm)
    {
        using var status = await farm.StatusJsonAsync();
        return [.. status.RootElement.GetProperty("nodes").EnumerateArray().Select(n => new Uri(n.GetProperty("metrics_url").GetString()!))];
    }

    private static async Task<double> AllSettleCallsAsync(IEnumerable<Uri> metrics)
    {
        var total = 0.0;
        foreach (var url in metrics)
        {
            total += await SettleCallsAsync(url);
        }
        return total;
    }

    /// <summary>A container node 2 owns (of five more made), so node 1's gateway proxies the streams of what it holds.</summary>
    private static async Task<ContainerProperties> ContainerOwnedByNode2Async(FarmAdministrationClient admin)
    {
        for (var i = 1; i < 6; i++)
        {
            await admin.CreateContainerAsync();
        }
        return await LocalFarm.WaitForContainerOwnedByAsync(admin, node: 2);
    }

    private static async Task SendAsync(FarmClient client, string queue, int count)
    {
        await using var sender = client.CreateSender(queue);
        await sender.SendMessagesAsync(Enumerable.Range(0, count).Select(i => new FarmMessage($"m{i}") { MessageId = $"m{i}" }));
    }

    /// <summary>
    /// Completes, abandons and dead-letters through a receiver, then completes through a processor;
    /// every outcome lands as a Settle call's would, and no node served a Settle call.
    /// </summary>
    private static async Task SettleEverythingOverTheStreamAsync(string connection, string queue, IReadOnlyList<Uri> metrics)
    {
        await using var client = new FarmClient(connection, new FarmClientOptions { SettleOnReceiveStream = true });
        await SendAsync(client, queue, 30);
        var callsBefore = await AllSettleCallsAsync(metrics);

        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = 10 });
        var abandoned = new HashSet<string>();
        var settled = new HashSet<string>();
        using var deadline = new CancellationTokenSource(Patience);
        while (settled.Count < 30)
        {
            foreach (var message in await receiver.ReceiveMessagesAsync(10, TimeSpan.FromSeconds(1), deadline.Token))
            {
                var id = message.MessageId!;
                var number = int.Parse(id[1..], System.Globalization.CultureInfo.InvariantCulture);
                if (number % 10 == 0 && abandoned.Add(id))
                {
                    // Abandoned once with a property: it comes back with it.
                    await receiver.AbandonMessageAsync(message, new Dictionary<string, object?> { ["abandoned"] = true });
                }
                else if (number % 10 == 1)
                {
                    await receiver.DeadLetterMessageAsync(message, "poison", "settled on the stream");
                    Assert.True(settled.Add(id), $"{id} came twice");
                }
                else
                {
                    Assert.True(number % 10 != 0 || message.ApplicationProperties.ContainsKey("abandoned"), $"{id} came back without its property");
                    await receiver.CompleteMessageAsync(message);
                    Assert.True(settled.Add(id), $"{id} came twice");
                }
            }
        }
        await receiver.DisposeAsync();

        await SendAsync(client, queue, 20);
        var processed = 0;
        await using (var processor = client.CreateProcessor(queue, new FarmProcessorOptions { MaxConcurrentCalls = 4 }))
        {
            processor.ProcessMessageAsync += _ =>
            {
                Interlocked.Increment(ref processed);
                return Task.CompletedTask;
            };
            processor.ProcessErrorAsync += args => throw new InvalidOperationException("processor error", args.Exception);
            await processor.StartProcessingAsync();
            await Eventually.UntilAsync(() => Volatile.Read(ref processed) >= 20, Patience, "the processor to take all 20");
            await processor.StopProcessingAsync();
        }

        using var admin = new FarmAdministrationClient(connection);
        await Eventually.UntilAsync(async () =>
        {
            var counts = await admin.GetQueueRuntimePropertiesAsync(queue);
            return counts.ActiveMessageCount == 0 && counts.DeadLetterMessageCount == 3;
        }, Patience, "every message completed, three dead-lettered");
        var deadLetters = client.CreateReceiver(queue, new FarmReceiverOptions { SubQueue = SubQueue.DeadLetter, ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var dead = await deadLetters.ReceiveMessagesAsync(3, Patience);
        Assert.All(dead, m => Assert.Equal("poison", m.DeadLetterReason));
        await deadLetters.DisposeAsync();

        Assert.Equal(callsBefore, await AllSettleCallsAsync(metrics));
    }

    [Fact]
    public async Task OnTheOwner_EverySettlementGoesOverTheReceiveStream()
    {
        await using var farm = await LocalFarm.StartAsync();
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        await admin.CreateQueueAsync("settled");

        await SettleEverythingOverTheStreamAsync(farm.ConnectionString, "settled", await MetricsUrlsAsync(farm));
    }

    /// <summary>Node 1's gateway proxies the stream to node 2, the owner: settlements and their answers pass through it.</summary>
    [Fact]
    public async Task ThroughAProxyingGateway_SettlementsPassOverTheProxiedStream()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        var container = await ContainerOwnedByNode2Async(admin);
        await admin.CreateQueueAsync(new CreateQueueOptions("proxied") { ContainerId = container.Id });

        await SettleEverythingOverTheStreamAsync("Endpoint=" + farm.Endpoints[0], "proxied", await MetricsUrlsAsync(farm));
    }
    /// <summary>
    /// A gateway that stops while it proxies a receive stream ends that stream cleanly at once: the
    /// owner takes the credit back and answers the settlements it took, the node exits without
    /// waiting out its shutdown timeout (it used to hold the stream until the timeout cut it, answers
    /// in flight and all: PlannedMoveTests.NodeDrain_UnderLoad saw done completes told MessageLockLost),
    /// and the receiver settles what it still holds and takes the rest through the next gateway.
    /// </summary>
    [Fact]
    public async Task AProxyingGatewayThatStops_EndsTheStreamCleanly_AndTheReceiverGoesOnThroughAnother()
    {
        const string queue = "through-a-stop";
        const int count = 40;
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        var container = await ContainerOwnedByNode2Async(admin);
        await admin.CreateQueueAsync(new CreateQueueOptions(queue) { ContainerId = container.Id });

        // Node 1's gateway first, so the stream runs through it to node 2; node 3's is the way on.
        await using var client = new FarmClient($"Endpoint={farm.Endpoints[0]},{farm.Endpoints[2]}", new FarmClientOptions { SettleOnReceiveStream = true });
        await SendAsync(client, queue, count);
        var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = 10 });
        using var deadline = new CancellationTokenSource(Patience);
        var held = new List<FarmReceivedMessage>();
        while (held.Count < 20)
        {
            held.AddRange(await receiver.ReceiveMessagesAsync(20 - held.Count, TimeSpan.FromSeconds(1), deadline.Token));
        }
        var completed = new HashSet<string>();
        foreach (var message in held.Take(10))
        {
            await receiver.CompleteMessageAsync(message, deadline.Token);
            Assert.True(completed.Add(message.MessageId!), $"{message.MessageId} came twice");
        }

        var pid = farm.NodePid(1) ?? throw new InvalidOperationException("node 1 has no pid");
        var stop = await farm.RunAsync("node", "stop", "1");
        Assert.True(stop.ExitCode == 0, $"farm node stop 1 failed: {stop}");
        Assert.Contains($"node 1 (pid {pid}) stopped", stop.Stdout, StringComparison.Ordinal);
        Assert.False(LocalFarm.IsRunning(pid), $"node 1 (pid {pid}) still runs after farm node stop");

        // What the receiver held before the stop settles after it; the rest comes through node 3.
        foreach (var message in held.Skip(10))
        {
            await receiver.CompleteMessageAsync(message, deadline.Token);
            Assert.True(completed.Add(message.MessageId!), $"{message.MessageId} came twice");
        }
        while (completed.Count < count)
        {
            foreach (var message in await receiver.ReceiveMessagesAsync(count, TimeSpan.FromSeconds(1), deadline.Token))
            {
                Assert.True(completed.Add(message.MessageId!), $"{message.MessageId} came again after it was completed");
                await receiver.CompleteMessageAsync(message, deadline.Token);
            }
        }
        await receiver.DisposeAsync();

        using var owner = new FarmAdministrationClient("Endpoint=" + farm.Endpoints[2]);
        await Eventually.UntilAsync(async () => (await owner.GetQueueRuntimePropertiesAsync(queue)).ActiveMessageCount == 0,
            Patience, "every message completed once");
    }
    /// <summary>
    /// A receiver closed while its prefetch credit is out, just as messages arrive, leaves none of
    /// them locked for nobody: close takes the credit back first, so whatever the owner took for the
    /// stream reaches the receiver, which abandons it. Cut without that, messages the owner locked
    /// as the cut passed through the proxying gateway waited out their lock (a minute here; CI saw a
    /// processor wait 30 s for half its messages). Repeated, since each round is one chance to race.
    /// </summary>
    [Fact]
    public async Task AReceiverClosedAsMessagesArrive_LeavesNoneLockedForNobody()
    {
        const string queue = "closed-with-credit";
        const int rounds = 15;
        const int perRound = 10;
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        var container = await ContainerOwnedByNode2Async(admin);
        await admin.CreateQueueAsync(new CreateQueueOptions(queue) { ContainerId = container.Id, LockDuration = TimeSpan.FromMinutes(5) });

        // Through node 1's gateway, which proxies the stream to node 2.
        await using var client = new FarmClient("Endpoint=" + farm.Endpoints[0]);
        await using var sender = client.CreateSender(queue);
        var taken = new HashSet<string>();
        for (var round = 0; round < rounds; round++)
        {
            var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = perRound });
            // An empty queue: the call returns with nothing and leaves the prefetch credit out.
            Assert.Empty(await receiver.ReceiveMessagesAsync(1, TimeSpan.FromMilliseconds(50)));
            var sending = sender.SendMessagesAsync(Enumerable.Range(0, perRound).Select(i => new FarmMessage("x") { MessageId = $"r{round}-{i}" }));
            await sending;
            await receiver.DisposeAsync();

            // Everything sent is there to take at once, not locked for the receiver that closed.
            var next = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
            using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(20));
            var got = 0;
            while (got < perRound && !deadline.IsCancellationRequested)
            {
                foreach (var message in await next.ReceiveMessagesAsync(perRound, TimeSpan.FromSeconds(1)))
                {
                    Assert.True(taken.Add(message.MessageId!), $"{message.MessageId} came twice");
                    got++;
                }
            }
            await next.DisposeAsync();
            Assert.True(got == perRound, $"round {round}: {perRound - got} of {perRound} messages stayed locked for the receiver that closed");
        }
    }
}
