namespace Farm.Broker.Messaging;

/// <summary>
/// The credit of one receive stream: how many messages the client will take now. A drain takes
/// back what is left; the stream then answers "drained" once it has sent what it already took.
/// </summary>
/// <param name="onDrain">Called after each drain request: ends the stream's wait for messages with the old credit.</param>
internal sealed class CreditCounter(int initial, Action? onDrain = null)
{
    private readonly object _gate = new();
    private long _credit = initial;
    private bool _completed;
    private bool _drainRequested;

    /// <summary>What <see cref="WaitAsync"/> waits on; made only when it waits (credit comes with nearly every message).</summary>
    private TaskCompletionSource? _changed;

    /// <summary>A drain was asked for and not answered yet.</summary>
    public bool DrainRequested
    {
        get
        {
            lock (_gate)
            {
                return _drainRequested;
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
        lock (_gate)
        {
            _credit = 0;
            _drainRequested = true;
        }
        onDrain?.Invoke();
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
        TaskCompletionSource? changed;
        lock (_gate)
        {
            changed = _changed;
            _changed = null;
        }
        changed?.TrySetResult();
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
                _changed ??= new(TaskCreationOptions.RunContinuationsAsynchronously);
                changed = _changed.Task;
            }
            await changed.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
    }
}
