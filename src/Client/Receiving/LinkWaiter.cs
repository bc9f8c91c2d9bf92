using Farm.Contracts;

namespace Farm.Client;

/// <summary>
/// The wait of one processor worker on its receive link, made once for the worker's life (a
/// <see cref="ReusableSignal"/>): armed before each wait and parked on the link, which wakes one
/// parked waiter per message it buffers, all of them when it closes, and fails them when it faults
/// (the wait then throws the fault); the waiter's token ends its wait too. A receive that waits
/// holds a timer, linked token sources, a channel read and four async frames for as long as its
/// queue is quiet.
/// </summary>
internal sealed class LinkWaiter : ReusableSignal, IDisposable
{
    private int _inUse;
    private CancellationToken _token;
    private CancellationTokenRegistration _registration;

    /// <summary>
    /// Arms it for one wait that <paramref name="cancellationToken"/> also ends. The token is
    /// registered once and kept while the next waits pass the same one, as a processor's worker does.
    /// </summary>
    public void Arm(CancellationToken cancellationToken)
    {
        if (Interlocked.Exchange(ref _inUse, 1) == 1)
        {
            throw new InvalidOperationException("A link waiter waits once at a time.");
        }
        if (!cancellationToken.Equals(_token))
        {
            _registration.Dispose();
            _token = cancellationToken;
            _registration = cancellationToken.UnsafeRegister(static waiter => ((LinkWaiter)waiter!).Wake(), this);
        }
        ArmSignal();
    }

    /// <summary>Lets go of the token it was registered with (its worker ends).</summary>
    public void Dispose() => _registration.Dispose();

    protected override void OnWaitEnded() => Volatile.Write(ref _inUse, 0);
}
