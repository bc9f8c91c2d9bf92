namespace Farm.Broker.Messaging;

/// <summary>The credit of one receive stream: how many messages the client will take now.</summary>
internal sealed class CreditCounter(int initial)
{
    private readonly object _gate = new();
    private long _credit = initial;
    private bool _completed;
    private TaskCompletionSource _changed = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public void Add(int amount)
    {
        TaskCompletionSource changed;
        lock (_gate)
        {
            _credit += amount;
            changed = _changed;
            _changed = new(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        changed.TrySetResult();
    }

    public void Take(int amount)
    {
        lock (_gate)
        {
            _credit -= amount;
        }
    }

    /// <summary>No more credit will come.</summary>
    public void Complete()
    {
        TaskCompletionSource changed;
        lock (_gate)
        {
            _completed = true;
            changed = _changed;
        }
        changed.TrySetResult();
    }

    /// <summary>Waits for credit; returns 0 once credit is used up and no more will come.</summary>
    public async Task<int> WaitAsync(CancellationToken cancellationToken)
    {
        while (true)
        {
            Task changed;
            lock (_gate)
            {
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
