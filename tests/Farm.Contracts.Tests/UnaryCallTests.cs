using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Farm.Broker.Rpc;
using Farm.Contracts.Rpc;
using Farm.Contracts.V1;
using Microsoft.Extensions.Logging;

namespace Farm.Contracts.Tests;

public sealed class UnaryCallTests(RpcTestServer server) : IClassFixture<RpcTestServer>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    [Fact]
    public async Task Unary_RoundTrip_ReturnsHandlersResponse()
    {
        var response = await server.Channel.UnaryAsync(RpcTestServer.PeekMethod,
            new PeekRequest { Entity = "echo", FromSequenceNumber = 7, MaxMessages = 3 }, PeekResponse.Parser);

        Assert.Equal([7L, 8L, 9L], response.Messages.Select(m => m.SequenceNumber));
        Assert.All(response.Messages, m => Assert.Equal("echo", m.Message.Body.ToStringUtf8()));
    }

    [Fact]
    public async Task Unary_WithHeaders_HandlerSeesThem()
    {
        var response = await server.Channel.UnaryAsync(RpcTestServer.PeekMethod, new PeekRequest { Entity = "header" }, PeekResponse.Parser,
            new CallOptions(Headers: new Dictionary<string, string> { ["x-test"] = "hello" }));

        Assert.Equal("hello", response.Messages.Single().Message.Body.ToStringUtf8());
    }

    [Fact]
    public async Task Unary_HandlerThrowsRpcException_TrailersOnlyResponseCarriesStatusDetailAndTrailers()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => server.Channel.UnaryAsync(RpcTestServer.PeekMethod,
            new PeekRequest { Entity = "fail" }, PeekResponse.Parser));

        Assert.Equal(RpcStatusCode.NotFound, error.StatusCode);
        Assert.Equal("Entity 'fail' not found: 100% gone, naïve ✓", error.Detail);
        Assert.Equal("FARM_ERROR_ENTITY_NOT_FOUND", error.FarmError);
        Assert.Equal("broker-2", error.Trailers[RpcException.FarmOwnerTrailer]);
        Assert.DoesNotContain("grpc-status", error.Trailers.Keys);
    }

    [Fact]
    public async Task Unary_HandlerThrowsOtherException_InternalWithMessageAndLogged()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => server.Channel.UnaryAsync(RpcTestServer.PeekMethod,
            new PeekRequest { Entity = "crash" }, PeekResponse.Parser));

        Assert.Equal(RpcStatusCode.Internal, error.StatusCode);
        Assert.Equal("boom", error.Detail);
        Assert.Contains(server.Logs.Entries, e => e.Level == LogLevel.Error && e.Exception?.Message == "boom");
    }

    [Fact]
    public async Task Unary_UnknownMethod_Unimplemented()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => server.Channel.UnaryAsync("/farm.v1.Messaging/NoSuchMethod",
            new PeekRequest(), PeekResponse.Parser));

        Assert.Equal(RpcStatusCode.Unimplemented, error.StatusCode);
        Assert.Equal("Method /farm.v1.Messaging/NoSuchMethod is not implemented", error.Detail);
    }

    [Fact]
    public async Task Unary_ClosedPort_UnavailableQuickly()
    {
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        using var channel = new RpcChannel(new Uri($"http://127.0.0.1:{port}"));

        var stopwatch = Stopwatch.StartNew();
        var error = await Assert.ThrowsAsync<RpcException>(() => channel.UnaryAsync(RpcTestServer.PeekMethod, new PeekRequest(), PeekResponse.Parser));

        Assert.Equal(RpcStatusCode.Unavailable, error.StatusCode);
        Assert.Contains("refused", error.Detail, StringComparison.OrdinalIgnoreCase);
        Assert.True(stopwatch.Elapsed < channel.Options.ConnectTimeout / 2, $"took {stopwatch.Elapsed}");
    }

    [Fact]
    public async Task Unary_DeadlinePasses_DeadlineExceededAndHandlerCancelled()
    {
        var clock = new ManualTimeProvider();
        using var channel = new RpcChannel(server.Address, new RpcChannelOptions { TimeProvider = clock });
        var entity = $"wait:{Guid.NewGuid()}";

        var call = channel.UnaryAsync(RpcTestServer.PeekMethod, new PeekRequest { Entity = entity }, PeekResponse.Parser,
            new CallOptions(Deadline: clock.GetUtcNow().UtcDateTime.AddMinutes(1)));
        await server.WhenStarted(entity).WaitAsync(Patience);
        clock.Advance(TimeSpan.FromMinutes(1));

        var error = await Assert.ThrowsAsync<RpcException>(() => call.WaitAsync(Patience));
        Assert.Equal(RpcStatusCode.DeadlineExceeded, error.StatusCode);
        await server.WhenCancelled(entity).WaitAsync(Patience);
    }

    [Fact]
    public async Task Unary_DeadlineAlreadyPassed_DeadlineExceeded()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => server.Channel.UnaryAsync(RpcTestServer.PeekMethod,
            new PeekRequest { Entity = "echo" }, PeekResponse.Parser, new CallOptions(Deadline: DateTime.UtcNow.AddSeconds(-1))));

        Assert.Equal(RpcStatusCode.DeadlineExceeded, error.StatusCode);
    }

    [Fact]
    public async Task Unary_CallerCancels_OperationCanceledAndHandlerCancelled()
    {
        var entity = $"wait:{Guid.NewGuid()}";
        using var cancellation = new CancellationTokenSource();

        var call = server.Channel.UnaryAsync(RpcTestServer.PeekMethod, new PeekRequest { Entity = entity }, PeekResponse.Parser,
            new CallOptions(CancellationToken: cancellation.Token));
        await server.WhenStarted(entity).WaitAsync(Patience);
        await cancellation.CancelAsync();

        var error = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => call);
        Assert.Equal(cancellation.Token, error.CancellationToken);
        await server.WhenCancelled(entity).WaitAsync(Patience);
    }

    [Fact]
    public async Task Unary_ManyConcurrentCalls_AllSucceed()
    {
        var calls = Enumerable.Range(0, 500).Select(i => server.Channel.UnaryAsync(RpcTestServer.PeekMethod,
            new PeekRequest { Entity = $"echo-{i}", FromSequenceNumber = i, MaxMessages = 1 }, PeekResponse.Parser));

        var responses = await Task.WhenAll(calls).WaitAsync(TimeSpan.FromSeconds(30));

        Assert.Equal(Enumerable.Range(0, 500).Select(i => (long)i), responses.Select(r => r.Messages.Single().SequenceNumber));
    }

    [Fact]
    public async Task Unary_RequestOverServerMaximum_ResourceExhausted()
    {
        var request = new PeekRequest { Entity = new string('x', RpcEndpoints.MaxRequestMessageSize) };

        var error = await Assert.ThrowsAsync<RpcException>(() => server.Channel.UnaryAsync(RpcTestServer.PeekMethod, request, PeekResponse.Parser));

        Assert.Equal(RpcStatusCode.ResourceExhausted, error.StatusCode);
    }

    [Fact]
    public async Task Unary_ResponseOverClientMaximum_ResourceExhausted()
    {
        using var channel = new RpcChannel(server.Address, new RpcChannelOptions { MaxReceiveMessageSize = 1024 });

        var small = await channel.UnaryAsync(RpcTestServer.PeekMethod, new PeekRequest { Entity = "big", FromSequenceNumber = 1000 }, PeekResponse.Parser);
        var error = await Assert.ThrowsAsync<RpcException>(() => channel.UnaryAsync(RpcTestServer.PeekMethod,
            new PeekRequest { Entity = "big", FromSequenceNumber = 2048 }, PeekResponse.Parser));

        Assert.Equal(1000, small.Messages.Single().Message.Body.Length);
        Assert.Equal(RpcStatusCode.ResourceExhausted, error.StatusCode);
    }
}
