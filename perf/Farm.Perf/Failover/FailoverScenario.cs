using System.Diagnostics;
using System.Globalization;
using Farm.Client;

namespace Farm.Perf.Failover;

/// <summary>
/// The failover benchmark: a 3-node farm, 6 containers (2 per node), one queue per container with
/// light continuous traffic through the SDK. Kills a random node with SIGKILL, measures for each of
/// its containers' queues the time from the kill to the first acknowledged send, restarts the node,
/// waits until the farm is balanced again and every queue accepts sends, and repeats. At the end it
/// drains the queues and checks that no acknowledged message was lost.
/// </summary>
internal sealed partial class FailoverScenario(PerfOptions options)
{
    public const int Nodes = 3;
    public const int ContainersPerNode = 2;
    public static readonly TimeSpan SendInterval = TimeSpan.FromMilliseconds(20);

    private static readonly TimeSpan Poll = TimeSpan.FromMilliseconds(100);
    private static readonly TimeSpan LockDuration = TimeSpan.FromSeconds(10);
    private static readonly TimeSpan AvailableTimeout = TimeSpan.FromSeconds(60);
    private static readonly TimeSpan BalanceTimeout = TimeSpan.FromSeconds(180);
    private static readonly TimeSpan SteadyBeforeFirstKill = TimeSpan.FromSeconds(5);
    private static readonly TimeSpan DrainTimeout = TimeSpan.FromSeconds(90);

    /// <summary>A receiver silent this long while messages wait is stuck: longer than the queues' 10 s lock, after which a held message comes again.</summary>
    private static readonly TimeSpan StallAfter = TimeSpan.FromSeconds(15);
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    private readonly List<string> _problems = [];

    public async Task<FailoverReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        var seed = options.Seed ?? Environment.TickCount;
        var random = new Random(seed);
        var mode = options.Redirect ? "redirect" : "forward";

        Console.Error.WriteLine($"perf: failover ({mode} mode, {options.Kills} kills, seed {seed}): starting a {Nodes}-node farm");
        await using var farm = await LocalFarm.StartAsync(Nodes, cancellationToken, options.FarmConnection).ConfigureAwait(false);
        Console.Error.WriteLine($"perf: nodes {string.Join(", ", farm.NodeIds.Select(n => $"{n} at {farm.AddressOf(n)} (pid {farm.Node(n).ProcessId})"))}; data {farm.DataDirectory}");
        using var watch = new FarmWatch(farm);
        using var admin = new FarmAdministrationClient(farm.ConnectionString(redirect: false));

        var containers = await CreateContainersAsync(admin, watch, cancellationToken).ConfigureAwait(false);
        var ledger = new FailoverLedger(LockDuration);
        var queues = await CreateQueuesAsync(admin, farm, containers, ledger, cancellationToken).ConfigureAwait(false);

        using var stopSending = new CancellationTokenSource();
        foreach (var queue in queues)
        {
            queue.StartReceiving();
        }

        var sending = Task.WhenAll(queues.Select(q => q.SendAsync(stopSending.Token)));
        var kills = new List<KillRecord>();
        try
        {
            var ready = await WaitForSendsAsync(queues, Stopwatch.GetTimestamp(), AvailableTimeout, cancellationToken).ConfigureAwait(false);
            if (ready.Count > 0)
            {
                throw new InvalidOperationException($"queues {string.Join(", ", ready)} accepted no send within {AvailableTimeout.TotalSeconds:0} s of the start");
            }

            await Task.Delay(SteadyBeforeFirstKill, cancellationToken).ConfigureAwait(false);
            long previous = 0;
            for (var kill = 1; kill <= options.Kills; kill++)
            {
                var candidates = farm.NodeIds.Where(n => n != previous).ToList();
                var victim = candidates[random.Next(candidates.Count)];
                kills.Add(options.Signal == "stop"
                    ? await StopOnceAsync(kill, victim, farm, watch, queues, ledger, cancellationToken).ConfigureAwait(false)
                    : await KillOnceAsync(kill, victim, farm, watch, queues, ledger, cancellationToken).ConfigureAwait(false));
                previous = victim;
            }
        }
        finally
        {
            await stopSending.CancelAsync().ConfigureAwait(false);
            await sending.ConfigureAwait(false);
            if (!cancellationToken.IsCancellationRequested)
            {
                await DrainAsync(admin, queues, ledger, cancellationToken).ConfigureAwait(false);
            }

            await Task.WhenAll(queues.Select(q => q.StopReceivingAsync())).ConfigureAwait(false);
        }

        var left = await LeftInQueuesAsync(admin, queues, cancellationToken).ConfigureAwait(false);
        var verification = Verify(ledger, left);
        // A stop that froze the node inside a SQLite write blocks the takeover until it resumes: reported apart (StopsInsideWrite).
        var perKill = kills.Where(k => k.InsideWrite != true).Select(k => k.UnavailableS).ToList();
        var takeovers = kills.Where(k => k.TakeoverS is not null && k.InsideWrite != true).Select(k => k.TakeoverS!.Value).ToList();
        return new FailoverReport(
            Scenario: options.Signal == "stop" ? "failover-stop" : "failover",
            Mode: mode,
            Kills: kills.Count,
            MedianS: Round(Percentile(perKill, 0.5)),
            MaxS: Round(perKill.Count == 0 ? 0 : perKill.Max()),
            P90S: Round(Percentile(perKill, 0.9)),
            PerKillS: perKill,
            Lost: verification.Lost,
            Machine: MachineInfo.Current(),
            Timestamp: DateTimeOffset.UtcNow,
            TakeoverMedianS: Round(Percentile(takeovers, 0.5)),
            TakeoverMaxS: Round(takeovers.Count == 0 ? 0 : takeovers.Max()),
            Details: kills,
            Settings: new FailoverSettings(
                Nodes, Nodes * ContainersPerNode, queues.Count, SendInterval.TotalMilliseconds, 1024, options.Redirect, seed,
                DescribeRetry(new FarmRetryOptions())),
            Verification: verification,
            Command: command)
        {
            Signal = options.Signal == "stop" ? "stop" : null,
            Store = options.FarmConnection is null ? "sqlite" : "postgres",
            StopsInsideWrite = options.Signal == "stop" ? kills.Count(k => k.InsideWrite == true) : null,
            InsideWritePerStopS = options.Signal == "stop" ? [.. kills.Where(k => k.InsideWrite == true).Select(k => k.UnavailableS)] : null,
        };
    }

    /// <summary>One kill: SIGKILL, wait for the moved queues to accept sends, restart, wait for balance.</summary>
    private async Task<KillRecord> KillOnceAsync(
        int kill, long victim, LocalFarm farm, FarmWatch watch, IReadOnlyList<QueueTraffic> queues, FailoverLedger ledger, CancellationToken cancellationToken)
    {
        var before = await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false);
        var moving = before.Containers.Where(c => c.OwnerNode == victim).Select(c => c.Id).Order().ToList();
        var movingQueues = queues.Where(q => moving.Contains(q.ContainerId)).ToList();
        var otherQueues = queues.Except(movingQueues).ToList();
        var failuresBefore = ledger.SendFailures;
        var survivors = farm.NodeIds.Where(n => n != victim).ToList();

        var killedAt = Stopwatch.GetTimestamp();
        foreach (var queue in queues)
        {
            queue.Mark(killedAt);
        }

        farm.Kill(victim);

        // Poll the status (who owns the moved containers) and the queues until every queue has
        // accepted a send again.
        double? takeover = null;
        var newOwners = new Dictionary<string, long>();
        var waiting = queues.ToList();
        while (waiting.Count > 0 && Stopwatch.GetElapsedTime(killedAt) < AvailableTimeout)
        {
            if (takeover is null && await watch.TryGetStatusAsync(survivors, cancellationToken).ConfigureAwait(false) is { } status)
            {
                var live = status.Nodes.Where(FarmWatch.IsLive).Select(n => n.Id).ToHashSet();
                var moved = status.Containers.Where(c => moving.Contains(c.Id) && c.OwnerNode is { } o && o != victim && live.Contains(o)).ToList();
                if (moved.Count == moving.Count)
                {
                    takeover = Stopwatch.GetElapsedTime(killedAt).TotalSeconds;
                    foreach (var container in moved)
                    {
                        newOwners[container.Id.ToString(Inv)] = container.OwnerNode!.Value;
                    }
                }
            }

            waiting.RemoveAll(q => q.FirstSuccessAfterMark() is not null);
            await Task.Delay(Poll, cancellationToken).ConfigureAwait(false);
        }

        var perQueue = new List<double>();
        var started = new List<double?>();
        foreach (var queue in movingQueues)
        {
            if (queue.FirstSuccessAfterMark() is { } first)
            {
                perQueue.Add(Round(first.Acknowledged.TotalSeconds));
                started.Add(Round(first.Started.TotalSeconds));
            }
            else
            {
                perQueue.Add(Round(AvailableTimeout.TotalSeconds));
                started.Add(null);
                _problems.Add($"kill {kill} (node {victim}): queue {queue.Name} accepted no send within {AvailableTimeout.TotalSeconds:0} s");
            }
        }

        var others = otherQueues.Select(q => q.FirstSuccessAfterMark()?.Acknowledged.TotalSeconds ?? AvailableTimeout.TotalSeconds).ToList();
        var unavailable = perQueue.Count == 0 ? 0 : perQueue.Max();
        Console.Error.WriteLine(string.Create(Inv,
            $"perf: kill {kill,2}: node {victim} (containers {string.Join(',', moving)} -> nodes {string.Join(',', moving.Select(c => newOwners.GetValueOrDefault(c.ToString(Inv))))}): unavailable {unavailable:0.000} s (queues {string.Join(", ", perQueue.Select(s => s.ToString("0.000", Inv)))}; takeover seen at {takeover:0.0} s; other queues max {(others.Count == 0 ? 0 : others.Max()):0.000} s)"));

        // Back to three nodes and a balanced farm before the next kill.
        var restart = Stopwatch.StartNew();
        await farm.RestartAsync(victim, cancellationToken).ConfigureAwait(false);
        var balanced = await WaitForBalanceAsync(farm, watch, cancellationToken).ConfigureAwait(false);
        var rebalanced = restart.Elapsed.TotalSeconds;
        if (!balanced)
        {
            throw new TimeoutException($"after kill {kill} the farm was not balanced within {BalanceTimeout.TotalSeconds:0} s of restarting node {victim}");
        }

        var unready = await WaitForSendsAsync(queues, Stopwatch.GetTimestamp(), AvailableTimeout, cancellationToken).ConfigureAwait(false);
        if (unready.Count > 0)
        {
            throw new TimeoutException($"after kill {kill} queues {string.Join(", ", unready)} accepted no send within {AvailableTimeout.TotalSeconds:0} s of the farm being balanced");
        }

        // Sends flow on every queue now, so a receiver silent for long is stuck, not idle.
        var stalls = CheckStalls(queues, _ => true, $"kill {kill}");
        var after = FarmWatch.Describe(await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false));
        Console.Error.WriteLine(string.Create(Inv, $"perf:          node {victim} restarted, balanced after {rebalanced:0.0} s: {after}"));
        return new KillRecord(
            kill, victim, moving, newOwners, Round(unavailable), perQueue, started,
            takeover is null ? null : Round(takeover.Value),
            others.Count == 0 ? null : Round(others.Max()),
            ledger.SendFailures - failuresBefore,
            Round(rebalanced),
            stalls);
    }

    /// <summary>Creates containers until there are 2 per node and waits until each node owns 2.</summary>
    private static async Task<IReadOnlyList<long>> CreateContainersAsync(FarmAdministrationClient admin, FarmWatch watch, CancellationToken cancellationToken)
    {
        var wanted = Nodes * ContainersPerNode;
        var existing = (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false)).Count;
        for (var i = existing; i < wanted; i++)
        {
            await admin.CreateContainerAsync(cancellationToken).ConfigureAwait(false);
        }

        var clock = Stopwatch.StartNew();
        while (true)
        {
            var status = await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false);
            if (status.Containers.Count != wanted)
            {
                throw new InvalidOperationException($"the farm has {status.Containers.Count} containers, expected {wanted}");
            }

            if (FarmWatch.IsBalanced(status, status.Nodes.Select(n => n.Id).ToList(), ContainersPerNode) && status.Nodes.Count == Nodes)
            {
                Console.Error.WriteLine($"perf: {wanted} containers, balanced after {clock.Elapsed.TotalSeconds:0.0} s: {FarmWatch.Describe(status)}");
                return status.Containers.Select(c => c.Id).Order().ToList();
            }

            if (clock.Elapsed > BalanceTimeout)
            {
                throw new TimeoutException($"the new farm was not balanced within {BalanceTimeout.TotalSeconds:0} s: {FarmWatch.Describe(status)}");
            }

            await Task.Delay(Poll, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>One queue per container, created in that container; each with its own clients.</summary>
    private async Task<IReadOnlyList<QueueTraffic>> CreateQueuesAsync(
        FarmAdministrationClient admin, LocalFarm farm, IReadOnlyList<long> containers, FailoverLedger ledger, CancellationToken cancellationToken)
    {
        var nodes = farm.NodeIds;
        var queues = new List<QueueTraffic>();
        for (var i = 0; i < containers.Count; i++)
        {
            var name = $"failover-{i + 1}";
            var created = await admin.CreateQueueAsync(new CreateQueueOptions(name)
            {
                ContainerId = containers[i],
                // A lock dropped by a failover lapses soon, so the drain at the end is short.
                LockDuration = LockDuration,
                // Every kill may cost a locked message one delivery; none should reach the dead-letter queue.
                MaxDeliveryCount = 1000,
            }, cancellationToken).ConfigureAwait(false);
            if (created.ContainerId != containers[i])
            {
                throw new InvalidOperationException($"queue {name} landed in container {created.ContainerId}, not {containers[i]}");
            }

            // The gateways in a different order per queue, so the clients spread over the nodes
            // (each fails over to the next endpoint when its current one dies).
            var order = Enumerable.Range(0, nodes.Count).Select(k => nodes[(i + k) % nodes.Count]).ToList();
            queues.Add(new QueueTraffic(name, containers[i], farm.ConnectionString(options.Redirect, order), SendInterval, ledger));
        }

        Console.Error.WriteLine($"perf: queues {string.Join(", ", queues.Select(q => $"{q.Name} (container {q.ContainerId})"))}; one send per {SendInterval.TotalMilliseconds:0} ms each");
        return queues;
    }

    /// <summary>Waits until the restarted node is live and every node owns 2 containers.</summary>
    private static async Task<bool> WaitForBalanceAsync(LocalFarm farm, FarmWatch watch, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < BalanceTimeout)
        {
            if (await watch.TryGetStatusAsync(farm.NodeIds, cancellationToken).ConfigureAwait(false) is { } status
                && FarmWatch.IsBalanced(status, farm.NodeIds, ContainersPerNode))
            {
                return true;
            }

            await Task.Delay(Poll, cancellationToken).ConfigureAwait(false);
        }

        return false;
    }

    /// <summary>Marks every queue and waits until each accepted a send started after the mark; returns the ones that did not.</summary>
    private static async Task<List<string>> WaitForSendsAsync(IReadOnlyList<QueueTraffic> queues, long from, TimeSpan timeout, CancellationToken cancellationToken)
    {
        foreach (var queue in queues)
        {
            queue.Mark(from);
        }

        var waiting = queues.ToList();
        while (waiting.Count > 0 && Stopwatch.GetElapsedTime(from) < timeout)
        {
            await Task.Delay(Poll, cancellationToken).ConfigureAwait(false);
            waiting.RemoveAll(q => q.FirstSuccessAfterMark() is not null);
        }

        return waiting.Select(q => q.Name).ToList();
    }

    /// <summary>
    /// Senders have stopped: waits until every acknowledged message arrived and the queues are
    /// empty. A receiver that delivers nothing for <see cref="StallAfter"/> while its queue holds
    /// messages is replaced by a fresh one (and reported).
    /// </summary>
    private async Task DrainAsync(FarmAdministrationClient admin, IReadOnlyList<QueueTraffic> queues, FailoverLedger ledger, CancellationToken cancellationToken)
    {
        Console.Error.WriteLine($"perf: draining: {ledger.Acked.Count} acknowledged, {ledger.Received.Count} received so far");
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < DrainTimeout)
        {
            var left = await LeftPerQueueAsync(admin, queues, cancellationToken).ConfigureAwait(false);
            if (ledger.Received.Count >= ledger.Acked.Count && ledger.CountLost() == 0 && left.Values.All(n => n == 0))
            {
                Console.Error.WriteLine($"perf: drained in {clock.Elapsed.TotalSeconds:0.0} s");
                return;
            }

            CheckStalls(queues, q => left.GetValueOrDefault(q.Name) > 0, "the drain");
            await Task.Delay(500, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>Replaces the receiver of each queue that has messages but delivered nothing for <see cref="StallAfter"/>; returns their names.</summary>
    private List<string> CheckStalls(IReadOnlyList<QueueTraffic> queues, Func<QueueTraffic, bool> hasMessages, string when)
    {
        var stalled = new List<string>();
        foreach (var queue in queues.Where(q => q.SinceLastDelivery > StallAfter && hasMessages(q)))
        {
            var problem = string.Create(Inv, $"the receiver of {queue.Name} delivered nothing for {queue.SinceLastDelivery.TotalSeconds:0} s while its queue held messages (during {when}); replaced by a fresh receiver");
            Console.Error.WriteLine($"perf: !! {problem}");
            _problems.Add(problem);
            queue.RestartReceiver();
            stalled.Add(queue.Name);
        }

        return stalled;
    }

    private static async Task<Dictionary<string, long>> LeftPerQueueAsync(FarmAdministrationClient admin, IReadOnlyList<QueueTraffic> queues, CancellationToken cancellationToken)
    {
        var left = new Dictionary<string, long>();
        foreach (var queue in queues)
        {
            try
            {
                left[queue.Name] = (await admin.GetQueueRuntimePropertiesAsync(queue.Name, cancellationToken).ConfigureAwait(false)).TotalMessageCount;
            }
            catch (FarmException e)
            {
                Console.Error.WriteLine($"perf: could not read the message count of {queue.Name}: {e.Message}");
                left[queue.Name] = -1;
            }
        }

        return left;
    }

    /// <summary>Messages still in the queues (any state); -1 when a count could not be read.</summary>
    private static async Task<long> LeftInQueuesAsync(FarmAdministrationClient admin, IReadOnlyList<QueueTraffic> queues, CancellationToken cancellationToken)
    {
        long total = 0;
        foreach (var queue in queues)
        {
            try
            {
                total += (await admin.GetQueueRuntimePropertiesAsync(queue.Name, cancellationToken).ConfigureAwait(false)).TotalMessageCount;
            }
            catch (FarmException e)
            {
                Console.Error.WriteLine($"perf: could not read the message count of {queue.Name}: {e.Message}");
                return -1;
            }
        }

        return total;
    }

    private FailoverVerification Verify(FailoverLedger ledger, long left)
    {
        var lost = ledger.CountLost();
        var problems = new List<string>(_problems);
        if (lost > 0)
        {
            problems.Add($"{lost} acknowledged messages were never received (drained for up to {DrainTimeout.TotalSeconds:0} s)");
        }

        if (ledger.LockedAfterComplete > 0)
        {
            problems.Add($"{ledger.LockedAfterComplete} messages were locked and delivered again after the broker had acknowledged their Complete");
        }

        if (ledger.StoredTwice > 0)
        {
            Console.WriteLine($"failover: {ledger.StoredTwice} messages were stored twice (a send retried after a lost reply that the farm did not recognise as a repeat; no duplicate detection on these queues)");
        }
        if (ledger.CompletedTwice > 0)
        {
            problems.Add($"{ledger.CompletedTwice} messages were completed twice (the broker acknowledged two Completes of one message)");
        }

        if (ledger.Foreign > 0)
        {
            problems.Add($"{ledger.Foreign} messages received that this run did not send");
        }

        if (left != 0)
        {
            problems.Add(left < 0 ? "the queues' message counts could not be read" : $"{left} messages are still in the queues after the drain");
        }

        return new FailoverVerification(
            Passed: problems.Count == 0,
            Attempted: ledger.Attempted,
            Acknowledged: ledger.Acked.Count,
            ReceivedUnique: ledger.Received.Count,
            Deliveries: ledger.Deliveries,
            Lost: lost,
            Duplicates: ledger.Duplicates,
            StoredTwice: ledger.StoredTwice,
            RedeliveredAfterComplete: ledger.RedeliveredAfterComplete,
            LockedAfterComplete: ledger.LockedAfterComplete,
            CompletedTwice: ledger.CompletedTwice,
            UnacknowledgedButDelivered: ledger.CountUnacknowledgedButDelivered(),
            Foreign: ledger.Foreign,
            SendFailures: ledger.SendFailures,
            ReceiveErrors: ledger.ReceiveErrors,
            CompleteErrors: ledger.CompleteErrors,
            LeftInQueues: left,
            Problems: problems);
    }

    /// <summary>Linear interpolation between the closest ranks (0 for no values).</summary>
    private static double Percentile(IReadOnlyList<double> values, double q)
    {
        if (values.Count == 0)
        {
            return 0;
        }

        var sorted = values.Order().ToList();
        var h = (sorted.Count - 1) * q;
        var low = (int)Math.Floor(h);
        var high = Math.Min(low + 1, sorted.Count - 1);
        return sorted[low] + ((h - low) * (sorted[high] - sorted[low]));
    }

    private static double Round(double seconds) => Math.Round(seconds, 3);

    private static string DescribeRetry(FarmRetryOptions retry)
        => string.Create(Inv, $"SDK defaults: {retry.Mode.ToString().ToLowerInvariant()} backoff from {retry.Delay.TotalSeconds:0.0#} s with jitter, {retry.MaxRetries} retries, try timeout {retry.TryTimeout.TotalSeconds:0} s");
}
