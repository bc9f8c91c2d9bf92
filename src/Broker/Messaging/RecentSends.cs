using Farm.Contracts.V1;

namespace Farm.Broker.Messaging;

/// <summary>
/// The sends this node stored a moment ago, by the (producer, send id) pair the client put on
/// them, so a send tried again after its answer was lost (a broken connection or stream, a
/// timeout while the commit was still going) gets the first try's answer instead of storing its
/// messages a second time. A try that comes while the first still runs waits for it.
/// <para>
/// Only sends that succeeded are remembered: a failed one stored nothing, and its next try stores.
/// The memory is this node's alone and bounded: at most <see cref="Capacity"/> sends (the oldest
/// go first) for at most <see cref="Retention"/>. Each send is also recorded in its container
/// database, in the commit that stores it (pruned after <see cref="Retention"/>): a try the client
/// marks as a repeat that this node does not remember (the entity moved here from another node,
/// or this node restarted) is answered from that record. A try that comes later than that stores
/// again, as every try would without the pair (and as Azure Service Bus's does without duplicate
/// detection).
/// </para>
/// </summary>
internal sealed class RecentSends(TimeProvider time)
{
    /// <summary>Longer than the SDK's default try timeout (60 s): its retries come within it.</summary>
    public static readonly TimeSpan Retention = TimeSpan.FromMinutes(2);

    /// <summary>The oldest record of a send (in its container) a repeat may be answered from.</summary>
    public static long RememberedSinceMs(TimeProvider time) => (time.GetUtcNow() - Retention).ToUnixTimeMilliseconds();

    /// <summary>About 200 bytes each: 10 MB at most per node.</summary>
    public const int Capacity = 50_000;

    private readonly record struct Key(string Producer, long SendId);

    private readonly object _gate = new();
    private readonly Dictionary<Key, Task<SendResponse>> _byKey = [];
    private readonly Queue<(Key Key, Task<SendResponse> Send, long ForgetAtMs)> _order = new();

    public int Count
    {
        get
        {
            lock (_gate)
            {
                return _byKey.Count;
            }
        }
    }

    /// <summary>
    /// Runs <paramref name="send"/> unless a send with the same pair ran or runs here; then returns
    /// that one's answer (or waits for it). The caller sends requests without a producer straight on.
    /// </summary>
    public Task<SendResponse> SendOnceAsync(SendRequest request, Func<Task<SendResponse>> send)
    {
        var key = new Key(request.ProducerId, request.SendId);
        var now = time.GetUtcNow().ToUnixTimeMilliseconds();
        TaskCompletionSource<SendResponse> mine;
        lock (_gate)
        {
            Prune(now);
            if (_byKey.TryGetValue(key, out var earlier))
            {
                return RepeatAsync(earlier, request, send);
            }
            while (_byKey.Count >= Capacity && _order.TryDequeue(out var oldest))
            {
                Remove(oldest.Key, oldest.Send);
            }
            mine = new TaskCompletionSource<SendResponse>(TaskCreationOptions.RunContinuationsAsynchronously);
            _byKey[key] = mine.Task;
            _order.Enqueue((key, mine.Task, now + (long)Retention.TotalMilliseconds));
        }
        _ = RunAsync(key, send, mine);
        return mine.Task;
    }

    /// <summary>
    /// A repeat: the first try's answer. If that try fails after all (it stored nothing; its caller
    /// may have given up), this one runs as a try of its own, so it never inherits another caller's
    /// cancellation.
    /// </summary>
    private async Task<SendResponse> RepeatAsync(Task<SendResponse> earlier, SendRequest request, Func<Task<SendResponse>> send)
    {
        try
        {
            return await earlier.ConfigureAwait(false);
        }
        catch (Exception)
        {
            return await SendOnceAsync(request, send).ConfigureAwait(false);
        }
    }

    private async Task RunAsync(Key key, Func<Task<SendResponse>> send, TaskCompletionSource<SendResponse> outcome)
    {
        try
        {
            outcome.SetResult(await send().ConfigureAwait(false));
        }
        catch (Exception e)
        {
            // Stored nothing: the next try must store, not be told this failure again.
            lock (_gate)
            {
                Remove(key, outcome.Task);
            }
            if (e is OperationCanceledException cancelled)
            {
                outcome.SetCanceled(cancelled.CancellationToken);
            }
            else
            {
                outcome.SetException(e);
            }
        }
    }

    private void Prune(long now)
    {
        while (_order.TryPeek(out var oldest) && oldest.ForgetAtMs <= now)
        {
            _order.Dequeue();
            Remove(oldest.Key, oldest.Send);
        }
    }

    /// <summary>Forgets the pair only if it still stands for this very send (a failed one's retry may have taken its place).</summary>
    private void Remove(Key key, Task<SendResponse> send)
    {
        if (_byKey.TryGetValue(key, out var current) && ReferenceEquals(current, send))
        {
            _byKey.Remove(key);
        }
    }
}
