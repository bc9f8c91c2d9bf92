using System.Collections.Concurrent;

namespace Farm.Contracts;

/// <summary>
/// Puts the frames of many producers (the links of a receive session) onto one stream, each write
/// carrying every frame queued at that moment. A producer that finds the stream idle writes
/// itself, its frame and whatever queued with it, so a lone frame costs no hand-over to another
/// thread; a producer that finds a write going leaves its frame to that writer. A producer stops
/// writing once its own frame is out and leaves what queued since to a background writer: under
/// steady load the queue is never empty, and a producer kept writing others' frames would stall
/// its own link (a receiver's settlements waited behind it until their locks ran out). After a
/// failed write every frame queued or written later fails with the same error.
/// </summary>
public sealed class FrameBatcher<TFrame>(Func<IReadOnlyList<TFrame>, Task> writeBatch, Func<TFrame, int> sizeOf, int maxBatchBytes)
{
    private readonly ConcurrentQueue<(TFrame Frame, TaskCompletionSource? Written)> _queue = new();
    private readonly SemaphoreSlim _writing = new(1, 1);
    private volatile Exception? _failure;

    /// <summary>Set once a write failed: the stream is gone.</summary>
    public Exception? Failure => _failure;

    /// <summary>Writes <paramref name="frame"/>; completes once it is on the stream, or throws what broke the stream.</summary>
    public async Task WriteAsync(TFrame frame)
    {
        if (_failure is { } failure)
        {
            throw failure;
        }
        var written = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _queue.Enqueue((frame, written));
        await TryWriteQueuedAsync(written.Task).ConfigureAwait(false);
        await written.Task.ConfigureAwait(false);
    }

    /// <summary>Queues <paramref name="frame"/> without waiting for it; false when the stream is gone.</summary>
    public bool Post(TFrame frame)
    {
        if (_failure is not null)
        {
            return false;
        }
        _queue.Enqueue((frame, null));
        _ = TryWriteQueuedAsync(null);
        return true;
    }

    /// <summary>Waits until every frame queued so far is written (or failed).</summary>
    public async Task FlushAsync()
    {
        while (!_queue.IsEmpty && _failure is null)
        {
            await _writing.WaitAsync().ConfigureAwait(false);
            try
            {
                await WriteQueuedAsync(null).ConfigureAwait(false);
            }
            finally
            {
                _writing.Release();
            }
        }
        if (_failure is { } failure)
        {
            FailQueued(failure);
        }
    }

    /// <summary>Fails every frame queued now or later with <paramref name="error"/> (the stream ended another way).</summary>
    public void Fail(Exception error)
    {
        _failure ??= error;
        FailQueued(_failure);
    }

    /// <summary>
    /// Writes what is queued if no one else is writing, until <paramref name="until"/> completes
    /// (the caller's own frame is out; null: until the queue is empty). What is left then goes to a
    /// background writer.
    /// </summary>
    private async Task TryWriteQueuedAsync(Task? until)
    {
        // The releasing writer looks at the queue again, so a frame queued just as it finished is
        // never left behind: either it saw the frame, or the frame's producer gets the lock.
        while (!_queue.IsEmpty && _failure is null && _writing.Wait(0))
        {
            try
            {
                await WriteQueuedAsync(until).ConfigureAwait(false);
            }
            finally
            {
                _writing.Release();
            }
            if (until?.IsCompleted == true)
            {
                if (!_queue.IsEmpty && _failure is null)
                {
                    _ = Task.Run(() => TryWriteQueuedAsync(null));
                }
                break;
            }
        }
        if (_failure is { } failure)
        {
            FailQueued(failure);
        }
    }

    private async Task WriteQueuedAsync(Task? until)
    {
        var batch = new List<TFrame>();
        var written = new List<TaskCompletionSource>();
        while (until?.IsCompleted != true)
        {
            var bytes = 0;
            while (bytes < maxBatchBytes && _queue.TryDequeue(out var item))
            {
                batch.Add(item.Frame);
                bytes += sizeOf(item.Frame);
                if (item.Written is { } done)
                {
                    written.Add(done);
                }
            }
            if (batch.Count == 0)
            {
                return;
            }
            try
            {
                await writeBatch(batch).ConfigureAwait(false);
            }
            catch (Exception e)
            {
                _failure ??= e;
                foreach (var done in written)
                {
                    done.TrySetException(e);
                }
                return;
            }
            foreach (var done in written)
            {
                done.TrySetResult();
            }
            batch = [];
            written.Clear();
        }
    }

    private void FailQueued(Exception error)
    {
        while (_queue.TryDequeue(out var item))
        {
            item.Written?.TrySetException(error);
        }
    }
}
