using Farm.Contracts.V1;

namespace Farm.Gateway.Routing;

/// <summary>
/// A Settle or Send the gateway may run more than once: <see cref="OwnerRouting"/> forwards it
/// again when the connection under a forward broke with its outcome unknown (the owner may have
/// settled or stored). Every try after the first says it is a repeat, so the owner answers a
/// settlement it did a moment ago as done, not MessageLockLost (<see cref="SettleRequest.Repeat"/>),
/// and a send it stored (or a node before it stored, in a failover) with the sequence numbers it
/// gave (<see cref="SendRequest.Repeat"/>). The repeat is a copy made once: the broken try may
/// still be writing the request it was given.
/// </summary>
internal sealed class RepeatableTries<TRequest>(TRequest first, Func<TRequest, TRequest> asRepeat, int tried = 0)
    where TRequest : class
{
    private int _tries = tried;
    private TRequest? _repeat;

    public TRequest Next() =>
        Interlocked.Increment(ref _tries) == 1 ? first : LazyInitializer.EnsureInitialized(ref _repeat, () => asRepeat(first));
}

/// <summary>The tries of the two calls that say when they are repeats.</summary>
internal static class RepeatableTries
{
    public static RepeatableTries<SettleRequest> Of(SettleRequest request) => new(request, r => new SettleRequest(r) { Repeat = true });

    public static RepeatableTries<SendRequest> Of(SendRequest request) => new(request, AsRepeat);

    /// <summary>The tries of a send already tried once (elsewhere): every one from now on is a repeat.</summary>
    public static RepeatableTries<SendRequest> AfterFirst(SendRequest request) => new(request, AsRepeat, tried: 1);

    private static SendRequest AsRepeat(SendRequest request) => new(request) { Repeat = true };
}
