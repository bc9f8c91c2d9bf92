using Farm.Contracts.Reflection.V1Alpha;
using Google.Protobuf.Reflection;

namespace Farm.Contracts.Tests;

public sealed class ReflectionTests(RpcTestServer server) : IClassFixture<RpcTestServer>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    [Theory]
    [InlineData("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")]
    [InlineData("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")]
    public async Task Reflection_ListServicesAndFileContainingSymbol_DescribeFarmServices(string method)
    {
        await using var call = server.Channel.Duplex<ServerReflectionRequest, ServerReflectionResponse>(method, ServerReflectionResponse.Parser);
        await using var responses = call.ReadAllAsync().GetAsyncEnumerator();

        await call.WriteAsync(new ServerReflectionRequest { ListServices = "*" });
        var services = (await NextAsync(responses)).ListServicesResponse.Service.Select(s => s.Name).ToList();

        await call.WriteAsync(new ServerReflectionRequest { FileContainingSymbol = "farm.v1.Messaging.Send" });
        var files = (await NextAsync(responses)).FileDescriptorResponse.FileDescriptorProto
            .Select(bytes => FileDescriptorProto.Parser.ParseFrom(bytes)).ToList();

        await call.WriteAsync(new ServerReflectionRequest { FileByFilename = "farm/v1/nope.proto" });
        var missing = await NextAsync(responses);

        await call.CompleteAsync();
        Assert.False(await responses.MoveNextAsync().AsTask().WaitAsync(Patience));

        Assert.Contains("farm.v1.Messaging", services);
        Assert.Contains("farm.v1.Management", services);
        Assert.Contains("grpc.reflection.v1alpha.ServerReflection", services);
        Assert.Equal("farm/v1/messaging.proto", files[0].Name);
        Assert.Contains(files, f => f.Name == "farm/v1/messages.proto");
        Assert.Contains(files, f => f.Name == "google/protobuf/timestamp.proto");
        Assert.Equal(5, missing.ErrorResponse.ErrorCode);
    }

    private static async Task<ServerReflectionResponse> NextAsync(IAsyncEnumerator<ServerReflectionResponse> responses)
    {
        Assert.True(await responses.MoveNextAsync().AsTask().WaitAsync(Patience));
        return responses.Current;
    }
}
