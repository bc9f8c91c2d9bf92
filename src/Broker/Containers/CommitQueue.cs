using Farm.Broker.Entities;
using Farm.Broker.Telemetry;
using System.Threading.Channels;
using Farm.ContainerStore;
using Farm.ContainerStore.Containers;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Containers;

/// <summary>
/// Group commit for one container: concurrent operations queue their writes here, one loop packs
/// everything waiting into a single transaction, then runs each operation's <c>onCommitted</c> in
/// commit order. An operation is acknowledged only once its transaction is durable (promise 1):
/// the loop does not wait for that (<see cref="IContainerDatabase.CommitBeforeDurableAsync"/>) but
/// writes the next transaction while the disk writes this one, and a second loop acknowledges each
/// commit, in order, once it is on disk.
/// </summary>
internal sealed partial class CommitQueue : IAsyncDisposable
{
    /// <summary>
    /// A write to commit, or (<see cref="Read"/> set) a read to run between two commits, which may
    /// ask for a write of its own to commit next, before anything else.
    /// </summary>
    private readonly record struct PendingWrite(
        Action<ContainerWriteBatch> Write,
        Action? OnCommitted,
        Action<Exception>? OnFailed,
        TaskCompletionSource Done,
        Func<IContainerDatabase, Task<FollowUpWrite?>>? Read = null,
        long Bytes = 0);

    /// <summary>The write a read decided on (<see cref="ReadThenCommitAsync"/>), with its in-memory steps.</summary>
    public sealed record FollowUpWrite(Action<ContainerWriteBatch> Write, Action OnCommitted, Action<Exception> OnFailed);

    /// <summary>A committed group waiting to be durable before its operations are acknowledged.</summary>
    private readonly record struct CommittedGroup(Task Durable, PendingWrite[] Operations, long CommittedAt);

    private readonly Channel<PendingWrite> _pending = Channel.CreateUnbounded<PendingWrite>(new UnboundedChannelOptions { SingleReader = true });
    private readonly Channel<CommittedGroup> _committed = Channel.CreateUnbounded<CommittedGroup>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = true });
    private readonly IContainerDatabase _database;
    private readonly long _containerId;
    private readonly int _maxOperations;
    private readonly Action<long> _onEpochLost;
    private readonly Action<long> _onOutcomeUnknown;
    private readonly ILogger _logger;
    private readonly BrokerOptions _options;
    private readonly TimeProvider _time;
    private readonly Task _loop;
    private readonly Task _acknowledgeLoop;
    private long _epoch;

    /// <summary>
    /// Set once a commit's outcome is unknown: memory may no longer match the database, so nothing
    /// more is written through this queue; the container is reloaded from the database instead.
    /// </summary>
    private volatile BrokerException? _broken;

    /// <param name="options">Read on every commit: <see cref="BrokerOptions.CommitDelay"/> may change while the queue runs.</param>
    public CommitQueue(
        IContainerDatabase database, long containerId, long epoch, BrokerOptions options, TimeProvider time, Action<long> onEpochLost, Action<long> onOutcomeUnknown, ILogger logger)
    {
        _database = database;
        ForwardSenders = new ForwardSenders(cancellationToken => database.NewestSendRecordAtMsAsync(QueueEntity.ForwardProducerPrefix, cancellationToken));
        _containerId = containerId;
        _epoch = epoch;
        _options = options;
        _time = time;
        _maxOperations = options.MaxOperationsPerCommit;
        _onEpochLost = onEpochLost;
        _onOutcomeUnknown = onOutcomeUnknown;
        _logger = logger;
        _loop = Task.Run(RunAsync);
        _acknowledgeLoop = Task.Run(AcknowledgeAsync);
    }

    public long Epoch => Volatile.Read(ref _epoch);

    /// <summary>
    /// The forwarders heard from during this ownership of the container: whether a forwarded send
    /// to one of its entities must read its messages' records (kept here because a commit queue
    /// lives exactly as long as one ownership).
    /// </summary>
    public ForwardSenders ForwardSenders { get; }

    public long ContainerId => _containerId;

    /// <summary>
    /// Message bytes of sends queued here and not committed yet. Sends stop being accepted
    /// (SERVICE_BUSY) while it is over the limit, so a container the disk cannot keep up with does
    /// not hold ever more messages in memory.
    /// </summary>
    public long WaitingBytes => Interlocked.Read(ref _waitingBytes);
    private long _waitingBytes;

    /// <summary>The container database, for reads that need not wait for the commit loop (a peek past the cache).</summary>
    public IContainerDatabase Database => _database;

    /// <summary>Number of transactions committed, for metrics and tests.</summary>
    public long CommitCount => Interlocked.Read(ref _commitCount);
    private long _commitCount;

    /// <summary>
    /// Queues a write; completes once it is durable (<paramref name="onCommitted"/> ran when it committed), or
    /// fails with a BrokerException (STALE_EPOCH / STORE_UNAVAILABLE) after <paramref name="onFailed"/> ran.
    /// </summary>
    /// <param name="bytes">The message bytes the write carries (a send's payloads): counted in <see cref="WaitingBytes"/> until it commits or fails.</param>
    public Task CommitAsync(Action<ContainerWriteBatch> write, Action? onCommitted = null, Action<Exception>? onFailed = null, long bytes = 0)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Interlocked.Add(ref _waitingBytes, bytes);
        if (!_pending.Writer.TryWrite(new PendingWrite(write, onCommitted, onFailed, done, Bytes: bytes)))
        {
            Interlocked.Add(ref _waitingBytes, -bytes);
            var error = FarmErrors.StoreUnavailable($"Container {_containerId} is closed on this broker.");
            onFailed?.Invoke(error);
            done.SetException(error);
        }
        return done.Task;
    }

    /// <summary>
    /// Runs <paramref name="read"/> in the commit loop, between two commits: every earlier write has
    /// committed and run its in-memory step, and no write commits until the read (and whatever it
    /// applies in memory) is done. An entity reads back the messages it left in the database this
    /// way, so what it reads and what its commits change in memory cannot cross.
    /// </summary>
    public Task ReadAsync(Func<IContainerDatabase, Task> read) =>
        ReadThenCommitAsync(async database =>
        {
            await read(database).ConfigureAwait(false);
            return null;
        });

    /// <summary>
    /// Like <see cref="ReadAsync"/>, and the write the read returns (if any) commits on its own right
    /// after it, before any other read or write: what the read saw is still what the write changes.
    /// An entity expires messages it left in the database this way (it must know which ones, and a
    /// read-back must not take them into memory between). Completes once that write is durable.
    /// </summary>
    public Task ReadThenCommitAsync(Func<IContainerDatabase, Task<FollowUpWrite?>> read)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        if (!_pending.Writer.TryWrite(new PendingWrite(static _ => { }, null, null, done, read)))
        {
            done.SetException(FarmErrors.StoreUnavailable($"Container {_containerId} is closed on this broker."));
        }
        return done.Task;
    }

    private async Task RunAsync()
    {
        var batch = new ContainerWriteBatch();
        var group = new List<PendingWrite>();
        var reader = _pending.Reader;
        while (await reader.WaitToReadAsync().ConfigureAwait(false))
        {
            var alone = await TakeGroupAsync(group, reader).ConfigureAwait(false);
            var delay = _options.CommitDelay;
            if (!alone && delay > TimeSpan.Zero && group.Count > 0 && group.Count < _options.CommitDelayBelow)
            {
                // A small commit waits a moment for more writes to share its fsync (CommitDelay).
                await Task.Delay(delay, _time).ConfigureAwait(false);
                TakeWritesBeforeRead(group, reader);
            }
            if (group.Count > 0)
            {
                await CommitGroupAsync(batch, group).ConfigureAwait(false);
            }
            group.Clear();
            batch.Clear();
        }
    }

    /// <summary>Moves the waiting writes into <paramref name="group"/>, up to the first read (which waits for the next commit).</summary>
    private void TakeWritesBeforeRead(List<PendingWrite> group, ChannelReader<PendingWrite> reader)
    {
        while (group.Count < _maxOperations && reader.TryPeek(out var next) && next.Read is null)
        {
            reader.TryRead(out var item);
            group.Add(item);
        }
    }

    /// <summary>
    /// Fills <paramref name="group"/> with what waits: writes, and the reads at its head, run as they
    /// come. Stops at a read behind writes (false), or once a read asks for a write of its own
    /// (true: that write commits alone, now).
    /// </summary>
    private async Task<bool> TakeGroupAsync(List<PendingWrite> group, ChannelReader<PendingWrite> reader)
    {
        while (group.Count < _maxOperations && reader.TryPeek(out var next))
        {
            if (next.Read is not null && group.Count > 0)
            {
                // The writes queued before the read commit first.
                return false;
            }
            reader.TryRead(out var item);
            if (item.Read is not null)
            {
                if (await RunReadAsync(item).ConfigureAwait(false) is { } followUp)
                {
                    // Commits alone, now: nothing may come between the read and this write.
                    group.Add(new PendingWrite(followUp.Write, followUp.OnCommitted, followUp.OnFailed, item.Done));
                    return true;
                }
                continue;
            }
            group.Add(item);
        }
        return false;
    }

    /// <summary>Runs a read; returns the write it asks for (its Done is then the write's), else completes it.</summary>
    private async Task<FollowUpWrite?> RunReadAsync(PendingWrite item)
    {
        if (_broken is { } broken)
        {
            item.Done.SetException(broken);
            return null;
        }
        try
        {
            if (await item.Read!(_database).ConfigureAwait(false) is { } followUp)
            {
                return followUp;
            }
            item.Done.SetResult();
        }
        catch (Exception e)
        {
            item.Done.SetException(e);
        }
        return null;
    }

    /// <summary>
    /// Counts the groups whose writes were made: a write callback tells by it which of its entity's
    /// other writes share its transaction (they all commit, or none does).
    /// </summary>
    public long GroupNumber => Volatile.Read(ref _groupNumber);
    private long _groupNumber;

    private async Task CommitGroupAsync(ContainerWriteBatch batch, List<PendingWrite> group)
    {
        Interlocked.Increment(ref _groupNumber);
        // After a commit whose outcome is unknown nothing more is written here (see _broken).
        Exception? failure = _broken;
        var outcomeUnknown = false;
        var durable = Task.CompletedTask;
        try
        {
            foreach (var item in failure is null ? group : [])
            {
                item.Write(batch);
            }
            if (failure is null && !batch.IsEmpty)
            {
                var started = System.Diagnostics.Stopwatch.GetTimestamp();
                durable = await _database.CommitBeforeDurableAsync(Epoch, batch).ConfigureAwait(false);
                Interlocked.Increment(ref _commitCount);
                BrokerMetrics.RecordCommit(_containerId, group.Count, started);
            }
        }
        catch (StaleEpochException e)
        {
            LogEpochLost(_logger, _containerId, e.ExpectedEpoch, e.ActualEpoch);
            failure = FarmErrors.StaleEpoch(_containerId);
            _onEpochLost(_containerId);
        }
        catch (CommitOutcomeUnknownException e)
        {
            failure = OutcomeUnknown(e);
            outcomeUnknown = true;
        }
        catch (Exception e)
        {
            LogCommitFailed(_logger, _containerId, e);
            failure = FarmErrors.StoreUnavailable($"Container {_containerId} could not commit: {FirstLine(e.Message)}");
        }

        foreach (var item in group)
        {
            Interlocked.Add(ref _waitingBytes, -item.Bytes);
            if (failure is null)
            {
                // In memory at once, in commit order: the next transaction is written against it.
                RunSafely(item.OnCommitted);
            }
            else if (outcomeUnknown)
            {
                item.Done.SetException(failure);
            }
            else
            {
                try
                {
                    item.OnFailed?.Invoke(failure);
                }
                catch (Exception e)
                {
                    LogCallbackFailed(_logger, _containerId, e);
                }
                item.Done.SetException(failure);
            }
        }
        if (failure is null)
        {
            _committed.Writer.TryWrite(new CommittedGroup(durable, [.. group], System.Diagnostics.Stopwatch.GetTimestamp()));
        }
    }

    /// <summary>
    /// Maybe written, maybe not: neither acknowledge nor roll memory back as if it was not. The
    /// container is closed and taken again, which reads the truth from the database.
    /// </summary>
    private BrokerException OutcomeUnknown(CommitOutcomeUnknownException e)
    {
        LogCommitOutcomeUnknown(_logger, _containerId, e);
        var failure = _broken = FarmErrors.StoreUnavailable(
            $"Container {_containerId}: a commit failed and may or may not have been written; the container is reloading from its database, try again.");
        _onOutcomeUnknown(_containerId);
        return failure;
    }

    /// <summary>
    /// Acknowledges each committed group once it is durable, in commit order. Once making one
    /// durable failed, no later commit is taken as durable either (a failed fsync may have dropped
    /// their writes too): they fail as outcome unknown, and the container reloads.
    /// </summary>
    private async Task AcknowledgeAsync()
    {
        BrokerException? lost = null;
        var reader = _committed.Reader;
        while (await reader.WaitToReadAsync().ConfigureAwait(false))
        {
            while (reader.TryRead(out var group))
            {
                if (lost is null)
                {
                    try
                    {
                        await group.Durable.ConfigureAwait(false);
                        BrokerMetrics.RecordCommitFlush(_containerId, group.CommittedAt);
                    }
                    catch (CommitOutcomeUnknownException e)
                    {
                        lost = OutcomeUnknown(e);
                    }
                    catch (Exception e)
                    {
                        lost = OutcomeUnknown(new CommitOutcomeUnknownException($"Container {_containerId}: writing a commit to disk failed: {e.Message}", e));
                    }
                }
                foreach (var item in group.Operations)
                {
                    if (lost is null)
                    {
                        item.Done.SetResult();
                    }
                    else
                    {
                        item.Done.SetException(lost);
                    }
                }
            }
        }
    }

    private void RunSafely(Action? action)
    {
        try
        {
            action?.Invoke();
        }
        catch (Exception e)
        {
            // A bug in an in-memory update must not take the commit loop down with it.
            LogCallbackFailed(_logger, _containerId, e);
        }
    }

    private static string FirstLine(string s) => s.Split('\n', 2)[0].Trim();

    public async ValueTask DisposeAsync()
    {
        _pending.Writer.TryComplete();
        await _loop.ConfigureAwait(false);
        // Then the acknowledgements of what the loop committed last.
        _committed.Writer.TryComplete();
        await _acknowledgeLoop.ConfigureAwait(false);
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "Container {ContainerId}: owner epoch moved from {Expected} to {Actual}; this broker stops writing to it")]
    private static partial void LogEpochLost(ILogger logger, long containerId, long expected, long actual);

    [LoggerMessage(Level = LogLevel.Error, Message = "Container {ContainerId}: a commit failed with its outcome unknown; reloading the container from its database")]
    private static partial void LogCommitOutcomeUnknown(ILogger logger, long containerId, Exception exception);

    [LoggerMessage(Level = LogLevel.Error, Message = "Container {ContainerId}: commit failed")]
    private static partial void LogCommitFailed(ILogger logger, long containerId, Exception exception);

    [LoggerMessage(Level = LogLevel.Error, Message = "Container {ContainerId}: an in-memory update after commit failed")]
    private static partial void LogCallbackFailed(ILogger logger, long containerId, Exception exception);
}
