using System.Diagnostics;
using Farm.Client;

namespace Farm.Perf.Load;

/// <summary>What one measured window saw.</summary>
/// <param name="Seconds">The window's length.</param>
/// <param name="Acked">Messages acknowledged to senders in the window.</param>
/// <param name="Delivered">Deliveries received (first time, one per message and subscription) in the window.</param>
/// <param name="Cpu">Who used the CPU during the window (when measured).</param>
internal sealed record Window(double Seconds, long Acked, long Delivered, CpuFigures? Cpu = null)
{
    public double AckedPerSec => Seconds > 0 ? Math.Round(Acked / Seconds, 1) : 0;

    public double DeliveredPerSec => Seconds > 0 ? Math.Round(Delivered / Seconds, 1) : 0;
}

/// <summary>
/// The phases every load run goes through, whatever it loads: a warm-up, the measured window, then
/// a drain in which senders stop and receivers take what is left, and the exactly-once check.
/// </summary>
internal static class LoadRun
{
    private static readonly TimeSpan ProgressEvery = TimeSpan.FromSeconds(5);

    public static readonly TimeSpan DrainTimeout = TimeSpan.FromSeconds(60);

    /// <summary>Runs the warm-up, then measures for <paramref name="duration"/>; the load keeps going afterwards.</summary>
    public static async Task<Window> MeasureAsync(RunState state, string label, TimeSpan warmup, TimeSpan duration, CancellationToken cancellationToken, CpuMeter? cpu = null)
    {
        await WatchAsync(state, warmup, $"{label} warm-up", cancellationToken).ConfigureAwait(false);
        var ackedBefore = state.Acked.Count;
        var receivedBefore = state.Received.Count;
        var cpuBefore = cpu?.Take();
        var window = Stopwatch.StartNew();
        state.StartWindow();
        await WatchAsync(state, duration, $"{label} measure", cancellationToken).ConfigureAwait(false);
        state.EndWindow();
        var seconds = window.Elapsed.TotalSeconds;
        var acked = state.Acked.Count - ackedBefore;
        var received = state.Received.Count - receivedBefore;
        var usage = cpu is not null && cpuBefore is { } before ? CpuMeter.Between(before, cpu.Take()) : null;
        return new Window(seconds, acked, received, usage);
    }

    /// <summary>Waits <paramref name="duration"/>, printing throughput every few seconds (stderr).</summary>
    public static async Task WatchAsync(RunState state, TimeSpan duration, string phase, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        var lastAcked = state.Acked.Count;
        var lastReceived = state.Received.Count;
        var lastAt = TimeSpan.Zero;
        while (true)
        {
            // Read the clock once: a step computed from a second reading can come out just below
            // zero, and Task.Delay takes -1 ms as "forever" (a run hung that way).
            var step = duration - clock.Elapsed;
            if (step <= TimeSpan.Zero)
            {
                break;
            }
            await Task.Delay(step < ProgressEvery ? step : ProgressEvery, cancellationToken).ConfigureAwait(false);
            var now = clock.Elapsed;
            var acked = state.Acked.Count;
            var received = state.Received.Count;
            var span = (now - lastAt).TotalSeconds;
            if (span > 0.5)
            {
                var what = state.Fanout.Count == 1 ? "received" : "delivered";
                Console.Error.WriteLine($"perf: {phase} {now.TotalSeconds,5:0.0} s: sent {(acked - lastAcked) / span,8:0}/s, {what} {(received - lastReceived) / span,8:0}/s, backlog {state.Backlog}");
            }

            (lastAcked, lastReceived, lastAt) = (acked, received, now);
        }
    }

    /// <summary>Waits until every acknowledged message reached every subscription it should; false on timeout.</summary>
    public static async Task<bool> DrainAsync(RunState state, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < DrainTimeout)
        {
            if (state.Received.Count >= state.ExpectedDeliveries && Missing(state) == 0)
            {
                return true;
            }

            await Task.Delay(50, cancellationToken).ConfigureAwait(false);
        }

        return false;
    }

    /// <summary>Deliveries owed (acknowledged, expected by the subscription's filter) and not received.</summary>
    private static long Missing(RunState state)
    {
        long missing = 0;
        var attempted = state.Attempted;
        var subscriptions = state.Fanout.Count;
        for (long id = 0; id < attempted; id++)
        {
            if (!state.Acked.Contains(id))
            {
                continue;
            }

            for (var s = 0; s < subscriptions; s++)
            {
                if (state.Fanout.Expects(id, s) && !state.Received.Contains(state.DeliveryKey(id, s)))
                {
                    missing++;
                }
            }
        }

        return missing;
    }

    /// <summary>
    /// The exactly-once check over the whole run. <paramref name="leftInEntity"/>: messages the
    /// farm still holds (-1: unknown). <paramref name="orderRequired"/>: deliveries out of sequence
    /// order are a failure (SupportOrdering on), not just a count.
    /// </summary>
    public static Verification Verify(RunState state, long leftInEntity, bool drained, bool orderRequired = false, string entity = "queue")
    {
        long unacknowledgedButDelivered = 0;
        var attempted = state.Attempted;
        var subscriptions = state.Fanout.Count;
        for (long id = 0; id < attempted; id++)
        {
            if (state.Acked.Contains(id))
            {
                continue;
            }

            for (var s = 0; s < subscriptions; s++)
            {
                if (state.Received.Contains(state.DeliveryKey(id, s)))
                {
                    unacknowledgedButDelivered++;
                    break;
                }
            }
        }

        var lost = Missing(state);
        var fanout = subscriptions > 1;
        var problems = new List<string>();
        if (lost > 0)
        {
            var what = fanout ? "deliveries of acknowledged messages (message, subscription) were" : "acknowledged messages were";
            problems.Add($"{lost} {what} never received{(drained ? string.Empty : $" within {DrainTimeout.TotalSeconds:0} s of the end")}");
        }

        if (state.Duplicates > 0)
        {
            problems.Add($"{state.Duplicates} messages were delivered more than once{(fanout ? " to the same subscription" : string.Empty)}"
                + $" ({state.DuplicatesRedelivered} of them redelivered, with a delivery count above 1)");
        }

        if (state.Foreign > 0)
        {
            problems.Add($"{state.Foreign} messages received that this run did not send");
        }

        if (state.Unexpected > 0)
        {
            problems.Add($"{state.Unexpected} messages reached a subscription whose filter does not select them");
        }

        if (orderRequired && state.OutOfOrder > 0)
        {
            problems.Add($"{state.OutOfOrder} deliveries came after a higher sequence number of the same subscription, with SupportOrdering on");
        }

        if (state.SendErrors > 0 || state.SettleErrors > 0 || state.ReceiveErrors > 0)
        {
            problems.Add($"errors: {state.SendErrors} sends, {state.SettleErrors} completes, {state.ReceiveErrors} receives failed");
        }

        if (leftInEntity != 0)
        {
            problems.Add(leftInEntity < 0
                ? $"the {entity}'s message count could not be read"
                : $"{leftInEntity} messages are still in the {entity} after every message was completed");
        }

        return new Verification(
            Passed: problems.Count == 0,
            Attempted: attempted,
            Acknowledged: state.Acked.Count,
            ReceivedUnique: state.Received.Count,
            Deliveries: state.ReceivedTotal,
            Lost: lost,
            Duplicates: state.Duplicates,
            Foreign: state.Foreign,
            UnacknowledgedButDelivered: unacknowledgedButDelivered,
            SendErrors: state.SendErrors,
            CompleteErrors: state.SettleErrors,
            ReceiveErrors: state.ReceiveErrors,
            LeftInQueue: leftInEntity,
            Problems: problems)
        {
            SendsRefusedBusy = state.SendsRefusedBusy,
            ReceivesRefusedBusy = state.ReceivesRefusedBusy,
            Subscriptions = fanout ? subscriptions : null,
            ExpectedDeliveries = fanout ? state.ExpectedDeliveries : null,
            Unexpected = fanout ? state.Unexpected : null,
            OutOfOrder = state.TracksOrder ? state.OutOfOrder : null,
        };
    }

    /// <summary>Messages still in the queue (active, locked, deferred, scheduled, dead-lettered); -1 when unknown.</summary>
    public static async Task<long> LeftInQueueAsync(FarmAdministrationClient admin, string queue, CancellationToken cancellationToken)
    {
        try
        {
            return (await admin.GetQueueRuntimePropertiesAsync(queue, cancellationToken).ConfigureAwait(false)).TotalMessageCount;
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not read the message count of {queue}: {e.Message}");
            return -1;
        }
    }

    /// <summary>Deletes the run's queue; a failure is said, not thrown (the figures stand).</summary>
    public static async Task DeleteQueueQuietlyAsync(FarmAdministrationClient admin, string queue)
    {
        try
        {
            await admin.DeleteQueueAsync(queue, CancellationToken.None).ConfigureAwait(false);
        }
        catch (FarmException e)
        {
            Console.Error.WriteLine($"perf: could not delete queue {queue}: {e.Message}");
        }
    }
}
