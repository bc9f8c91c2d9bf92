using Farm.Broker.Entities;

namespace Farm.Broker.Messaging;

/// <summary>
/// The forwarded messages this node is storing right now, by their origin (<see cref="ForwardOrigin.NameOf"/>).
/// A forwarded send leaves out what the target has a record of, but a record exists only once its
/// send committed: two sends of one message at the same moment (the next owner's repeat and the
/// send of its predecessor still committing here, or a frozen owner's send that went on after it
/// resumed) would both find none and both store it. So a forwarded send claims its messages first,
/// and one that finds a message claimed waits for that send to end, then looks again.
/// </summary>
internal sealed class ForwardsInFlight
{
    private readonly Lock _gate = new();
    private readonly Dictionary<(string Source, long Sequence), Task> _storing = [];
    private long _waits;

    /// <summary>How many times a forwarded send waited for another of the same message (tests).</summary>
    public long Waits => Interlocked.Read(ref _waits);

    /// <summary>
    /// Runs <paramref name="store"/> with every message of <paramref name="origin"/> claimed, after
    /// any other send of one of them has ended.
    /// </summary>
    public async Task<T> StoreClaimedAsync<T>(ForwardOrigin origin, Func<Task<T>> store)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        while (TryClaim(origin, done.Task) is { } other)
        {
            Interlocked.Increment(ref _waits);
            // Its outcome is not this send's: only that it ended, committed or not.
            await other.ContinueWith(static _ => { }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default).ConfigureAwait(false);
        }
        try
        {
            return await store().ConfigureAwait(false);
        }
        finally
        {
            Release(origin, done.Task);
            done.SetResult();
        }
    }

    /// <summary>Claims all of the messages, or none and returns the send to wait for.</summary>
    private Task? TryClaim(ForwardOrigin origin, Task mine)
    {
        lock (_gate)
        {
            foreach (var sequence in origin.Sequences)
            {
                if (_storing.TryGetValue((origin.Source, sequence), out var other) && !ReferenceEquals(other, mine))
                {
                    return other;
                }
            }
            foreach (var sequence in origin.Sequences)
            {
                _storing[(origin.Source, sequence)] = mine;
            }
            return null;
        }
    }

    private void Release(ForwardOrigin origin, Task mine)
    {
        lock (_gate)
        {
            foreach (var sequence in origin.Sequences)
            {
                if (_storing.TryGetValue((origin.Source, sequence), out var claimed) && ReferenceEquals(claimed, mine))
                {
                    _storing.Remove((origin.Source, sequence));
                }
            }
        }
    }
}
