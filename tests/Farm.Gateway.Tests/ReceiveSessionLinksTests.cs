using Farm.Contracts;
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

    /// <summary>
    /// A topic's message delivered to three links of a session in one response goes on the wire once
    /// when the client reads shared messages: the response carries it in shared_messages and each
    /// delivery names it. A message equal in content but another object (a fourth link's) is not
    /// compared, and goes whole. The deliveries read as before once written (a link may release them).
    /// </summary>
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task AMessageDeliveredToSeveralLinksInOneResponse_GoesOnceWhenTheClientReadsSharedMessages(bool clientReadsShared)
    {
        var responses = new HeldResponses();
        using var session = new ReceiveSessionLinks(responses, maxLinks: 10, CancellationToken.None) { SharesMessages = clientReadsShared };
        var links = Enumerable.Range(1, 5).Select(i => session.Dispatch(Open(i))!.Started()).ToList();
        var topicMessage = new Message { Body = Google.Protobuf.ByteString.CopyFrom(new byte[1024]), MessageId = "m1" };
        var lookalike = topicMessage.Clone();
        ReceiveResponse Delivery(Message message, int sequence) => new() { Messages = { new ReceivedMessage { Message = message, SequenceNumber = sequence, LockToken = Guid.NewGuid().ToString() } } };
        var sent = new[] { Delivery(topicMessage, 1), Delivery(topicMessage, 2), Delivery(topicMessage, 3), Delivery(topicMessage, 4), Delivery(lookalike, 5) };

        // The first write holds the stream, so the next four queue and go out together in the second.
        var first = links[0].WriteAsync(sent[0], CancellationToken.None);
        await responses.FirstWriteStarted.WaitAsync(Patience);
        var rest = links.Skip(1).Select((link, i) => link.WriteAsync(sent[i + 1], CancellationToken.None)).ToList();
        responses.Release();
        await Task.WhenAll(rest.Prepend(first)).WaitAsync(Patience);

        var second = ReceiveSessionResponse.Parser.ParseFrom(responses.Written[1]);
        Assert.Equal(4, second.Links.Count);
        var deliveries = second.Links.Select(l => Assert.Single(l.Response.Messages)).ToList();
        if (clientReadsShared)
        {
            Assert.Equal("m1", Assert.Single(second.SharedMessages).MessageId);
            Assert.All(deliveries.Take(3), d => Assert.Equal((1, (Message?)null), (d.SharedMessage, d.Message)));
            Assert.Equal(0, deliveries[3].SharedMessage);
            Assert.True(responses.Written[1].Length < 2 * 1024 + 512, $"{responses.Written[1].Length} bytes for three deliveries of one 1 KB body and a lookalike");
        }
        else
        {
            Assert.Empty(second.SharedMessages);
            Assert.All(deliveries, d => Assert.Equal(0, d.SharedMessage));
        }

        SharedMessages.Resolve(second);
        Assert.All(deliveries, d => Assert.Equal(topicMessage, d.Message));
        Assert.Equal([2L, 3L, 4L, 5L], deliveries.Select(d => d.SequenceNumber));
        // What the links handed over is as they gave it.
        Assert.All(sent.Take(4), r => Assert.Same(topicMessage, r.Messages[0].Message));
        Assert.All(sent, r => Assert.Equal(0, r.Messages[0].SharedMessage));
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

    /// <summary>Keeps each response's bytes as written; the first write waits for <see cref="Release"/>.</summary>
    private sealed class HeldResponses : IServerStreamWriter<ReceiveSessionResponse>
    {
        private readonly TaskCompletionSource _released = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private readonly TaskCompletionSource _firstStarted = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public WriteOptions? WriteOptions { get; set; }

        public List<byte[]> Written { get; } = [];

        public Task FirstWriteStarted => _firstStarted.Task;

        public void Release() => _released.TrySetResult();

        public async Task WriteAsync(ReceiveSessionResponse message)
        {
            lock (Written)
            {
                Written.Add(Google.Protobuf.MessageExtensions.ToByteArray(message));
            }
            _firstStarted.TrySetResult();
            await _released.Task;
        }
    }

    private sealed class NoResponses : IServerStreamWriter<ReceiveSessionResponse>
    {
        public WriteOptions? WriteOptions { get; set; }

        public Task WriteAsync(ReceiveSessionResponse message) => Task.CompletedTask;
    }
}
