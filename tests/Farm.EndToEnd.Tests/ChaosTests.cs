using System.Collections.Concurrent;
using System.Diagnostics;
using System.Text.Json;
using Farm.Client;
using Farm.Testing;
using Xunit.Abstractions;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The farm issue's chaos test: a 3-node farm, 6 containers, 6 queues, continuous sends and
/// receives through the SDK, and a random node SIGKILLed ten times (restarted in between). Nothing
/// acknowledged may be lost, nothing completed may come back, and the containers end up spread
/// evenly. Each failover's unavailability (kill to the first successful send on a moved queue) is
/// printed; it is measured here, asserted nowhere (perf/ benchmarks it).
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class ChaosTests(ITestOutputHelper output)
{
    private static readonly int Kills = int.TryParse(Environment.GetEnvironmentVariable("FARM_CHAOS_KILLS"), out var k) ? k : 10;
    private const int Queues = 6;
    private static readonly TimeSpan FailoverDeadline = TimeSpan.FromSeconds(30);
    private static readonly TimeSpan BalanceDeadline = TimeSpan.FromSeconds(90);

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task KillingRandomNodes_LosesNothingAcknowledged_AndRedeliversNothingCompleted(bool redirect)
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        using var admin = new FarmAdministrationClient(farm.ConnectionString);
        for (var i = 1; i < Queues; i++)
        {
            await admin.CreateContainerAsync();
        }
        await WaitUntilBalancedAsync(admin, 3);
        var queueContainers = new Dictionary<string, long>();
        foreach (var container in await admin.GetContainersAsync())
        {
            var name = $"chaos-{container.Id}";
            // Duplicate detection makes a send the gateway or client retried after a lost reply count once.
            await admin.CreateQueueAsync(new CreateQueueOptions(name)
            {
                ContainerId = container.Id,
                RequiresDuplicateDetection = true,
                LockDuration = TimeSpan.FromSeconds(5),
                MaxDeliveryCount = 100,
            });
            queueContainers[name] = container.Id;
        }

        var connection = farm.ConnectionString + (redirect ? ";EnableRedirect=true" : "");
        var load = new ChaosLoad(connection, queueContainers.Keys.ToList());
        load.Start();
        await load.WaitForTrafficAsync(TimeSpan.FromSeconds(60));

        var random = new Random(20261122);
        var unavailability = new List<TimeSpan>();
        for (var kill = 1; kill <= Kills; kill++)
        {
            var node = random.Next(1, 4);
            var owned = await ContainersOfAsync(admin, node);
            var moved = queueContainers.Where(q => owned.Contains(q.Value)).Select(q => q.Key).ToList();
            var pid = farm.NodePid(node) ?? throw new InvalidOperationException($"node {node} has no pid");

            var killedAt = Stopwatch.GetTimestamp();
            using (var killed = Process.GetProcessById(pid))
            {
                killed.Kill();
                // SIGKILL is sent at once but a busy process takes a moment to go: `farm node start`
                // right after (no moved queue to wait for) found it still running.
                Assert.True(killed.WaitForExit(TimeSpan.FromSeconds(30)), $"node {node} (pid {pid}) still runs 30 s after SIGKILL");
            }
            var worst = TimeSpan.Zero;
            foreach (var queue in moved)
            {
                worst = Max(worst, await load.FirstSendAfterAsync(queue, killedAt, FailoverDeadline));
            }
            unavailability.Add(worst);
            output.WriteLine($"kill {kill}: node {node} (containers {string.Join(",", owned)}), unavailable {worst.TotalSeconds:0.00} s");

            await farm.StartNodeAsync(node);
            await WaitUntilBalancedAsync(admin, 3);
        }

        await load.StopAndDrainAsync(TimeSpan.FromSeconds(90));
        output.WriteLine(load.Summary());
        foreach (var queue in queueContainers.Keys)
        {
            var counts = await admin.GetQueueRuntimePropertiesAsync(queue);
            output.WriteLine($"{queue}: lost {load.LostIn(queue)}, active {counts.ActiveMessageCount}, dead-letter {counts.DeadLetterMessageCount}, locked {counts.LockedMessageCount}");
        }
        output.WriteLine($"unavailability: median {Median(unavailability).TotalSeconds:0.00} s, worst {unavailability.Max().TotalSeconds:0.00} s");

        if (load.Lost().Count > 0)
        {
            var keep = Path.Combine(Path.GetTempPath(), $"farm-chaos-logs-{(redirect ? "redirect" : "forward")}");
            Directory.CreateDirectory(keep);
            foreach (var log in Directory.GetFiles(Path.Combine(farm.DataDirectory, "logs")))
            {
                File.Copy(log, Path.Combine(keep, Path.GetFileName(log)), overwrite: true);
            }
            output.WriteLine($"node logs kept in {keep}");
        }
        Assert.Empty(load.Lost());
        Assert.Empty(load.CompletedThenDelivered);
        Assert.True(load.Acknowledged > 1000, $"too little traffic to mean anything: {load.Summary()}");
        await WaitUntilBalancedAsync(admin, 3);
    }

    private static TimeSpan Max(TimeSpan a, TimeSpan b) => a > b ? a : b;

    private static TimeSpan Median(List<TimeSpan> values) => values.Order().ElementAt(values.Count / 2);

    private static async Task<HashSet<long>> ContainersOfAsync(FarmAdministrationClient admin, long node) =>
        (await admin.GetContainersAsync()).Where(c => c.OwnerNode == node).Select(c => c.Id).ToHashSet();

    /// <summary>Every container owned, by live nodes only, the same number each.</summary>
    private static async Task WaitUntilBalancedAsync(FarmAdministrationClient admin, int nodes)
    {
        var last = "";
        var balanced = await Eventually.HoldsWithinAsync(async () =>
        {
            try
            {
                var status = await admin.GetFarmStatusAsync();
                var live = status.Nodes.Where(n => n.State == "active" && n.HeartbeatAge < TimeSpan.FromSeconds(3)).Select(n => n.Id).ToHashSet();
                var counts = live.ToDictionary(n => n, n => status.Containers.Count(c => c.OwnerNode == n));
                last = JsonSerializer.Serialize(counts);
                return live.Count == nodes && status.Containers.All(c => c.OwnerNode is { } o && live.Contains(o))
                    && counts.Values.Distinct().Count() == 1;
            }
            catch (FarmException)
            {
                return false; // a gateway that just died; the admin client moves on to the next endpoint
            }
        }, BalanceDeadline, TimeSpan.FromMilliseconds(200));
        Assert.True(balanced, $"the farm did not balance within {BalanceDeadline}: {last}");
    }
}

/// <summary>Continuous sends and peek-lock receives on every queue, keeping the books the chaos test checks.</summary>
internal sealed class ChaosLoad(string connection, IReadOnlyList<string> queues)
{
    private readonly CancellationTokenSource _stopSending = new();
    private readonly CancellationTokenSource _stopReceiving = new();
    private readonly ConcurrentDictionary<string, byte> _acknowledged = new();
    private readonly ConcurrentDictionary<string, byte> _received = new();
    private readonly ConcurrentDictionary<(string Queue, long Sequence), byte> _completed = new();
    private readonly ConcurrentDictionary<string, ConcurrentQueue<long>> _sendTimes = new();
    private readonly ConcurrentDictionary<string, string> _lastSendFailure = new();
    private readonly List<Task> _senders = [];
    private readonly List<Task> _receivers = [];
    private long _sendFailures;
    private long _completeFailures;

    public int Acknowledged => _acknowledged.Count;

    /// <summary>Deliveries of a message (queue + sequence number) after it was completed.</summary>
    public ConcurrentBag<string> CompletedThenDelivered { get; } = [];

    public void Start()
    {
        foreach (var queue in queues)
        {
            _sendTimes[queue] = new ConcurrentQueue<long>();
            _senders.Add(Task.Run(() => SendLoopAsync(queue)));
            _receivers.Add(Task.Run(() => ReceiveLoopAsync(queue)));
        }
    }

    public async Task WaitForTrafficAsync(TimeSpan deadline)
    {
        await Eventually.UntilAsync(() => !queues.Any(q => _sendTimes[q].IsEmpty) && !_completed.IsEmpty, deadline, "traffic on every queue");
    }

    /// <summary>Time from <paramref name="after"/> to the first acknowledged send on the queue after it.</summary>
    public async Task<TimeSpan> FirstSendAfterAsync(string queue, long after, TimeSpan deadline)
    {
        var first = 0L;
        await Eventually.UntilAsync(() => (first = _sendTimes[queue].Where(t => t > after).DefaultIfEmpty(0).Min()) > 0, deadline, $"a send on {queue} to succeed after the kill");
        return Stopwatch.GetElapsedTime(after, first);
    }

    /// <summary>The longest time without an acknowledged send on the queue, from the last send before <paramref name="from"/> on.</summary>
    public TimeSpan LongestGapSince(string queue, long from)
    {
        var times = _sendTimes[queue].Order().ToList();
        var start = times.LastOrDefault(t => t <= from, from);
        var longest = TimeSpan.Zero;
        foreach (var time in times.Where(t => t > start))
        {
            var gap = Stopwatch.GetElapsedTime(start, time);
            longest = gap > longest ? gap : longest;
            start = time;
        }
        return longest;
    }

    /// <summary>How many sends to the queue were acknowledged after <paramref name="after"/> (of the last 2,000 kept).</summary>
    public int SendsAfter(string queue, long after) => _sendTimes[queue].Count(t => t > after);

    /// <summary>Waits until <paramref name="count"/> sends to the queue were acknowledged after <paramref name="after"/>.</summary>
    public async Task WaitForSendsAfterAsync(string queue, long after, int count, TimeSpan deadline)
    {
        await Eventually.UntilAsync(() => _sendTimes[queue].Count(t => t > after) >= count, deadline, $"{count} sends on {queue} to be acknowledged");
    }

    private async Task SendLoopAsync(string queue)
    {
        await using var client = new FarmClient(connection);
        await using var sender = client.CreateSender(queue);
        var times = _sendTimes[queue];
        // Paces the load (at most one send per tick): this is a correctness test, not a benchmark.
        using var pace = new PeriodicTimer(TimeSpan.FromMilliseconds(10));
        for (var n = 0; !_stopSending.IsCancellationRequested; n++)
        {
            var id = $"{queue}-{n}";
            try
            {
                await sender.SendMessageAsync(new FarmMessage($"payload {n}") { MessageId = id });
                _acknowledged[id] = 0;
                times.Enqueue(Stopwatch.GetTimestamp());
                while (times.Count > 2000 && times.TryDequeue(out _))
                {
                }
            }
            catch (FarmException e)
            {
                // Not acknowledged, so not promised: the test only counts it, and keeps the last reason for diagnosis.
                Interlocked.Increment(ref _sendFailures);
                _lastSendFailure[queue] = $"{DateTime.UtcNow:HH:mm:ss.fff} {e.Reason}: {e.Message}";
            }
            await pace.WaitForNextTickAsync();
        }
    }

    private async Task ReceiveLoopAsync(string queue)
    {
        await using var client = new FarmClient(connection);
        while (!_stopReceiving.IsCancellationRequested)
        {
            await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = 20 });
            try
            {
                while (!_stopReceiving.IsCancellationRequested)
                {
                    var messages = await receiver.ReceiveMessagesAsync(20, TimeSpan.FromSeconds(1), _stopReceiving.Token);
                    foreach (var message in messages)
                    {
                        if (_completed.ContainsKey((queue, message.SequenceNumber)))
                        {
                            CompletedThenDelivered.Add($"{queue}#{message.SequenceNumber} ({message.MessageId})");
                        }
                        // Delivered to the application: at-least-once is kept whether or not the complete lands.
                        _received[message.MessageId!] = 0;
                    }
                    // Completed together, as a processor would: the client sends them in one Settle call.
                    await Task.WhenAll(messages.Select(async message =>
                    {
                        try
                        {
                            await receiver.CompleteMessageAsync(message);
                            _completed[(queue, message.SequenceNumber)] = 0;
                        }
                        catch (FarmException)
                        {
                            // The lock went with a dead node or a moved container: the message comes back.
                            Interlocked.Increment(ref _completeFailures);
                        }
                    }));
                }
            }
            catch (OperationCanceledException) when (_stopReceiving.IsCancellationRequested)
            {
                return;
            }
            catch (FarmException)
            {
                // The receiver gave up after its retries; a new one picks up where it stopped.
            }
        }
    }

    /// <summary>The last send failure on the queue (time, reason, message), or null.</summary>
    public string? LastSendFailure(string queue) => _lastSendFailure.GetValueOrDefault(queue);

    /// <summary>How long ago the queue's last acknowledged send was, or null when it never had one.</summary>
    public TimeSpan? SinceLastSend(string queue) =>
        _sendTimes[queue].DefaultIfEmpty(0).Max() is var last and > 0 ? Stopwatch.GetElapsedTime(last) : null;

    public int LostIn(string queue) => _acknowledged.Keys.Count(id => id.StartsWith(queue + "-", StringComparison.Ordinal) && !_received.ContainsKey(id));

    /// <summary>True when a message with this id reached a receiver.</summary>
    public bool WasReceived(string messageId) => _received.ContainsKey(messageId);

    public IReadOnlyList<string> Lost() => _acknowledged.Keys.Where(id => !_received.ContainsKey(id)).Order().Take(20).ToList();

    /// <summary>Stops everything without waiting (a test that failed): no load goes on into the next test.</summary>
    public void Abandon()
    {
        _stopSending.Cancel();
        _stopReceiving.Cancel();
    }

    public async Task StopAndDrainAsync(TimeSpan deadline)
    {
        await _stopSending.CancelAsync();
        // Sends in flight when the senders stop may still be acknowledged: count them before draining.
        await Task.WhenAll(_senders);
        await Eventually.HoldsWithinAsync(() => _acknowledged.Keys.All(_received.ContainsKey), deadline);
        await _stopReceiving.CancelAsync();
        await Task.WhenAll(_receivers);
    }

    public string Summary() =>
        $"acknowledged {_acknowledged.Count}, received {_received.Count}, completed {_completed.Count}, " +
        $"send failures {_sendFailures}, complete failures {_completeFailures}, completed-then-delivered {CompletedThenDelivered.Count}";
}
