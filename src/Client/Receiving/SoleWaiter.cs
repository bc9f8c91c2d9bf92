using Farm.Contracts;

namespace Farm.Client;

/// <summary>
/// The one wait of a receive link's only receiver (a processor with one call at a time), made once
/// for the link's life (a <see cref="ReusableSignal"/>): armed before each wait and completed by
/// the link when a message is buffered, when it closes or faults (then the wait throws the fault),
/// or when the waiter's token is cancelled. A receive that waits holds a timer, linked token
/// sources, a channel read and four async frames for as long as its queue is quiet.
/// </summary>
internal sealed class SoleWaiter : ReusableSignal
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
            throw new InvalidOperationException("A receive link has one sole waiter: one wait at a time.");
        }
        if (!cancellationToken.Equals(_token))
        {
            _registration.Dispose();
            _token = cancellationToken;
            _registration = cancellationToken.UnsafeRegister(static waiter => ((SoleWaiter)waiter!).Wake(), this);
        }
        ArmSignal();
    }

    /// <summary>Lets go of the token it was registered with (the link closes).</summary>
    public void Release() => _registration.Dispose();

    protected override void OnWaitEnded() => Volatile.Write(ref _inUse, 0);
}
