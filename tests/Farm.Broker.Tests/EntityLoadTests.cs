using Farm.ContainerStore.Containers;
using Farm.ContainerStore.Sqlite;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>
/// A node that comes up with many queues (a restart, a takeover) loads them side by side: a queue
/// whose load is slow holds up no other queue, callers of the same queue share its one load, and a
/// caller that gives up does not cancel the load the others wait for.
/// </summary>
public sealed class EntityLoadTests : IAsyncLifetime
{
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    [Fact]
    public async Task ASlowLoad_HoldsUpNoOtherQueue_AndCallersOfTheSameQueueShareOneLoad()
    {
        var slow = await _farm.CreateQueueAsync("slow");
        await slow.SendAsync([Text("held")]);
        var others = new List<string>();
        for (var i = 0; i < 20; i++)
        {
            var name = $"other-{i}";
            others.Add(name);
            await (await _farm.CreateQueueAsync(name)).SendAsync([Text(name)]);
        }

        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var slowLoadStarted = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var slowLoads = 0;
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
        {
            if (name == nameof(IContainerDatabase.LoadEntityHeadAsync) && (long)args[0]! == slow.Id)
            {
                Interlocked.Increment(ref slowLoads);
                slowLoadStarted.TrySetResult();
                return HeldAsync();
            }
            return proceed();

            async Task<EntityLoad> HeldAsync()
            {
                await release.Task;
                return await (Task<EntityLoad>)proceed()!;
            }
        });
        await _farm.RestartAsync(crash: false);

        var first = _farm.QueueAsync("slow");
        await slowLoadStarted.Task.WaitAsync(TimeSpan.FromSeconds(30));
        using var givesUp = new CancellationTokenSource();
        var impatient = _farm.Node.ResolveQueueAsync("slow", givesUp.Token).AsTask();
        var second = _farm.QueueAsync("slow");

        // Every other queue loads and serves while the slow one's load is held.
        foreach (var name in others)
        {
            var queue = await _farm.QueueAsync(name).WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal(1, queue.GetCounts().Active);
        }
        await givesUp.CancelAsync();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => impatient);
        Assert.False(first.IsCompleted);

        release.SetResult();
        var loaded = await first.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Same(loaded, await second.WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal(1, loaded.GetCounts().Active);
        Assert.Equal(1, Volatile.Read(ref slowLoads));
    }
}
