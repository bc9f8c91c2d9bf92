using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Client.Tests;

/// <summary>
/// A Settle or Send call that failed with its outcome unknown goes again marked a repeat: the
/// broker answers settlements the lost try did as done (not MessageLockLost), and a send the lost
/// try stored (maybe on a node that failed since) with that try's sequence numbers. The repeat is
/// a copy: the failed try may still be writing the request it was given.
/// </summary>
public sealed class SettleRepeatTests
{
    private static FarmConnection Connection(int maxRetries) =>
        // Nothing listens on port 1: a try that reaches the network fails as a broken connection does.
        new(FarmConnectionString.Parse("Endpoint=http://127.0.0.1:1"),
            new FarmClientOptions { RetryOptions = new FarmRetryOptions { MaxRetries = maxRetries, Delay = TimeSpan.FromMilliseconds(1), TryTimeout = TimeSpan.FromSeconds(5) } });

    [Fact]
    public async Task TheTryAfterAFailedSend_CarriesAMarkedCopy_TheFirstTrysRequestIsLeftAlone()
    {
        using var connection = Connection(maxRetries: 2);
        var tried = new List<SendRequest>();
        // The send's own call, answered here: the first try fails with its outcome unknown.
        var send = FarmCalls.Send with
        {
            Invoke = (_, request, _) =>
            {
                tried.Add(request);
                var answer = tried.Count == 1
                    ? Task.FromException<SendResponse>(new RpcException(new Status(StatusCode.Unavailable, "connection reset")))
                    : Task.FromResult(new SendResponse { SequenceNumbers = { 42 } });
                return new AsyncUnaryCall<SendResponse>(answer, Task.FromResult(new Metadata()), () => Status.DefaultSuccess, () => [], () => { });
            },
        };
        var request = new SendRequest { Entity = "q", ProducerId = "p", SendId = 1 };

        var response = await connection.UnaryAsync(send, request, "q", CancellationToken.None);

        Assert.Equal([42L], response.SequenceNumbers);
        Assert.Equal(2, tried.Count);
        Assert.Same(request, tried[0]);
        Assert.False(request.Repeat);
        Assert.Equal(new SendRequest { Entity = "q", ProducerId = "p", SendId = 1, Repeat = true }, tried[1]);
    }

    [Fact]
    public async Task ASettleOrSendThatFailed_IsMarkedARepeat_OtherCallsGoAgainAsTheyWere()
    {
        var settle = new SettleRequest { Entity = "q", Settlements = { new Settlement { LockToken = Guid.NewGuid().ToString(), Disposition = Disposition.Complete } } };
        var send = new SendRequest { Entity = "q", ProducerId = "p", SendId = 1 };
        var peek = new PeekRequest { Entity = "q", MaxMessages = 1 };

        Assert.True(FarmCalls.Settle.Repeat(settle).Repeat);
        Assert.True(FarmCalls.Send.Repeat(send).Repeat);
        Assert.Same(peek, FarmCalls.Peek.Repeat(peek));
        Assert.False(settle.Repeat);
        Assert.False(send.Repeat);

        // And over a real (refused) connection the call fails after its tries, as before.
        using var connection = Connection(maxRetries: 0);
        await Assert.ThrowsAsync<FarmException>(() => connection.UnaryAsync(FarmCalls.Send, send, "q", CancellationToken.None));
        Assert.False(send.Repeat);
    }
}
