using System.Runtime.CompilerServices;
using Grpc.Core;

namespace Farm.Gateway.Grpc;

/// <summary>
/// Reads a streaming call's requests so that no read outlives the call. Kestrel reuses an HTTP/2
/// stream's request pipe for a later call: a read still pending when a handler returns (a
/// background task reading credit) failed that later call with "Reading is already in progress"
/// (seen as a send failing with INTERNAL while a node drained). Disposing cancels the pending read
/// and waits for it, so a handler that disposes this before it returns leaves the pipe idle.
/// </summary>
internal sealed class CallScopedRequestStream<T>(IAsyncStreamReader<T> reader, CancellationToken callToken) : IAsyncDisposable
{
    private static readonly TimeSpan ReadStopTimeout = TimeSpan.FromSeconds(5);

    private readonly CancellationTokenSource _stop = CancellationTokenSource.CreateLinkedTokenSource(callToken);

    // Starting a read and stopping exclude each other: a reader that checked "not stopped" and
    // then started a read after DisposeAsync looked for pending reads would read an ended call.
    private readonly object _gate = new();
    private bool _stopped;
    private Task _pending = Task.CompletedTask;

    /// <summary>The requests; one reader at a time, as for any request stream.</summary>
    public async IAsyncEnumerable<T> ReadAllAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        while (true)
        {
            Task<bool> next;
            lock (_gate)
            {
                if (_stopped)
                {
                    yield break;
                }
                next = reader.MoveNext(_stop.Token);
                _pending = next;
            }
            bool more;
            try
            {
                more = await next.ConfigureAwait(false);
            }
            catch (Exception) when (_stop.IsCancellationRequested)
            {
                // The call is over: no more requests.
                yield break;
            }
            if (!more)
            {
                yield break;
            }
            yield return reader.Current;
        }
    }

    public async ValueTask DisposeAsync()
    {
        Task pending;
        lock (_gate)
        {
            _stopped = true;
            pending = _pending;
        }
        await _stop.CancelAsync().ConfigureAwait(false);
        try
        {
            // Bounded, so a read that ignored its cancellation cannot hold the call open for ever.
            await pending.WaitAsync(ReadStopTimeout).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // Cancelled, or the stream broke: either way no read is pending any more.
        }
        // _stop is not disposed: a reader racing this may still ask for its token; it is linked to
        // the call's token only, which goes with the call.
    }
}
