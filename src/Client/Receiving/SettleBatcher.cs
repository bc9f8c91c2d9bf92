using Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>
/// Sends settlements made at about the same time as one Settle call, the way AMQP batches
/// dispositions: the first settlement goes out at once, and whatever arrives while a call is in
/// flight goes in the next one. A lone caller waits no longer than before; a processor completing
/// hundreds of messages a second makes a few calls instead of hundreds.
/// </summary>
internal sealed class SettleBatcher(string entityPath, Func<SettleRequest, Task<SettleResponse>> send)
{
    /// <summary>Most settlements one call carries.</summary>
    public const int MaxPerCall = 512;

    private readonly Lock _gate = new();
    private readonly List<(Settlement Settlement, TaskCompletionSource<SettleResult> Done)> _pending = [];
    private bool _sending;

    /// <summary>Settles one message; the result says whether the broker accepted it.</summary>
    public Task<SettleResult> SettleAsync(Settlement settlement, CancellationToken cancellationToken)
    {
        var done = new TaskCompletionSource<SettleResult>(TaskCreationOptions.RunContinuationsAsynchronously);
        bool start;
        lock (_gate)
        {
            _pending.Add((settlement, done));
            start = !_sending;
            _sending = true;
        }

        if (start)
        {
            _ = Task.Run(PumpAsync, CancellationToken.None);
        }

        // Cancelling stops the wait, not the settlement: it may already be on the wire.
        return done.Task.WaitAsync(cancellationToken);
    }

    private async Task PumpAsync()
    {
        while (true)
        {
            List<(Settlement Settlement, TaskCompletionSource<SettleResult> Done)> batch;
            lock (_gate)
            {
                if (_pending.Count == 0)
                {
                    _sending = false;
                    return;
                }

                var take = Math.Min(_pending.Count, MaxPerCall);
                batch = _pending.GetRange(0, take);
                _pending.RemoveRange(0, take);
            }

            var request = new SettleRequest { Entity = entityPath };
            request.Settlements.AddRange(batch.Select(p => p.Settlement));
            try
            {
                var response = await send(request).ConfigureAwait(false);
                for (var i = 0; i < batch.Count; i++)
                {
                    if (i < response.Results.Count)
                    {
                        batch[i].Done.TrySetResult(response.Results[i]);
                    }
                    else
                    {
                        batch[i].Done.TrySetException(new FarmException(
                            $"The broker returned {response.Results.Count} settle results for {batch.Count} settlements", FarmFailureReason.GeneralError, entityPath));
                    }
                }
            }
            catch (Exception e)
            {
                foreach (var (_, done) in batch)
                {
                    done.TrySetException(e);
                }
            }
        }
    }
}
