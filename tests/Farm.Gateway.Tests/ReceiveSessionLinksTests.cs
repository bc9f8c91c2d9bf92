using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;

namespace Farm.Gateway.Tests;

/// <summary>
/// What a link of a receive session reads of its requests (<see cref="ReceiveSessionLinks.Link.ReadRequestsAsync"/>),
/// as a Receive call's request stream would give them: in order until the client half-closes; an
/// OperationCanceledException once the client detached or the session's call ended, with nothing
/// read after that, even what was queued before, and a read waiting on a quiet link woken by it.
/// </summary>
public sealed class ReceiveSessionLinksTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    private static LinkRequest Open(long link) => new() { Link = link, Request = new ReceiveRequest { Open = new ReceiveOpen { Entity = "q", Credit = 1 } } };

    private static LinkRequest Credit(long link, int credit) => new() { Link = link, Request = new ReceiveRequest { Credit = credit } };

    [Fact]
    public async Task ALinkReadsItsRequestsInOrder_UntilTheClientHalfCloses()
    {
        using var session = new ReceiveSessionLinks(new NoResponses(), maxLinks: 10, CancellationToken.None);
        var link = session.Dispatch(Open(1))!;
        session.Dispatch(Credit(1, 2));
        session.Dispatch(Credit(1, 3));
        session.Dispatch(new LinkRequest { Link = 1, HalfClose = true });

        var read = await ReadAllAsync(link).WaitAsync(Patience);

        Assert.Equal([ReceiveRequest.KindOneofCase.Open, ReceiveRequest.KindOneofCase.Credit, ReceiveRequest.KindOneofCase.Credit], read.Select(r => r.KindCase));
        Assert.Equal([2, 3], read.Skip(1).Select(r => r.Credit));
    }

    [Fact]
    public async Task ADetachedLink_ReadsNothingMore_AndItsReadThrowsCancelled()
    {
        using var session = new ReceiveSessionLinks(new NoResponses(), maxLinks: 10, CancellationToken.None);
        var link = session.Dispatch(Open(1))!;
        var requests = link.ReadRequestsAsync().GetAsyncEnumerator();
        Assert.True(await requests.MoveNextAsync());
        Assert.Equal(ReceiveRequest.KindOneofCase.Open, requests.Current.KindCase);

        session.Dispatch(Credit(1, 5)); // queued, and not read: the client is gone
        session.Dispatch(new LinkRequest { Link = 1, Detach = true });

        await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await requests.MoveNextAsync().AsTask().WaitAsync(Patience));
    }

    [Fact]
    public async Task AReadWaitingOnAQuietLink_EndsCancelled_WhenTheSessionsCallEnds()
    {
        using var call = new CancellationTokenSource();
        using var session = new ReceiveSessionLinks(new NoResponses(), maxLinks: 10, call.Token);
        var link = session.Dispatch(Open(1))!;
        var requests = link.ReadRequestsAsync().GetAsyncEnumerator();
        Assert.True(await requests.MoveNextAsync());

        var waiting = requests.MoveNextAsync().AsTask();
        Assert.False(waiting.IsCompleted);
        await call.CancelAsync();

        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting.WaitAsync(Patience));
    }

    private static async Task<List<ReceiveRequest>> ReadAllAsync(ReceiveSessionLinks.Link link)
    {
        var read = new List<ReceiveRequest>();
        await foreach (var request in link.ReadRequestsAsync())
        {
            read.Add(request);
        }
        return read;
    }

    private sealed class NoResponses : IServerStreamWriter<ReceiveSessionResponse>
    {
        public WriteOptions? WriteOptions { get; set; }

        public Task WriteAsync(ReceiveSessionResponse message) => Task.CompletedTask;
    }
}
