using System.Collections.Concurrent;
using System.Diagnostics;
using Farm.Client;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A topic on a 3-node farm: clients reach it through another node's gateway, and when its owner is
/// SIGKILLed the topic, its subscriptions and their unsettled messages move with the container.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class TopicFailoverTests(ITestOutputHelper output)
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task ATopicsSubscriptions_MoveWithItsContainer_WhenItsOwnerIsKilled_AndLoseNothingAcknowledged()
    {
        await using var farm = await PlannedMoveTests.StartBalancedFarmAsync();
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        var topic = await admin.CreateTopicAsync(new CreateTopicOptions("events") { RequiresDuplicateDetection = true, SupportOrdering = true });
        await admin.CreateSubscriptionAsync(new CreateSubscriptionOptions("events", "all") { LockDuration = TimeSpan.FromSeconds(30) });
        await admin.CreateSubscriptionAsync(new CreateSubscriptionOptions("events", "red"), new CreateRuleOptions("red", new SqlRuleFilter("color = 'red'")));
        var owner = (int)(await admin.GetContainersAsync()).Single(c => c.Id == topic.ContainerId).OwnerNode!.Value;

        // Another node's gateway first: every call is forwarded to the owner, then to whoever takes over.
        var endpoints = farm.Endpoints.ToList();
        var gateway = endpoints[owner % 3];
        var connection = "Endpoint=" + string.Join(',', new[] { gateway }.Concat(endpoints.Where(e => e != gateway)));
        output.WriteLine($"topic in container {topic.ContainerId} on node {owner}; clients enter at {gateway}");

        var acknowledged = new ConcurrentDictionary<string, string>();
        using var stopSending = new CancellationTokenSource();
        await using var client = new FarmClient(connection);
        var sending = Task.Run(async () =>
        {
            await using var sender = client.CreateSender("events");
            for (var i = 0; !stopSending.IsCancellationRequested; i++)
            {
                var color = i % 3 == 0 ? "red" : "blue";
                var message = new FarmMessage($"event {i}") { MessageId = $"m-{i}" };
                message.ApplicationProperties["color"] = color;
                try
                {
                    await sender.SendMessageAsync(message);
                    acknowledged[message.MessageId] = color;
                }
                catch (FarmException)
                {
                    // Not acknowledged: it may or may not be stored; nothing is promised about it.
                }
            }
        });
        var all = new CompletingReceiverLoad(() => client.CreateReceiver("events", "all"));
        var red = new CompletingReceiverLoad(() => client.CreateReceiver("events", "red"));

        await WaitForAsync(() => acknowledged.Count >= 100, "100 sends acknowledged before the kill");
        var killedAt = Stopwatch.StartNew();
        await farm.KillNodeAsync(owner);
        // Counted once the process is gone: sends the owner acknowledged while the kill command
        // started must not pass for sends the survivors took.
        var afterKill = acknowledged.Count;
        await WaitForAsync(() => acknowledged.Count >= afterKill + 100, "sends go on after the kill");
        output.WriteLine($"100 more sends acknowledged {killedAt.Elapsed.TotalSeconds:0.0} s after the kill");
        var newOwner = (await admin.GetContainersAsync()).Single(c => c.Id == topic.ContainerId).OwnerNode;
        Assert.NotEqual(owner, newOwner);

        await farm.StartNodeAsync(owner);
        var afterRestart = acknowledged.Count;
        await WaitForAsync(() => acknowledged.Count >= afterRestart + 50, "sends go on after the node came back");
        await stopSending.CancelAsync();
        await sending;

        var expectedRed = acknowledged.Where(a => a.Value == "red").Select(a => a.Key).ToHashSet();
        await WaitForAsync(() => all.Received.Keys.ToHashSet().IsSupersetOf(acknowledged.Keys), "'all' received every acknowledged send");
        await WaitForAsync(() => red.Received.Keys.ToHashSet().IsSupersetOf(expectedRed), "'red' received every acknowledged red send");
        await all.StopAsync();
        await red.StopAsync();

        output.WriteLine($"{acknowledged.Count} acknowledged; 'all' received {all.Received.Count} ids ({all.Deliveries} deliveries), 'red' {red.Received.Count} ({red.Deliveries})");
        Assert.All(red.Received.Keys, id => Assert.Equal("red", acknowledged.GetValueOrDefault(id, "red")));
        Assert.Empty(all.DeliveredAfterCompletion);
        Assert.Empty(red.DeliveredAfterCompletion);
    }

    private static Task WaitForAsync(Func<bool> condition, string what) => ProcessRunner.WaitUntilAsync(condition, Deadline, what);
}
