using System.Net;
using System.Net.Http.Headers;
using Farm.Contracts.Rpc;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Contracts.Tests;

/// <summary>What the server puts on the wire, seen through a plain HttpClient rather than RpcChannel.</summary>
public sealed class WireProtocolTests(RpcTestServer server) : IClassFixture<RpcTestServer>, IDisposable
{
    private readonly HttpClient _http = new();

    public void Dispose() => _http.Dispose();

    [Fact]
    public async Task Server_Error_IsTrailersOnlyWithPercentEncodedMessage()
    {
        using var response = await PostAsync(new PeekRequest { Entity = "fail" });

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal("application/grpc", response.Content.Headers.ContentType?.MediaType);
        Assert.Equal("5", response.Headers.GetValues("grpc-status").Single());
        Assert.Equal("Entity 'fail' not found: 100%25 gone, na%C3%AFve %E2%9C%93", response.Headers.GetValues("grpc-message").Single());
        Assert.Equal("FARM_ERROR_ENTITY_NOT_FOUND", response.Headers.GetValues("farm-error").Single());
        Assert.Empty(await response.Content.ReadAsByteArrayAsync());
    }

    [Fact]
    public async Task Server_Success_SendsOneFrameThenStatusTrailer()
    {
        using var response = await PostAsync(new PeekRequest { Entity = "echo", MaxMessages = 1 });
        var body = await response.Content.ReadAsByteArrayAsync();

        Assert.Equal(0, body[0]);
        Assert.Equal(body.Length - 5, (body[1] << 24) | (body[2] << 16) | (body[3] << 8) | body[4]);
        Assert.Equal("echo", PeekResponse.Parser.ParseFrom(body.AsSpan(5)).Messages.Single().Message.Body.ToStringUtf8());
        Assert.Equal("0", response.TrailingHeaders.GetValues("grpc-status").Single());
    }

    [Fact]
    public async Task Server_GrpcTimeoutPasses_DeadlineExceeded()
    {
        var entity = $"wait:{Guid.NewGuid()}";
        using var response = await PostAsync(new PeekRequest { Entity = entity }, timeout: "200m");

        Assert.Equal(((int)RpcStatusCode.DeadlineExceeded).ToString(), response.Headers.GetValues("grpc-status").Single());
        Assert.True(server.WhenCancelled(entity).IsCompleted);
    }

    [Fact]
    public async Task Server_NotGrpcContentType_UnsupportedMediaType()
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(server.Address, RpcTestServer.PeekMethod))
        {
            Version = HttpVersion.Version20,
            VersionPolicy = HttpVersionPolicy.RequestVersionExact,
            Content = new StringContent("{}", new MediaTypeHeaderValue("application/json")),
        };
        using var response = await _http.SendAsync(request);

        Assert.Equal(HttpStatusCode.UnsupportedMediaType, response.StatusCode);
    }

    private async Task<HttpResponseMessage> PostAsync(IMessage message, string? timeout = null)
    {
        var bytes = message.ToByteArray();
        var frame = new byte[5 + bytes.Length];
        frame[1] = (byte)(bytes.Length >> 24);
        frame[2] = (byte)(bytes.Length >> 16);
        frame[3] = (byte)(bytes.Length >> 8);
        frame[4] = (byte)bytes.Length;
        bytes.CopyTo(frame, 5);

        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(server.Address, RpcTestServer.PeekMethod))
        {
            Version = HttpVersion.Version20,
            VersionPolicy = HttpVersionPolicy.RequestVersionExact,
            Content = new ByteArrayContent(frame) { Headers = { ContentType = new MediaTypeHeaderValue("application/grpc") } },
        };
        request.Headers.TE.ParseAdd("trailers");
        if (timeout is not null)
        {
            request.Headers.Add("grpc-timeout", timeout);
        }

        return await _http.SendAsync(request);
    }
}
