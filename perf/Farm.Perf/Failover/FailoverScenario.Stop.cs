using System.Diagnostics;

namespace Farm.Perf.Failover;

/// <summary>
/// failover --signal stop: the owner is frozen with SIGSTOP instead of killed. It is alive to the
/// operating system (its process lock still held, so the survivors cannot tell a crash at once) but
/// sends no heartbeat and renews no lease: the survivors take its containers once its heartbeat is
/// older than NodeTimeout (3 s) and its leases (3 s) ran out. Once every moved queue serves again,
/// SIGCONT: the node finds its leases gone, stops serving those containers (the epoch fences any
/// write it still tries), heartbeats again and gets its share back by rebalancing.
/// </summary>
internal sealed partial class FailoverScenario
{
    /// <summary>How long a node frozen inside a SQLite write is left frozen before it is resumed (nobody can take its containers meanwhile).</summary>
    private static readonly TimeSpan InsideWriteHold = TimeSpan.FromSeconds(10);

    /// <summary>One stop: SIGSTOP, wait for the moved queues to accept sends (or the hold, inside a write), SIGCONT, wait for balance.</summary>
    private async Task<KillRecord> StopOnceAsync(
        int stop, long victim, LocalFarm farm, FarmWatch watch, IReadOnlyList<QueueTraffic> queues, FailoverLedger ledger, CancellationToken cancellationToken)
    {
        var before = await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false);
        var moving = before.Containers.Where(c => c.OwnerNode == victim).Select(c => c.Id).Order().ToList();
        var movingQueues = queues.Where(q => moving.Contains(q.ContainerId)).ToList();
        var otherQueues = queues.Except(movingQueues).ToList();
        var failuresBefore = ledger.SendFailures;
        var survivors = farm.NodeIds.Where(n => n != victim).ToList();
        var pid = farm.Node(victim).ProcessId;

        var stoppedAt = Stopwatch.GetTimestamp();
        foreach (var queue in queues)
        {
            queue.Mark(stoppedAt);
        }

        await NodeSignals.StopAsync(pid, cancellationToken).ConfigureAwait(false);
        var locks = NodeSignals.WriteLocksHeldBy(pid);
        var insideWrite = locks.Count > 0;
        if (insideWrite)
        {
            Console.Error.WriteLine($"perf: stop {stop,2}: node {victim} (pid {pid}) froze holding a SQLite write lock ({string.Join("; ", locks)}): nobody can take its containers until it resumes; it is resumed after {InsideWriteHold.TotalSeconds:0} s if the queues have not served by then, and this stop is reported apart");
        }

        double? takeover = null;
        double? resumedAfter = null;
        var newOwners = new Dictionary<string, long>();
        var waiting = queues.ToList();
        var movedWaiting = movingQueues.ToList();
        while (waiting.Count > 0 && Stopwatch.GetElapsedTime(stoppedAt) < AvailableTimeout)
        {
            if (takeover is null && await watch.TryGetStatusAsync(survivors, cancellationToken).ConfigureAwait(false) is { } status)
            {
                var live = status.Nodes.Where(FarmWatch.IsLive).Select(n => n.Id).ToHashSet();
                var moved = status.Containers.Where(c => moving.Contains(c.Id) && c.OwnerNode is { } o && o != victim && live.Contains(o)).ToList();
                if (moved.Count == moving.Count)
                {
                    takeover = Stopwatch.GetElapsedTime(stoppedAt).TotalSeconds;
                    foreach (var container in moved)
                    {
                        newOwners[container.Id.ToString(Inv)] = container.OwnerNode!.Value;
                    }
                }
            }

            waiting.RemoveAll(q => q.FirstSuccessAfterMark() is not null);
            movedWaiting.RemoveAll(q => q.FirstSuccessAfterMark() is not null);
            // Resume once the moved queues serve (the takeover is what is measured), or, frozen inside a write, after the hold.
            if (resumedAfter is null && (movedWaiting.Count == 0 || (insideWrite && Stopwatch.GetElapsedTime(stoppedAt) >= InsideWriteHold)))
            {
                NodeSignals.Continue(pid);
                resumedAfter = Stopwatch.GetElapsedTime(stoppedAt).TotalSeconds;
            }

            await Task.Delay(Poll, cancellationToken).ConfigureAwait(false);
        }

        if (resumedAfter is null)
        {
            NodeSignals.Continue(pid);
            resumedAfter = Stopwatch.GetElapsedTime(stoppedAt).TotalSeconds;
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
                _problems.Add($"stop {stop} (node {victim}): queue {queue.Name} accepted no send within {AvailableTimeout.TotalSeconds:0} s");
            }
        }

        var others = otherQueues.Select(q => q.FirstSuccessAfterMark()?.Acknowledged.TotalSeconds ?? AvailableTimeout.TotalSeconds).ToList();
        var unavailable = perQueue.Count == 0 ? 0 : perQueue.Max();
        Console.Error.WriteLine(string.Create(Inv,
            $"perf: stop {stop,2}: node {victim} (containers {string.Join(',', moving)} -> nodes {string.Join(',', moving.Select(c => newOwners.GetValueOrDefault(c.ToString(Inv))))}){(insideWrite ? " INSIDE A WRITE" : "")}: unavailable {unavailable:0.000} s (queues {string.Join(", ", perQueue.Select(s => s.ToString("0.000", Inv)))}; takeover seen at {takeover:0.0} s; resumed at {resumedAfter:0.0} s; other queues max {(others.Count == 0 ? 0 : others.Max()):0.000} s)"));

        // The resumed node heartbeats again, then gets its share back by planned moves.
        var resumed = Stopwatch.StartNew();
        double? rejoined = null;
        while (rejoined is null && resumed.Elapsed < BalanceTimeout)
        {
            if (await watch.TryGetStatusAsync(survivors, cancellationToken).ConfigureAwait(false) is { } status
                && status.Nodes.Any(n => n.Id == victim && FarmWatch.IsLive(n)))
            {
                rejoined = resumed.Elapsed.TotalSeconds;
            }
            else
            {
                await Task.Delay(Poll, cancellationToken).ConfigureAwait(false);
            }
        }

        var balanced = await WaitForBalanceAsync(farm, watch, cancellationToken).ConfigureAwait(false);
        var rebalanced = resumed.Elapsed.TotalSeconds;
        if (!balanced)
        {
            throw new TimeoutException($"after stop {stop} the farm was not balanced within {BalanceTimeout.TotalSeconds:0} s of resuming node {victim}");
        }

        var unready = await WaitForSendsAsync(queues, Stopwatch.GetTimestamp(), AvailableTimeout, cancellationToken).ConfigureAwait(false);
        if (unready.Count > 0)
        {
            throw new TimeoutException($"after stop {stop} queues {string.Join(", ", unready)} accepted no send within {AvailableTimeout.TotalSeconds:0} s of the farm being balanced");
        }

        var stalls = CheckStalls(queues, _ => true, $"stop {stop}");
        var after = FarmWatch.Describe(await watch.GetStatusAsync(cancellationToken).ConfigureAwait(false));
        Console.Error.WriteLine(string.Create(Inv, $"perf:          node {victim} resumed, live again after {rejoined:0.0} s, balanced after {rebalanced:0.0} s: {after}"));
        return new KillRecord(
            stop, victim, moving, newOwners, Round(unavailable), perQueue, started,
            takeover is null ? null : Round(takeover.Value),
            others.Count == 0 ? null : Round(others.Max()),
            ledger.SendFailures - failuresBefore,
            Round(rebalanced),
            stalls)
        {
            InsideWrite = insideWrite,
            WriteLocks = insideWrite ? locks : null,
            ResumedAfterS = Round(resumedAfter.Value),
            RejoinedS = rejoined is null ? null : Round(rejoined.Value),
        };
    }
}
