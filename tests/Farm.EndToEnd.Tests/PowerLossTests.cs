using System.Collections.Concurrent;
using System.Text;
using Farm.Client;
using Farm.Testing;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Promises 1 and 2 across a power loss, not only a crash: a node SIGKILLed under load, then every
/// write its disk had not fsynced dropped (<see cref="PowerLossDisk"/>), then the farm started again
/// on what the disk kept. A SIGKILL alone loses nothing the kernel already holds, so it cannot show
/// that a send or a complete was acknowledged before its transaction was durable; this can.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class PowerLossTests
{
    private static readonly TimeSpan LoadFor = TimeSpan.FromSeconds(6);

    [Fact]
    public async Task AfterAPowerLossUnderLoad_EveryAcknowledgedSendIsThere_AndNoAcknowledgedCompleteComesBack()
    {
        await using var disk = await PowerLossDisk.MountAsync();
        await using var farm = LocalFarm.On(disk.MountPath);
        await farm.UpAsync();
        foreach (var create in new[]
        {
            new[] { "queue", "create", "orders" },
            ["topic", "create", "events"],
            ["subscription", "create", "events", "completed"],
            ["subscription", "create", "events", "kept"],
        })
        {
            var result = await farm.RunAsync(create);
            Assert.True(result.ExitCode == 0, $"farm {string.Join(' ', create)} failed: {result}");
        }

        var orders = new Ledger();
        var events = new Ledger();
        var completedEvents = new Ledger();
        // Set just before the power goes: the calls that fail from then on are expected to. The load
        // goes on until then (stopping it first would let the last fsyncs finish in peace).
        using var powerOff = new CancellationTokenSource();
        // Set once the power is off: the calls still trying (the client retries) give up.
        using var stop = new CancellationTokenSource();
        await using (var client = new FarmClient(farm.ConnectionString))
        {
            // Several senders each, so that nearly every fsync carries sends and completes.
            var load = new List<Task>
            {
                CompleteAsync(client.CreateReceiver("orders"), orders, powerOff.Token, stop.Token),
                CompleteAsync(client.CreateReceiver("events", "completed"), completedEvents, powerOff.Token, stop.Token),
            };
            for (var s = 0; s < 4; s++)
            {
                load.Add(SendAsync(client, "orders", $"order{s}", orders, powerOff.Token, stop.Token));
            }
            for (var s = 0; s < 2; s++)
            {
                load.Add(SendAsync(client, "events", $"event{s}", events, powerOff.Token, stop.Token));
            }
            // Under load until it is cut: a while, and until every part of it got acknowledgements.
            var until = DateTime.UtcNow + LoadFor;
            await Eventually.UntilAsync(
                () => DateTime.UtcNow >= until && orders.Completed.Count > 0 && completedEvents.Completed.Count > 0 && events.Sent.Count > 0,
                TimeSpan.FromSeconds(90), "sends and completes acknowledged on the queue and the subscription");
            // Nothing may have stopped before the power loss: a failure then is a failure of the test.
            Assert.All(load, t => Assert.False(t.IsCompleted, t.Exception?.ToString() ?? "a part of the load stopped before the power loss"));

            // The power goes first, then the node: an fsync under way when the power went never
            // returns, as on a real machine (killing first would let it finish meanwhile).
            // (SIGKILL by pid: `farm down` would write its record to a disk that is gone.)
            var pids = farm.NodePids();
            powerOff.Cancel();
            var (dropped, droppedFromWal) = await disk.PowerLossAsync();
            foreach (var pid in pids.Where(LocalFarm.IsRunning))
            {
                using var node = System.Diagnostics.Process.GetProcessById(pid);
                node.Kill();
                await node.WaitForExitAsync();
            }
            stop.Cancel();
            await Task.WhenAll(load);
            // The shared-memory index is never fsynced: something is always dropped. Say how much of it was the WAL's.
            Assert.True(dropped > 0, "the power loss dropped nothing");
            Console.WriteLine($"power loss dropped {dropped} bytes, {droppedFromWal} of them from WAL files; "
                + $"acknowledged: {orders.Sent.Count} sends and {orders.Completed.Count} completes on the queue, {events.Sent.Count} sends to the topic, {completedEvents.Completed.Count} completes on its subscription");
        }

        await disk.RemountAsync();
        await farm.UpAsync();
        await using (var client = new FarmClient(farm.ConnectionString))
        {
            var ordersLeft = await DrainAsync(client.CreateReceiver("orders"));
            orders.AssertKeptAfter(ordersLeft, "orders");
            var completedLeft = await DrainAsync(client.CreateReceiver("events", "completed"));
            completedEvents.AssertKeptAfter(completedLeft, "events/completed", sent: events);
            var keptLeft = await DrainAsync(client.CreateReceiver("events", "kept"));
            new Ledger().AssertKeptAfter(keptLeft, "events/kept", sent: events);
        }
    }

    private static async Task SendAsync(FarmClient client, string entity, string prefix, Ledger ledger, CancellationToken powerOff, CancellationToken stop)
    {
        var sender = client.CreateSender(entity);
        for (var batch = 0; !stop.IsCancellationRequested; batch++)
        {
            var ids = Enumerable.Range(0, 5).Select(i => $"{prefix}-{batch:D5}-{i}").ToList();
            ledger.Attempted(ids);
            try
            {
                await sender.SendMessagesAsync(ids.Select(id => new FarmMessage(Encoding.UTF8.GetBytes("body of " + id)) { MessageId = id }), stop);
            }
            catch (Exception) when (powerOff.IsCancellationRequested)
            {
                // The power went: nothing more is acknowledged.
                return;
            }
            ids.ForEach(ledger.Sent.Enqueue);
        }
        await sender.DisposeAsync();
    }

    private static async Task CompleteAsync(FarmReceiver receiver, Ledger ledger, CancellationToken powerOff, CancellationToken stop)
    {
        // Not disposed: closing its link would wait on a node that is gone; the client's dispose ends it.
        {
            while (!stop.IsCancellationRequested)
            {
                try
                {
                    var messages = await receiver.ReceiveMessagesAsync(20, TimeSpan.FromSeconds(1), stop);
                    // Completed together (one commit for many), each recorded once its own complete is acknowledged.
                    await Task.WhenAll(messages.Select(async message =>
                    {
                        Assert.Equal("body of " + message.MessageId, message.Body.ToString());
                        await receiver.CompleteMessageAsync(message, stop);
                        ledger.Completed.Enqueue(message.MessageId!);
                    }));
                }
                catch (Exception) when (powerOff.IsCancellationRequested)
                {
                    // The power went: nothing more is acknowledged.
                    return;
                }
            }
        }
    }

    /// <summary>Receives and completes everything the entity holds, until nothing comes for a few seconds.</summary>
    private static async Task<List<string>> DrainAsync(FarmReceiver receiver)
    {
        await using (receiver)
        {
            var received = new List<string>();
            var deadline = DateTime.UtcNow.AddSeconds(120);
            while (DateTime.UtcNow < deadline)
            {
                var messages = await receiver.ReceiveMessagesAsync(100, TimeSpan.FromSeconds(3));
                if (messages.Count == 0)
                {
                    return received;
                }
                foreach (var message in messages)
                {
                    Assert.Equal("body of " + message.MessageId, message.Body.ToString());
                    received.Add(message.MessageId!);
                }
                await Task.WhenAll(messages.Select(m => receiver.CompleteMessageAsync(m)));
            }
            throw new TimeoutException($"{received.Count} messages received in 120 s and more still coming");
        }
    }

    /// <summary>What the load was told: sends tried and acknowledged, completes acknowledged.</summary>
    private sealed class Ledger
    {
        public ConcurrentDictionary<string, bool> Tried { get; } = new();
        public ConcurrentQueue<string> Sent { get; } = new();
        public ConcurrentQueue<string> Completed { get; } = new();

        public void Attempted(IEnumerable<string> ids)
        {
            foreach (var id in ids)
            {
                Tried[id] = true;
            }
        }

        /// <summary>
        /// What an entity holds after the power loss (<paramref name="left"/>) against what was
        /// acknowledged on it before: every acknowledged send still there unless its complete was
        /// acknowledged, none of those completes undone, each message once, nothing never sent.
        /// </summary>
        public void AssertKeptAfter(List<string> left, string entity, Ledger? sent = null)
        {
            sent ??= this;
            var completed = Completed.ToHashSet();
            var leftSet = left.ToHashSet();
            Assert.True(left.Count == leftSet.Count, $"{entity}: {left.Count - leftSet.Count} messages came back twice");
            var lost = sent.Sent.Where(id => !leftSet.Contains(id) && !completed.Contains(id)).ToList();
            Assert.True(lost.Count == 0, $"{entity}: {lost.Count} acknowledged sends lost, such as {string.Join(", ", lost.Take(5))}");
            var undone = left.Where(completed.Contains).ToList();
            Assert.True(undone.Count == 0, $"{entity}: {undone.Count} messages whose complete was acknowledged came back, such as {string.Join(", ", undone.Take(5))}");
            var unknown = left.Where(id => !sent.Tried.ContainsKey(id)).ToList();
            Assert.True(unknown.Count == 0, $"{entity}: {unknown.Count} messages never sent came back, such as {string.Join(", ", unknown.Take(5))}");
        }
    }
}
