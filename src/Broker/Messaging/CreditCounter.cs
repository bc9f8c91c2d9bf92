namespace Farm.Broker.Messaging;

/// <summary>
/// The credit of one receive stream: how many messages the client will take now. A drain takes
/// back what is left; the stream then answers "drained" once it has sent what it already took.
/// </summary>
internal sealed class CreditCounter(int initial)
{
    private readonly object _gate = new();
    private long _credit = initial;
    private bool _completed;
    private bool _drainRequested;
    private CancellationTokenSource _drain = new();
    private TaskCompletionSource _changed = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>Cancelled by a drain, so a receive waiting for messages with the old credit stops waiting.</summary>
    public CancellationToken DrainToken
    {
        get
        {
            lock (_gate)
            {
                return _drain.Token;
            }
        }
    }

    public void Add(int amount)
    {
        lock (_gate)
        {
            _credit += amount;
        }
        Signal();
    }

    /// <summary>
    /// Messages taken with credit granted before a drain may still be on their way out; they do not
    /// eat into credit granted after it (the client sends none until it hears "drained").
    /// </summary>
    public void Take(int amount)
    {
        lock (_gate)
        {
            _credit = Math.Max(0, _credit - amount);
        }
    }

    public void Drain()
    {
        CancellationTokenSource drain;
        lock (_gate)
        {
            _credit = 0;
            _drainRequested = true;
            drain = _drain;
            _drain = new CancellationTokenSource();
        }
        drain.Cancel();
        drain.Dispose();
        Signal();
    }

    /// <summary>True once per drain: the stream must now answer "drained".</summary>
    public bool TakeDrainRequest()
    {
        lock (_gate)
        {
            var requested = _drainRequested;
            _drainRequested = false;
            return requested;
        }
    }

    /// <summary>No more credit will come.</summary>
    public void Complete()
    {
        lock (_gate)
        {
            _completed = true;
        }
        Signal();
    }

    private void Signal()
    {
        TaskCompletionSource changed;
        lock (_gate)
        {
            changed = _changed;
            _changed = new(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        changed.TrySetResult();
    }

    /// <summary>
    /// Waits for credit or a drain request; returns 0 for a drain request, and once credit is used
    /// up and no more will come.
    /// </summary>
    public async Task<int> WaitAsync(CancellationToken cancellationToken)
    {
        while (true)
        {
            Task changed;
            lock (_gate)
            {
                if (_drainRequested)
                {
                    return 0;
                }
                if (_credit > 0)
                {
                    return (int)Math.Min(_credit, int.MaxValue);
                }
                if (_completed)
                {
                    return 0;
                }
                changed = _changed.Task;
            }
            await changed.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
    }
}
