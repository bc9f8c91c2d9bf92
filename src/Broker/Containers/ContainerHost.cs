using System.Collections.Concurrent;
using Farm.Broker.Entities;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Containers;

/// <summary>
/// A container this broker owns: its database (raised to our epoch before we serve), its commit
/// queue, the entities loaded from it, and the timer that sweeps their locks, schedules and TTLs.
/// </summary>
internal sealed partial class ContainerHost : IAsyncDisposable
{
    private readonly ConcurrentDictionary<long, QueueEntity> _entities = new();
    private readonly SemaphoreSlim _loading = new(1, 1);
    private readonly TimeProvider _time;
    private readonly BrokerOptions _options;
    private readonly ILogger _logger;
    private readonly ITimer _sweepTimer;
    private int _lost;
    private Func<string, CancellationToken, Task<QueueEntity>> _resolve = null!;

    private ContainerHost(ContainerRecord record, IContainerDatabase database, CommitQueue commits, TimeProvider time, BrokerOptions options, ILogger logger)
    {
        Id = record.Id;
        Epoch = record.Epoch;
        Database = database;
        Commits = commits;
        _time = time;
        _options = options;
        _logger = logger;
        TakenAt = time.GetUtcNow();
        _sweepTimer = time.CreateTimer(_ => Sweep(), null, options.SweepInterval, options.SweepInterval);
    }

    public long Id { get; }

    public long Epoch { get; }

    /// <summary>When this broker took the container (its clock); rebalancing leaves young ones alone.</summary>
    public DateTimeOffset TakenAt { get; }

    public IContainerDatabase Database { get; }

    public CommitQueue Commits { get; }

    /// <summary>True once a write found a higher epoch: another broker owns the container now.</summary>
    public bool IsLost => Volatile.Read(ref _lost) == 1;

    public IEnumerable<QueueEntity> Entities => _entities.Values;

    /// <summary>
    /// Opens the container database and fences it with the lease's epoch before anything is served
    /// (promise 3): from then on, a former owner's writes fail on the epoch check.
    /// </summary>
    public static async Task<ContainerHost> OpenAsync(
        ContainerRecord record, Func<IContainerDatabase> openDatabase, TimeProvider time, BrokerOptions options,
        Func<string, CancellationToken, Task<QueueEntity>> resolve, Action<long> onLost, ILogger logger, CancellationToken cancellationToken)
    {
        var database = openDatabase();
        if (!await database.RaiseEpochAsync(record.Epoch, cancellationToken).ConfigureAwait(false))
        {
            var stored = await database.ReadEpochAsync(cancellationToken).ConfigureAwait(false);
            await database.DisposeAsync().ConfigureAwait(false);
            throw new InvalidOperationException(
                $"Container {record.Id} carries epoch {stored}, newer than this lease's {record.Epoch}: another broker took it.");
        }
        ContainerHost? host = null;
        var commits = new CommitQueue(database, record.Id, record.Epoch, options.MaxOperationsPerCommit, id =>
        {
            host?.MarkLost();
            onLost(id);
        }, logger);
        host = new ContainerHost(record, database, commits, time, options, logger) { _resolve = resolve };
        return host;
    }

    public bool TryGetEntity(long entityId, out QueueEntity entity) => _entities.TryGetValue(entityId, out entity!);

    /// <summary>Loads an entity's messages from the database once; later calls return the loaded one.</summary>
    public async Task<QueueEntity> LoadEntityAsync(EntityRecord record, CancellationToken cancellationToken)
    {
        if (_entities.TryGetValue(record.Id, out var loaded))
        {
            return loaded;
        }
        await _loading.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_entities.TryGetValue(record.Id, out loaded))
            {
                return loaded;
            }
            var settings = QueueSettings.FromJson(record.PropertiesJson);
            var entity = new QueueEntity(record.Id, record.Name, settings, Commits, _time, _options) { Resolve = _resolve };
            var load = await Database.LoadEntityAsync(record.Id, _time.GetUtcNow().ToUnixTimeMilliseconds(), cancellationToken).ConfigureAwait(false);
            entity.Load(load);
            _entities[record.Id] = entity;
            LogEntityLoaded(_logger, record.Name, Id, load.Messages.Count);
            return entity;
        }
        finally
        {
            _loading.Release();
        }
    }

    /// <summary>Stops serving the entity and deletes its messages durably.</summary>
    public async Task PurgeEntityAsync(long entityId)
    {
        if (_entities.TryRemove(entityId, out var entity))
        {
            entity.MarkDeleted();
        }
        await Commits.CommitAsync(batch => batch.PurgedEntities.Add(entityId)).ConfigureAwait(false);
    }

    /// <summary>
    /// The first half of a planned hand-over: stop taking new work, then wait (up to
    /// <paramref name="maxWait"/>) until receivers have settled the locks they hold, so a planned
    /// move costs them nothing. Locks still held when the wait ends are dropped; those messages come
    /// back from the next owner, as after a crash.
    /// </summary>
    public async Task StopTakingWorkAsync(TimeSpan maxWait)
    {
        foreach (var entity in _entities.Values)
        {
            entity.StopTakingWork(FarmErrors.Create(Contracts.Rpc.RpcStatusCode.Unavailable, Contracts.V1.FarmErrorCode.ServiceBusy,
                $"'{entity.Name}' is moving to another broker; try again."));
        }
        var deadline = _time.GetUtcNow() + maxWait;
        while (_entities.Values.Any(e => e.HeldLocks > 0) && _time.GetUtcNow() < deadline)
        {
            await Task.Delay(TimeSpan.FromMilliseconds(20), _time).ConfigureAwait(false);
        }
    }

    private void MarkLost() => Interlocked.Exchange(ref _lost, 1);

    private void Sweep()
    {
        foreach (var entity in _entities.Values)
        {
            try
            {
                entity.Sweep();
            }
            catch (Exception e)
            {
                LogSweepFailed(_logger, entity.Name, e);
            }
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _sweepTimer.DisposeAsync().ConfigureAwait(false);
        foreach (var entity in _entities.Values)
        {
            entity.Unload(IsLost
                ? FarmErrors.NotOwner(entity.Name, null)
                : FarmErrors.Create(Contracts.Rpc.RpcStatusCode.Unavailable, Contracts.V1.FarmErrorCode.ServiceBusy,
                    $"The broker serving '{entity.Name}' is stopping; try again."));
        }
        await Commits.DisposeAsync().ConfigureAwait(false);
        await Database.DisposeAsync().ConfigureAwait(false);
    }

    [LoggerMessage(Level = LogLevel.Information, Message = "Loaded {Entity} from container {ContainerId}: {Count} messages")]
    private static partial void LogEntityLoaded(ILogger logger, string entity, long containerId, int count);

    [LoggerMessage(Level = LogLevel.Error, Message = "Sweeping {Entity} failed")]
    private static partial void LogSweepFailed(ILogger logger, string entity, Exception exception);
}
