using Farm.Contracts.V1;

namespace Farm.Gateway.Routing;

/// <summary>
/// A Settle the gateway may run more than once: <see cref="OwnerRouting"/> forwards it again when
/// the connection under a forward broke with its outcome unknown (the owner may have settled). Every
/// try after the first says it is a repeat (<see cref="SettleRequest.Repeat"/>), so the owner
/// answers a settlement it did a moment ago as done, not MessageLockLost.
/// </summary>
internal sealed class SettleTries(SettleRequest request)
{
    private int _tries;

    public SettleRequest Next()
    {
        if (Interlocked.Increment(ref _tries) > 1)
        {
            request.Repeat = true;
        }
        return request;
    }
}
