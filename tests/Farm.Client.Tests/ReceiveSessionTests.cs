using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Client.Tests;

/// <summary>
/// The receive session's own bookkeeping, against a ReceiveSession the test answers by hand (a fake
/// CallInvoker; the real session against a node is in the end-to-end ReceiveSessionTests).
/// </summary>
public sealed class ReceiveSessionTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    private static HandAnsweredStreams<ReceiveSessionRequest, ReceiveSessionResponse> NewInvoker() => new(Patience);

    private static ReceiveRequest Open(string entity) => new() { Open = new ReceiveOpen { Entity = entity, Mode = ReceiveMode.PeekLock, Credit = 1 } };

    /// <summary>Reads the session's requests until <paramref name="count"/> frames came.</summary>
    private static async Task<List<LinkRequest>> FramesAsync(HandAnsweredCall<ReceiveSessionRequest, ReceiveSessionResponse> call, int count)
    {
        var frames = new List<LinkRequest>();
        while (frames.Count < count)
        {
            frames.AddRange((await call.NextRequestAsync(Patience)).Links);
        }
        return frames;
    }

    /// <summary>
    /// A link the node ends with a farm failure fails with its "farm-error" and "farm-owner" too, as
    /// its Receive call would: an overloaded node's SERVICE_BUSY (RESOURCE_EXHAUSTED) is busy and
    /// retried, not read by its status alone as QUOTA_EXCEEDED (which ended the receiver at once),
    /// and a NOT_OWNER names the owner.
    /// </summary>
    [Fact]
    public async Task ALinkEndedWithAFarmFailure_KeepsItsFarmErrorAndOwner()
    {
        var invoker = NewInvoker();
        using var session = new ReceiveSession(new Messaging.MessagingClient(invoker), null);
        using var busy = session.Receive(new CallOptions());
        using var moved = session.Receive(new CallOptions());
        await busy.RequestStream.WriteAsync(Open("busy"));
        await moved.RequestStream.WriteAsync(Open("moved"));
        var call = await invoker.NextCallAsync();
        var idOf = (await FramesAsync(call, 2)).ToDictionary(f => f.Request.Open.Entity, f => f.Link);

        await call.Answers.Writer.WriteAsync(new ReceiveSessionResponse
        {
            Links =
            {
                new LinkResponse
                {
                    Link = idOf["busy"], Ended = true,
                    Failure = new CallFailure { StatusCode = (int)StatusCode.ResourceExhausted, Detail = "behind its work", ErrorCode = FarmErrorCode.ServiceBusy },
                },
                new LinkResponse
                {
                    Link = idOf["moved"], Ended = true,
                    Failure = new CallFailure { StatusCode = (int)StatusCode.Unavailable, Detail = "moved", ErrorCode = FarmErrorCode.NotOwner, OwnerAddress = "http://10.0.0.2:5480" },
                },
            },
        });

        var busyEnd = await Assert.ThrowsAsync<RpcException>(() => busy.ResponseStream.MoveNext(CancellationToken.None).WaitAsync(Patience));
        var movedEnd = await Assert.ThrowsAsync<RpcException>(() => moved.ResponseStream.MoveNext(CancellationToken.None).WaitAsync(Patience));

        Assert.Equal(StatusCode.ResourceExhausted, busyEnd.StatusCode);
        Assert.Equal(FarmFailureReason.ServiceBusy, FarmErrors.FromRpc(busyEnd, "busy").Reason);
        Assert.True(FarmRetryPolicy.IsTransient(busyEnd));
        Assert.Equal("SERVICE_BUSY", busy.GetTrailers().GetValue(FarmMetadata.ErrorTrailer));
        Assert.Equal(FarmFailureReason.NotOwner, FarmErrors.FromRpc(movedEnd, "moved").Reason);
        Assert.Equal("http://10.0.0.2:5480", movedEnd.FarmOwner());
    }

    /// <summary>
    /// Two receive links share one session call: each gets only its own responses, one the node
    /// ends with a failure fails with that status (as its Receive call would), the other goes on,
    /// and a link the receiver disposes is detached on the session.
    /// </summary>
    [Fact]
    public async Task LinksShareOneSession_EachGetsItsOwnFrames_AndEndsOnItsOwn()
    {
        var invoker = NewInvoker();
        using var session = new ReceiveSession(new Messaging.MessagingClient(invoker), null);

        using var a = session.Receive(new CallOptions());
        using var b = session.Receive(new CallOptions());
        await a.RequestStream.WriteAsync(Open("a"));
        await b.RequestStream.WriteAsync(Open("b"));
        var call = await invoker.NextCallAsync();
        var opens = await FramesAsync(call, 2);
        var idOf = opens.ToDictionary(f => f.Request.Open.Entity, f => f.Link);
        Assert.NotEqual(idOf["a"], idOf["b"]);

        await call.Answers.Writer.WriteAsync(new ReceiveSessionResponse
        {
            Links =
            {
                new LinkResponse { Link = idOf["b"], Response = new ReceiveResponse { Messages = { new ReceivedMessage { SequenceNumber = 2 } } } },
                new LinkResponse { Link = idOf["a"], Response = new ReceiveResponse { Messages = { new ReceivedMessage { SequenceNumber = 1 } } } },
                new LinkResponse
                {
                    Link = idOf["a"], Ended = true,
                    Failure = new RpcException(new Status(StatusCode.NotFound, "no such entity")).ToCallFailure(),
                },
            },
        });

        Assert.True(await a.ResponseStream.MoveNext(CancellationToken.None).WaitAsync(Patience));
        Assert.Equal(1, a.ResponseStream.Current.Messages.Single().SequenceNumber);
        var ended = await Assert.ThrowsAsync<RpcException>(() => a.ResponseStream.MoveNext(CancellationToken.None).WaitAsync(Patience));
        Assert.Equal(StatusCode.NotFound, ended.StatusCode);
        Assert.Equal(StatusCode.NotFound, a.GetStatus().StatusCode);

        Assert.True(await b.ResponseStream.MoveNext(CancellationToken.None).WaitAsync(Patience));
        Assert.Equal(2, b.ResponseStream.Current.Messages.Single().SequenceNumber);
        await b.RequestStream.WriteAsync(new ReceiveRequest { Credit = 3 });
        var credit = Assert.Single(await FramesAsync(call, 1));
        Assert.Equal((idOf["b"], 3), (credit.Link, credit.Request.Credit));

        b.Dispose();
        var detach = Assert.Single(await FramesAsync(call, 1));
        Assert.Equal(idOf["b"], detach.Link);
        Assert.True(detach.Detach);
    }

    /// <summary>
    /// A session the node ends fails every link it held as UNAVAILABLE (each receiver reopens its
    /// link), and the next link opens a new session.
    /// </summary>
    [Fact]
    public async Task ASessionThatEnds_FailsItsLinksAsUnavailable_AndTheNextLinkOpensAnother()
    {
        var invoker = NewInvoker();
        using var session = new ReceiveSession(new Messaging.MessagingClient(invoker), null);

        using var a = session.Receive(new CallOptions());
        await a.RequestStream.WriteAsync(Open("a"));
        var first = await invoker.NextCallAsync();
        await FramesAsync(first, 1);
        first.Answers.Writer.Complete();

        var error = await Assert.ThrowsAsync<RpcException>(() => a.ResponseStream.MoveNext(CancellationToken.None).WaitAsync(Patience));
        Assert.Equal(StatusCode.Unavailable, error.StatusCode);
        await Assert.ThrowsAsync<RpcException>(() => a.RequestStream.WriteAsync(new ReceiveRequest { Credit = 1 }));

        using var again = session.Receive(new CallOptions());
        await again.RequestStream.WriteAsync(Open("a"));
        var second = await invoker.NextCallAsync();
        var open = Assert.Single(await FramesAsync(second, 1));
        await second.Answers.Writer.WriteAsync(new ReceiveSessionResponse
        {
            Links = { new LinkResponse { Link = open.Link, Response = new ReceiveResponse { Messages = { new ReceivedMessage { SequenceNumber = 7 } } } } },
        });
        Assert.True(await again.ResponseStream.MoveNext(CancellationToken.None).WaitAsync(Patience));
        Assert.Equal(7, again.ResponseStream.Current.Messages.Single().SequenceNumber);
    }
}
