using System.Diagnostics;
using Farm.Client;
using Grpc.Health.V1;

namespace Farm.Perf.DeepBacklog;

/// <summary>
/// The issue "Bounded memory" measured: a 3-node farm of its own, one queue filled with
/// --messages 1 KB messages (10,000,000 by default) and a shallow queue in the same container.
/// It reports the owner's RSS when filled; the time from SIGKILLing the owner to the first message
/// received through the survivors, and their new owner's RSS; the time from starting every node
/// again (all killed) to the first message; and the rate of draining --drain messages off the
/// deep queue as a ratio to draining the shallow queue (--shallow messages) in the same run.
/// </summary>
internal sealed class DeepBacklogScenario(PerfOptions options)
{
    private const string Deep = "deep";
    private const string Shallow = "shallow";

    /// <summary>Messages drained off the deep queue, unmeasured, before the two measured drains: the node's code is JIT-compiled by then.</summary>
    private const long WarmupMessages = 100_000;

    public async Task<DeepBacklogReport> RunAsync(string command, CancellationToken cancellationToken)
    {
        await using var farm = await LocalFarm.StartAsync(3, cancellationToken).ConfigureAwait(false);
        var connection = farm.ConnectionString(redirect: false);
        using var admin = new FarmAdministrationClient(connection);
        var deep = await admin.CreateQueueAsync(new CreateQueueOptions(Deep) { MaxSizeInMegabytes = 81920 }, cancellationToken).ConfigureAwait(false);
        await admin.CreateQueueAsync(new CreateQueueOptions(Shallow) { ContainerId = deep.ContainerId }, cancellationToken).ConfigureAwait(false);
        await using var client = new FarmClient(connection);
        // The first-message times measure when the broker can hand a message out, not the SDK's
        // retry policy: this client retries every 50 ms (the default, as Azure's, waits 0.8 s and
        // more after a failed attempt, which a caller between owners meets once or twice).
        await using var probe = new FarmClient(connection, new FarmClientOptions
        {
            RetryOptions = new FarmRetryOptions { Delay = TimeSpan.FromMilliseconds(50), MaxDelay = TimeSpan.FromMilliseconds(200), MaxRetries = 100 },
        });

        var fill = Stopwatch.StartNew();
        await FillAsync(client, Deep, options.Messages, cancellationToken).ConfigureAwait(false);
        var fillSeconds = fill.Elapsed.TotalSeconds;
        var owner = await OwnerAsync(admin, deep.ContainerId, cancellationToken).ConfigureAwait(false);
        var rssFilled = RssMib(farm.Node(owner).ProcessId);
        Console.Error.WriteLine($"perf: deep-backlog: {options.Messages} messages in {fillSeconds:0} s; owner node {owner} RSS {rssFilled:0} MiB");

        await FillAsync(client, Shallow, options.Shallow, cancellationToken).ConfigureAwait(false);

        // SIGKILL the owner: how long until a survivor hands out the deep queue's first message.
        var epochBefore = await EpochAsync(admin, deep.ContainerId, cancellationToken).ConfigureAwait(false);
        var killed = Stopwatch.StartNew();
        farm.Kill(owner);
        // The shallow queue lives in the same container, so it moves with the deep one: the
        // difference between the two is what the deep queue's depth costs.
        var failoverTaken = TakenAsync(admin, deep.ContainerId, epochBefore, killed, cancellationToken);
        var failoverFirst = await Task.WhenAll(
            FirstMessageAsync(probe, Deep, killed, cancellationToken), FirstMessageAsync(probe, Shallow, killed, cancellationToken)).ConfigureAwait(false);
        var failoverSeconds = failoverFirst[0];
        var failoverTakenAt = await failoverTaken.ConfigureAwait(false);
        var newOwner = await OwnerAsync(admin, deep.ContainerId, cancellationToken).ConfigureAwait(false);
        var rssTakenOver = RssMib(farm.Node(newOwner).ProcessId);
        Console.Error.WriteLine($"perf: deep-backlog: SIGKILL of node {owner} -> taken over after {failoverTakenAt:0.00} s, first message after {failoverSeconds:0.00} s from node {newOwner} (the shallow queue's after {failoverFirst[1]:0.00} s; RSS {rssTakenOver:0} MiB)");
        await farm.RestartAsync(owner, cancellationToken).ConfigureAwait(false);

        // Every node killed and started again: from the start to serving, and to the first message.
        epochBefore = await EpochAsync(admin, deep.ContainerId, cancellationToken).ConfigureAwait(false);
        foreach (var id in farm.NodeIds)
        {
            farm.Kill(id);
        }
        var restarted = Stopwatch.StartNew();
        await Task.WhenAll(farm.NodeIds.Select(id => farm.RestartAsync(id, cancellationToken))).ConfigureAwait(false);
        var serving = restarted.Elapsed.TotalSeconds;
        var restartTaken = TakenAsync(admin, deep.ContainerId, epochBefore, restarted, cancellationToken);
        var restartFirst = await Task.WhenAll(
            FirstMessageAsync(probe, Deep, restarted, cancellationToken), FirstMessageAsync(probe, Shallow, restarted, cancellationToken)).ConfigureAwait(false);
        var upToFirst = restartFirst[0];
        var restartTakenAt = await restartTaken.ConfigureAwait(false);
        var restartOwner = await OwnerAsync(admin, deep.ContainerId, cancellationToken).ConfigureAwait(false);
        var rssRestarted = RssMib(farm.Node(restartOwner).ProcessId);
        Console.Error.WriteLine($"perf: deep-backlog: all nodes restarted: serving after {serving:0.00} s, container taken after {restartTakenAt:0.00} s, first message after {upToFirst:0.00} s (the shallow queue's after {restartFirst[1]:0.00} s; owner RSS {rssRestarted:0} MiB)");

        // Both rates are measured on the warm node: a first drain (off the deep queue) warms it up.
        var warmup = Math.Min(WarmupMessages, (options.Messages - 2) / 4);
        await DrainAsync(client, Deep, warmup, cancellationToken).ConfigureAwait(false);
        // Two of its messages went to the first-message measurements.
        var shallowRate = await DrainAsync(client, Shallow, options.Shallow - 2, cancellationToken).ConfigureAwait(false);
        Console.Error.WriteLine($"perf: deep-backlog: the shallow queue drains at {shallowRate:0} msg/s");
        var drain = Math.Min(options.Drain, options.Messages - 2 - warmup);
        var deepRate = await DrainAsync(client, Deep, drain, cancellationToken).ConfigureAwait(false);
        var rssDrained = RssMib(farm.Node(restartOwner).ProcessId);
        Console.Error.WriteLine($"perf: deep-backlog: the deep queue drains at {deepRate:0} msg/s ({deepRate / shallowRate:0.00} of the shallow queue)");

        return new DeepBacklogReport(
            Scenario: "deep-backlog",
            Command: command,
            Machine: MachineInfo.Current(),
            Messages: options.Messages,
            MessageBytes: options.Size,
            FillSeconds: Math.Round(fillSeconds, 1),
            Farm: new DeepBacklogFigures(
                MsgsPerSec: Math.Round(deepRate),
                RssFilledMib: rssFilled,
                RssAfterFailoverMib: rssTakenOver,
                RssAfterRestartMib: rssRestarted,
                RssAfterDrainMib: rssDrained,
                SigkillToFirstMessageSeconds: Math.Round(failoverSeconds, 2),
                StartToServingSeconds: Math.Round(serving, 2),
                StartToFirstMessageSeconds: Math.Round(upToFirst, 2),
                FirstMessageAfterServingSeconds: Math.Round(upToFirst - serving, 2),
                ShallowSigkillToFirstMessageSeconds: Math.Round(failoverFirst[1], 2),
                ShallowStartToFirstMessageSeconds: Math.Round(restartFirst[1], 2),
                SigkillToTakeoverSeconds: Math.Round(failoverTakenAt, 2),
                FailoverTakeoverToFirstMessageSeconds: Math.Round(failoverSeconds - failoverTakenAt, 2),
                StartToTakeoverSeconds: Math.Round(restartTakenAt, 2),
                RestartTakeoverToFirstMessageSeconds: Math.Round(upToFirst - restartTakenAt, 2)),
            Peer: new DeepBacklogPeer("shallow-queue-drain", Math.Round(shallowRate), options.Shallow),
            Ratio: Math.Round(deepRate / shallowRate, 3),
            Targets: new DeepBacklogTargets(
                RssUnder512Mib: Math.Max(rssFilled, Math.Max(rssTakenOver, rssRestarted)) < 512,
                FirstMessageWithin1SecondOfServing: upToFirst - serving <= 1,
                FirstMessageWithin1SecondOfTakeover: Math.Max(failoverSeconds - failoverTakenAt, upToFirst - restartTakenAt) <= 1,
                DrainAtLeast08OfShallow: deepRate / shallowRate >= 0.8));
    }

    /// <summary>Fills <paramref name="queue"/> (<see cref="Load.QueueFill"/>), saying how far it got every 500,000 messages.</summary>
    private async Task FillAsync(FarmClient client, string queue, long count, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        var reported = 0L;
        await Load.QueueFill.FillAsync(client, queue, count, options, cancellationToken, done =>
        {
            if (done - Interlocked.Read(ref reported) >= 500_000 && Interlocked.Exchange(ref reported, done) < done)
            {
                Console.Error.WriteLine($"perf: deep-backlog: {queue}: {done} sent ({done / clock.Elapsed.TotalSeconds:0}/s)");
            }
        }).ConfigureAwait(false);
    }

    /// <summary>
    /// Receives and completes <paramref name="count"/> messages with --receivers receivers; returns
    /// messages per second up to the moment the last of them was completed (receivers still waiting
    /// then are stopped, not counted).
    /// </summary>
    private async Task<double> DrainAsync(FarmClient client, string queue, long count, CancellationToken cancellationToken)
    {
        long completed = 0;
        var elapsed = TimeSpan.Zero;
        using var done = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        var clock = Stopwatch.StartNew();
        await Task.WhenAll(Enumerable.Range(0, options.Receivers).Select(async _ =>
        {
            await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { PrefetchCount = options.Prefetch });
            try
            {
                while (!done.IsCancellationRequested)
                {
                    var batch = await receiver.ReceiveMessagesAsync(options.Batch, TimeSpan.FromSeconds(5), done.Token).ConfigureAwait(false);
                    await Task.WhenAll(batch.Select(m => receiver.CompleteMessageAsync(m, cancellationToken))).ConfigureAwait(false);
                    if (Interlocked.Add(ref completed, batch.Count) >= count && !done.IsCancellationRequested)
                    {
                        elapsed = clock.Elapsed;
                        await done.CancelAsync().ConfigureAwait(false);
                    }
                }
            }
            catch (OperationCanceledException) when (done.IsCancellationRequested && !cancellationToken.IsCancellationRequested)
            {
                // The count was reached while this receiver waited.
            }
        })).ConfigureAwait(false);
        return Interlocked.Read(ref completed) / (elapsed > TimeSpan.Zero ? elapsed : clock.Elapsed).TotalSeconds;
    }

    /// <summary>Seconds on <paramref name="clock"/> when one message of <paramref name="queue"/> was received (and completed), retrying through failovers.</summary>
    private static async Task<double> FirstMessageAsync(FarmClient client, string queue, Stopwatch clock, CancellationToken cancellationToken)
    {
        var started = clock.Elapsed;
        await using var receiver = client.CreateReceiver(queue);
        while (clock.Elapsed - started < TimeSpan.FromMinutes(5))
        {
            try
            {
                if (await receiver.ReceiveMessageAsync(TimeSpan.FromSeconds(1), cancellationToken).ConfigureAwait(false) is { } message)
                {
                    await receiver.CompleteMessageAsync(message, cancellationToken).ConfigureAwait(false);
                    return clock.Elapsed.TotalSeconds;
                }
            }
            catch (FarmException e) when (e.IsTransient)
            {
                // Between owners: the SDK gave up its retries; keep asking.
            }
        }
        throw new TimeoutException($"no message of {queue} was received within 5 minutes");
    }

    private static async Task<long> EpochAsync(FarmAdministrationClient admin, long containerId, CancellationToken cancellationToken) =>
        (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false)).Single(c => c.Id == containerId).Epoch;

    /// <summary>
    /// Seconds on <paramref name="clock"/> when a node took the container (its epoch rose past
    /// <paramref name="epochBefore"/> with an owner named), looked up every 20 ms: the moment a node
    /// starts serving it, from which the first message's time is what loading it costs.
    /// </summary>
    private static async Task<double> TakenAsync(FarmAdministrationClient admin, long containerId, long epochBefore, Stopwatch clock, CancellationToken cancellationToken)
    {
        var started = clock.Elapsed;
        while (clock.Elapsed - started < TimeSpan.FromMinutes(5))
        {
            try
            {
                var container = (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false)).Single(c => c.Id == containerId);
                if (container.Epoch > epochBefore && container.OwnerNode is not null)
                {
                    return clock.Elapsed.TotalSeconds;
                }
            }
            catch (FarmException e) when (e.IsTransient)
            {
                // Every node is down or starting: ask again.
            }
            await Task.Delay(20, cancellationToken).ConfigureAwait(false);
        }
        throw new TimeoutException($"container {containerId} was not taken over within 5 minutes");
    }

    private static async Task<long> OwnerAsync(FarmAdministrationClient admin, long containerId, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < TimeSpan.FromMinutes(2))
        {
            var container = (await admin.GetContainersAsync(cancellationToken).ConfigureAwait(false)).Single(c => c.Id == containerId);
            if (container.OwnerNode is { } owner)
            {
                return owner;
            }
            await Task.Delay(100, cancellationToken).ConfigureAwait(false);
        }
        throw new TimeoutException($"container {containerId} has no owner");
    }

    /// <summary>The resident set of a process, in MiB (Linux /proc).</summary>
    private static double RssMib(int pid)
    {
        foreach (var line in File.ReadLines($"/proc/{pid}/status"))
        {
            if (line.StartsWith("VmRSS:", StringComparison.Ordinal))
            {
                return Math.Round(long.Parse(line.Split(' ', StringSplitOptions.RemoveEmptyEntries)[1], System.Globalization.CultureInfo.InvariantCulture) / 1024.0, 1);
            }
        }
        return 0;
    }
}

internal sealed record DeepBacklogReport(
    string Scenario, string Command, MachineInfo Machine, long Messages, int MessageBytes, double FillSeconds,
    DeepBacklogFigures Farm, DeepBacklogPeer Peer, double Ratio, DeepBacklogTargets Targets);

/// <param name="MsgsPerSec">Receive-and-complete rate while draining the deep queue.</param>
/// <param name="ShallowSigkillToFirstMessageSeconds">The same for the shallow queue in the same container: what the takeover costs without depth.</param>
/// <param name="SigkillToTakeoverSeconds">From the SIGKILL to a survivor taking the container (its epoch raised): the failure detection, not the depth.</param>
/// <param name="FailoverTakeoverToFirstMessageSeconds">From that takeover to the deep queue's first message: what loading the container costs.</param>
internal sealed record DeepBacklogFigures(
    double MsgsPerSec, double RssFilledMib, double RssAfterFailoverMib, double RssAfterRestartMib, double RssAfterDrainMib,
    double SigkillToFirstMessageSeconds, double StartToServingSeconds, double StartToFirstMessageSeconds,
    double FirstMessageAfterServingSeconds, double ShallowSigkillToFirstMessageSeconds, double ShallowStartToFirstMessageSeconds,
    double SigkillToTakeoverSeconds, double FailoverTakeoverToFirstMessageSeconds, double StartToTakeoverSeconds, double RestartTakeoverToFirstMessageSeconds);

internal sealed record DeepBacklogPeer(string Name, double MsgsPerSec, long Messages);

internal sealed record DeepBacklogTargets(bool RssUnder512Mib, bool FirstMessageWithin1SecondOfServing, bool FirstMessageWithin1SecondOfTakeover, bool DrainAtLeast08OfShallow);
