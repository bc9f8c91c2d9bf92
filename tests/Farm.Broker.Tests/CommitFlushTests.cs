using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Sqlite;
using Farm.Contracts.V1;
using Farm.Testing;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// The group commit writes its next transaction while the disk writes the last one
/// (<see cref="IContainerDatabase.CommitBeforeDurableAsync"/>), and still acknowledges nothing
/// before it is on disk (promise 1). Real node, real SQLite files; the test holds the "on disk"
/// answer of each commit until it lets it go.
/// </summary>
public sealed class CommitFlushTests : IAsyncDisposable
{
    private static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-commit-flush-tests", Guid.NewGuid().ToString("N"));
    private readonly TaskCompletionSource _onDisk = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private BrokerNode? _node;
    private bool _holding;
    private int _heldCommits;

    private async Task<QueueEntity> StartAsync()
    {
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, _, proceed) =>
            name == nameof(IContainerDatabase.CommitBeforeDurableAsync) && Volatile.Read(ref _holding) ? HoldOnDiskAsync((Task<Task>)proceed()!) : proceed());
        _node = new BrokerNode(provider, new NodeOptions { NodeId = 1, DataDirectory = _directory }, new BrokerOptions(), TestClock.Create(), NullLogger<BrokerNode>.Instance);
        await _node.StartAsync("http://test", CancellationToken.None);
        var record = await _node.Farm.CreateEntityAsync("q", EntityKinds.Queue, 1, new QueueSettings().ToJson());
        return await _node.LoadAsync(record, CancellationToken.None);
    }

    /// <summary>The real commit; its "on disk" answer waits for the real flush and for the test.</summary>
    private async Task<Task> HoldOnDiskAsync(Task<Task> commit)
    {
        var durable = await commit;
        Interlocked.Increment(ref _heldCommits);
        return Task.WhenAll(durable, _onDisk.Task);
    }

    [Fact]
    public async Task SendsCommitOneAfterAnother_WithoutWaitingForTheDisk_AndAreAcknowledgedOnlyOnceOnIt()
    {
        var queue = await StartAsync();
        Volatile.Write(ref _holding, true);

        var first = queue.SendAsync([BrokerHarness.Text("one", "m-1")]);
        await Eventually.UntilAsync(() => Volatile.Read(ref _heldCommits) == 1, Deadline, "the first send committed");
        var second = queue.SendAsync([BrokerHarness.Text("two", "m-2")]);
        await Eventually.UntilAsync(() => Volatile.Read(ref _heldCommits) == 2, Deadline, "the second send committed while the first is not on disk");

        Assert.False(first.IsCompleted, "a send was acknowledged before its commit was on disk");
        Assert.False(second.IsCompleted, "a send was acknowledged before its commit was on disk");
        _onDisk.SetResult();
        Assert.True((await first.WaitAsync(Deadline))[0] > 0);
        Assert.True((await second.WaitAsync(Deadline))[0] > 0);
        using var cancel = new CancellationTokenSource(Deadline);
        var received = await queue.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, cancel.Token);
        Assert.Equal(["m-1", "m-2"], received.Select(m => m.Message.MessageId));
    }

    /// <summary>
    /// A receive-and-delete hands a message out only once its deletion is on disk: were it handed
    /// out before and the machine lost power, the message would come back and be delivered twice.
    /// </summary>
    [Fact]
    public async Task AReceiveAndDelete_HandsTheMessageOutOnlyOnceItsDeletionIsOnDisk()
    {
        var queue = await StartAsync();
        await queue.SendAsync([BrokerHarness.Text("one", "m-1")]);
        Volatile.Write(ref _holding, true);

        var receive = queue.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, CancellationToken.None);
        await Eventually.UntilAsync(() => Volatile.Read(ref _heldCommits) == 1, Deadline, "the deletion committed");

        Assert.False(receive.IsCompleted, "a message was handed out before its deletion was on disk");
        _onDisk.SetResult();
        Assert.Equal("m-1", Assert.Single(await receive.WaitAsync(Deadline)).Message.MessageId);
    }

    public async ValueTask DisposeAsync()
    {
        _onDisk.TrySetResult();
        if (_node is not null)
        {
            await _node.DisposeAsync();
        }
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
        }
    }
}
