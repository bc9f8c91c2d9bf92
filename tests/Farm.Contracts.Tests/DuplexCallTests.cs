using Farm.Contracts.Rpc;
using Farm.Contracts.V1;

namespace Farm.Contracts.Tests;

public sealed class DuplexCallTests(RpcTestServer server) : IClassFixture<RpcTestServer>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    [Fact]
    public async Task Duplex_ServerPushesPerCredit_HalfCloseEndsCall()
    {
        await using var call = server.Channel.Duplex<ReceiveRequest, ReceiveResponse>(RpcTestServer.ReceiveMethod, ReceiveResponse.Parser);
        await using var responses = call.ReadAllAsync().GetAsyncEnumerator();

        await call.WriteAsync(new ReceiveRequest { Open = new ReceiveOpen { Entity = "queue", Credit = 2 } });
        Assert.Equal([1L, 2L], await TakeAsync(responses, 2));

        await call.WriteAsync(new ReceiveRequest { Credit = 3 });
        Assert.Equal([3L, 4L, 5L], await TakeAsync(responses, 3));

        await call.CompleteAsync();
        Assert.False(await responses.MoveNextAsync().AsTask().WaitAsync(Patience));
    }

    [Fact]
    public async Task Duplex_ServerFailsAfterAMessage_StatusDetailAndTrailersArriveInTrailers()
    {
        await using var call = server.Channel.Duplex<ReceiveRequest, ReceiveResponse>(RpcTestServer.ReceiveMethod, ReceiveResponse.Parser);
        await call.WriteAsync(new ReceiveRequest { Open = new ReceiveOpen { Entity = "fail-after-one", Credit = 5 } });

        var received = new List<ReceiveResponse>();
        var error = await Assert.ThrowsAsync<RpcException>(async () =>
        {
            await foreach (var response in call.ReadAllAsync().WithCancellation(new CancellationTokenSource(Patience).Token))
            {
                received.Add(response);
            }
        });

        Assert.Single(received);
        Assert.Equal(RpcStatusCode.FailedPrecondition, error.StatusCode);
        Assert.Equal("Not the owner any more.", error.Detail);
        Assert.Equal("FARM_ERROR_NOT_OWNER", error.FarmError);
        Assert.Equal("broker-3", error.Trailers[RpcException.FarmOwnerTrailer]);

        // Once the call has failed, writing reports that failure.
        var writeError = await Assert.ThrowsAsync<RpcException>(() => call.WriteAsync(new ReceiveRequest { Credit = 1 }).AsTask());
        Assert.Same(error, writeError);
    }

    [Fact]
    public async Task Duplex_Dispose_CancelsServerHandler()
    {
        var entity = $"hold:{Guid.NewGuid()}";
        var call = server.Channel.Duplex<ReceiveRequest, ReceiveResponse>(RpcTestServer.ReceiveMethod, ReceiveResponse.Parser);
        await call.WriteAsync(new ReceiveRequest { Open = new ReceiveOpen { Entity = entity, Credit = 1 } });
        await server.WhenStarted(entity).WaitAsync(Patience);

        await call.DisposeAsync();

        await server.WhenCancelled(entity).WaitAsync(Patience);
    }

    [Fact]
    public async Task Duplex_CallerCancels_ReadThrowsOperationCanceled()
    {
        var entity = $"hold:{Guid.NewGuid()}";
        using var cancellation = new CancellationTokenSource();
        await using var call = server.Channel.Duplex<ReceiveRequest, ReceiveResponse>(RpcTestServer.ReceiveMethod, ReceiveResponse.Parser,
            new CallOptions(CancellationToken: cancellation.Token));
        await call.WriteAsync(new ReceiveRequest { Open = new ReceiveOpen { Entity = entity, Credit = 1 } });
        await server.WhenStarted(entity).WaitAsync(Patience);

        var reading = Assert.ThrowsAnyAsync<OperationCanceledException>(async () =>
        {
            await foreach (var unused in call.ReadAllAsync())
            {
            }
        });
        await cancellation.CancelAsync();

        await reading.WaitAsync(Patience);
        await server.WhenCancelled(entity).WaitAsync(Patience);
    }

    [Fact]
    public async Task Duplex_DeadlinePasses_DeadlineExceededAndHandlerCancelled()
    {
        var clock = new ManualTimeProvider();
        using var channel = new RpcChannel(server.Address, new RpcChannelOptions { TimeProvider = clock });
        var entity = $"hold:{Guid.NewGuid()}";
        await using var call = channel.Duplex<ReceiveRequest, ReceiveResponse>(RpcTestServer.ReceiveMethod, ReceiveResponse.Parser,
            new CallOptions(Deadline: clock.GetUtcNow().UtcDateTime.AddMinutes(1)));
        await call.WriteAsync(new ReceiveRequest { Open = new ReceiveOpen { Entity = entity, Credit = 1 } });
        await server.WhenStarted(entity).WaitAsync(Patience);

        var reading = Assert.ThrowsAsync<RpcException>(async () =>
        {
            await foreach (var unused in call.ReadAllAsync())
            {
            }
        });
        clock.Advance(TimeSpan.FromMinutes(1));

        var error = await reading.WaitAsync(Patience);
        Assert.Equal(RpcStatusCode.DeadlineExceeded, error.StatusCode);
        await server.WhenCancelled(entity).WaitAsync(Patience);
    }

    [Fact]
    public async Task Duplex_UnknownMethod_Unimplemented()
    {
        await using var call = server.Channel.Duplex<ReceiveRequest, ReceiveResponse>("/farm.v1.Messaging/NoSuchStream", ReceiveResponse.Parser);

        var error = await Assert.ThrowsAsync<RpcException>(async () =>
        {
            await foreach (var unused in call.ReadAllAsync().WithCancellation(new CancellationTokenSource(Patience).Token))
            {
            }
        });

        Assert.Equal(RpcStatusCode.Unimplemented, error.StatusCode);
    }

    [Fact]
    public async Task Duplex_ClosedPort_WriteAndReadUnavailable()
    {
        var listener = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, 0);
        listener.Start();
        var port = ((System.Net.IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        using var channel = new RpcChannel(new Uri($"http://127.0.0.1:{port}"));
        await using var call = channel.Duplex<ReceiveRequest, ReceiveResponse>(RpcTestServer.ReceiveMethod, ReceiveResponse.Parser);

        var writeError = await Assert.ThrowsAsync<RpcException>(() => call.WriteAsync(new ReceiveRequest { Credit = 1 }).AsTask().WaitAsync(Patience));
        var readError = await Assert.ThrowsAsync<RpcException>(async () =>
        {
            await foreach (var unused in call.ReadAllAsync())
            {
            }
        });

        Assert.Equal(RpcStatusCode.Unavailable, writeError.StatusCode);
        Assert.Equal(RpcStatusCode.Unavailable, readError.StatusCode);
    }

    private static async Task<List<long>> TakeAsync(IAsyncEnumerator<ReceiveResponse> responses, int count)
    {
        var sequenceNumbers = new List<long>();
        for (var i = 0; i < count; i++)
        {
            Assert.True(await responses.MoveNextAsync().AsTask().WaitAsync(Patience));
            sequenceNumbers.AddRange(responses.Current.Messages.Select(m => m.SequenceNumber));
        }

        return sequenceNumbers;
    }
}
