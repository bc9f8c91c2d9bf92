using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Sqlite;
using Farm.Contracts;
using Farm.Contracts.V1;
using Google.Protobuf;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// A container that cannot commit (its database holds the commit) does not make the node queue
/// sends without end: past MaxWaitingCommitBytes a send gets SERVICE_BUSY and stores nothing,
/// while the ones already accepted commit once the database answers.
/// </summary>
public sealed class BackpressureTests : IAsyncDisposable
{
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-backpressure-tests", Guid.NewGuid().ToString("N"));
    private BrokerNode? _node;

    [Fact]
    public async Task Sends_PastTheWaitingLimit_GetServiceBusy_AndStoreNothing_TheAcceptedOnesCommitLater()
    {
        var hold = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var armed = false;
        var provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
            name == nameof(IContainerDatabase.CommitBeforeDurableAsync) && Volatile.Read(ref armed) ? HeldAsync(hold.Task, proceed) : proceed());
        _node = new BrokerNode(provider, new NodeOptions { NodeId = 1, DataDirectory = _directory },
            new BrokerOptions { MaxWaitingCommitBytes = 10 * 1024 }, TestClock.Create(), NullLogger<BrokerNode>.Instance);
        await _node.StartAsync("http://test", CancellationToken.None);
        var record = await _node.Farm.CreateEntityAsync("q", EntityKinds.Queue, 1, new QueueSettings().ToJson());
        var queue = await _node.LoadAsync(record, CancellationToken.None);
        var message = new Message { Body = ByteString.CopyFrom(new byte[1024]) };

        Volatile.Write(ref armed, true);
        var accepted = new List<Task<long[]>>();
        BrokerException? busy = null;
        for (var i = 0; i < 100 && busy is null; i++)
        {
            // Accepted or refused before the send's first await: a refused one is already faulted.
            var send = queue.SendAsync([message]);
            if (send.IsFaulted)
            {
                busy = Assert.IsType<BrokerException>(send.Exception!.InnerException);
            }
            else
            {
                accepted.Add(send);
            }
        }

        Assert.NotNull(busy);
        Assert.Equal("SERVICE_BUSY", FarmErrorNames.Of(busy.Code));
        Assert.Contains("nothing was stored", busy.Message, StringComparison.Ordinal);
        Assert.InRange(accepted.Count, 9, 10);
        Assert.All(accepted, send => Assert.False(send.IsCompleted));

        Volatile.Write(ref armed, false);
        hold.SetResult();
        await Task.WhenAll(accepted);
        Assert.Equal(accepted.Count, queue.GetCounts().Active);
        Assert.Single(await queue.SendAsync([message]));
    }

    private static async Task<Task> HeldAsync(Task gate, Func<object?> proceed)
    {
        await gate;
        return await (Task<Task>)proceed()!;
    }

    public async ValueTask DisposeAsync()
    {
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
