using Farm.Broker.Node;
using Farm.ContainerStore.Sqlite;
using Farm.Testing;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Broker.Tests;

/// <summary>
/// A container whose database takes longer than a lease to open and fence stays with the node that
/// leased it: its lease is renewed while it opens. Before, the lease ran from the take alone, so the
/// host was lost the moment it was registered, and at start-up nothing renewed at all until the
/// first pass ended (LeaseRenewalTests on PostgreSQL lapsed so on a busy CI server). Real SQLite
/// files; the fence is held by the test; the lease clock is the test's.
/// </summary>
public sealed class SlowTakeTests : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-slow-take-tests", Guid.NewGuid().ToString("N"));
    private readonly FakeTimeProvider _leaseClock = TestClock.Create();
    private readonly NodeOptions _options;
    private readonly BrokerNode _node;
    private readonly FakeLogger<BrokerNode> _log = new();
    private readonly InterceptedStoreProvider _provider;
    /// <summary>Set while the test holds the fence (RaiseEpochAsync) of the next container opened.</summary>
    private TaskCompletionSource? _release;
    private readonly TaskCompletionSource _fenceHeld = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public SlowTakeTests()
    {
        _options = new NodeOptions { NodeId = 1, DataDirectory = _directory };
        _provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
            name == "RaiseEpochAsync" && Volatile.Read(ref _release) is { } release ? HeldAsync(release, proceed) : proceed());
        _node = new BrokerNode(_provider, _options, new BrokerOptions(), TimeProvider.System, _log, _leaseClock);
    }

    private async Task<bool> HeldAsync(TaskCompletionSource release, Func<object?> proceed)
    {
        _fenceHeld.TrySetResult();
        await release.Task;
        return await (Task<bool>)proceed()!;
    }

    [Fact]
    public async Task AtStartUp_AContainerWhoseFenceTakesLongerThanALease_IsServedOnceFenced()
    {
        _release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var started = _node.StartAsync("http://test-1", CancellationToken.None);
        await _fenceHeld.Task.WaitAsync(Deadline);

        await HeartbeatThroughAsync(FenceHeldFor, "the node heartbeats while its first take is still fencing");
        Interlocked.Exchange(ref _release, null)!.TrySetResult();
        await started.WaitAsync(Deadline);

        var container = Assert.Single(await _node.Farm.ListContainersAsync());
        Assert.True(_node.ServesContainer(container.Id), $"the node lost the container it fenced: its lease was not renewed while it opened; it logged: {Logged()}");
        await HeartbeatThroughAsync(2 * _options.LeaseDuration, "the node heartbeats while it serves");
        Assert.True(_node.ServesContainer(container.Id));
        Assert.Equal(1, (await _node.Farm.GetContainerAsync(container.Id))!.OwnerNode);
    }

    [Fact]
    public async Task InARunningNode_AContainerWhoseFenceTakesLongerThanALease_IsServedOnceFenced()
    {
        await _node.StartAsync("http://test-1", CancellationToken.None);
        var first = Assert.Single(await _node.Farm.ListContainersAsync());

        _release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var created = _node.CreateContainerAsync(CancellationToken.None);
        await _fenceHeld.Task.WaitAsync(Deadline);
        await HeartbeatThroughAsync(FenceHeldFor, "the node heartbeats while it fences a new container");
        Interlocked.Exchange(ref _release, null)!.TrySetResult();
        var second = await created.WaitAsync(Deadline);

        Assert.True(_node.ServesContainer(second.Id), $"the node lost the container it fenced: its lease was not renewed while it opened; it logged: {Logged()}");
        Assert.True(_node.ServesContainer(first.Id));
        Assert.Equal(1, second.OwnerNode);
    }

    /// <summary>
    /// Longer than a lease, shorter than the take's own time limit (<see cref="NodeOptions.TakeTimeout"/>,
    /// after which the pass gives the take up and tries again).
    /// </summary>
    private TimeSpan FenceHeldFor
    {
        get
        {
            var heldFor = _options.LeaseDuration + 2 * _options.HeartbeatInterval;
            Assert.True(heldFor < _options.TakeTimeout);
            return heldFor;
        }
    }

    /// <summary>
    /// Moves the lease clock on by <paramref name="total"/>, a heartbeat at a time, each time waiting
    /// until the node heartbeat at that tick (its renewals follow in the same pass, stamped no earlier).
    /// </summary>
    private async Task HeartbeatThroughAsync(TimeSpan total, string what)
    {
        var ticks = (int)(total / _options.HeartbeatInterval);
        for (var i = 0; i < ticks; i++)
        {
            await TestClock.AdvanceAndSettleAsync(_leaseClock, _options.HeartbeatInterval);
            var now = _leaseClock.GetUtcNow();
            await Eventually.UntilAsync(() => _node.LastHeartbeatAt >= now, Deadline, what);
        }
    }

    private string Logged() => LoggedRecords.Describe(_log, LogLevel.Information);

    public async ValueTask DisposeAsync()
    {
        Volatile.Read(ref _release)?.TrySetResult();
        await _node.DisposeAsync();
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // A file still open on a slow dispose is not worth failing a test for.
        }
    }
}
