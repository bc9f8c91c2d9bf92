using Farm.Contracts;
using Google.Protobuf.Reflection;
using Grpc.Core;
using Grpc.Health.V1;
using ReflectionV1 = Grpc.Reflection.V1;
using ReflectionV1Alpha = Grpc.Reflection.V1Alpha;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A node speaks standard gRPC beyond Farm's own services: server reflection (both protocol
/// versions, as grpcurl and Postman use them) and the grpc.health.v1 health service.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class StandardGrpcTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    [Fact]
    public async Task ReflectionV1_ListsFarmServices_AndDescribesTheirFiles()
    {
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));
        using var call = new ReflectionV1.ServerReflection.ServerReflectionClient(channel).ServerReflectionInfo(deadline: DateTime.UtcNow + Patience);

        await call.RequestStream.WriteAsync(new ReflectionV1.ServerReflectionRequest { ListServices = "*" });
        Assert.True(await call.ResponseStream.MoveNext());
        var services = call.ResponseStream.Current.ListServicesResponse.Service.Select(s => s.Name).ToList();

        await call.RequestStream.WriteAsync(new ReflectionV1.ServerReflectionRequest { FileContainingSymbol = "farm.v1.Messaging.Send" });
        Assert.True(await call.ResponseStream.MoveNext());
        var files = call.ResponseStream.Current.FileDescriptorResponse.FileDescriptorProto
            .Select(bytes => FileDescriptorProto.Parser.ParseFrom(bytes)).ToList();

        await call.RequestStream.WriteAsync(new ReflectionV1.ServerReflectionRequest { FileByFilename = "farm/v1/nope.proto" });
        Assert.True(await call.ResponseStream.MoveNext());
        var missing = call.ResponseStream.Current;
        await call.RequestStream.CompleteAsync();
        Assert.False(await call.ResponseStream.MoveNext());

        Assert.Contains("farm.v1.Messaging", services);
        Assert.Contains("farm.v1.Management", services);
        Assert.Contains("farm.v1.NodeControl", services);
        Assert.Contains("grpc.health.v1.Health", services);
        Assert.Equal("farm/v1/messaging.proto", files[0].Name);
        Assert.Contains(files, f => f.Name == "farm/v1/messages.proto");
        Assert.Contains(files, f => f.Name == "google/protobuf/timestamp.proto");
        Assert.Equal((int)StatusCode.NotFound, missing.ErrorResponse.ErrorCode);
    }

    [Fact]
    public async Task ReflectionV1Alpha_StillAnswers_ForOlderTools()
    {
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));
        using var call = new ReflectionV1Alpha.ServerReflection.ServerReflectionClient(channel).ServerReflectionInfo(deadline: DateTime.UtcNow + Patience);

        await call.RequestStream.WriteAsync(new ReflectionV1Alpha.ServerReflectionRequest { ListServices = "*" });
        Assert.True(await call.ResponseStream.MoveNext());

        Assert.Contains("farm.v1.Messaging", call.ResponseStream.Current.ListServicesResponse.Service.Select(s => s.Name));
    }

    [Fact]
    public async Task HealthService_SaysServing_ForTheNodeAndForFarmServices()
    {
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));
        var health = new Health.HealthClient(channel);

        var node = await health.CheckAsync(new HealthCheckRequest(), deadline: DateTime.UtcNow + Patience);
        var messaging = await health.CheckAsync(new HealthCheckRequest { Service = "farm.v1.Messaging" }, deadline: DateTime.UtcNow + Patience);
        var unknown = await Assert.ThrowsAsync<RpcException>(() =>
            health.CheckAsync(new HealthCheckRequest { Service = "no.such.Service" }, deadline: DateTime.UtcNow + Patience).ResponseAsync);

        Assert.Equal(HealthCheckResponse.Types.ServingStatus.Serving, node.Status);
        Assert.Equal(HealthCheckResponse.Types.ServingStatus.Serving, messaging.Status);
        Assert.Equal(StatusCode.NotFound, unknown.StatusCode);
    }

    [Fact]
    public async Task AnUnknownMethod_IsUnimplemented()
    {
        using var channel = FarmChannels.Create(new Uri(fixture.Farm.Address));
        var method = new Method<Google.Protobuf.WellKnownTypes.Empty, Google.Protobuf.WellKnownTypes.Empty>(MethodType.Unary, "farm.v1.Messaging", "NoSuchMethod",
            Marshallers.Create(m => Google.Protobuf.MessageExtensions.ToByteArray(m), Google.Protobuf.WellKnownTypes.Empty.Parser.ParseFrom),
            Marshallers.Create(m => Google.Protobuf.MessageExtensions.ToByteArray(m), Google.Protobuf.WellKnownTypes.Empty.Parser.ParseFrom));

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            channel.CreateCallInvoker().AsyncUnaryCall(method, null, new CallOptions(deadline: DateTime.UtcNow + Patience), new Google.Protobuf.WellKnownTypes.Empty()).ResponseAsync);

        Assert.Equal(StatusCode.Unimplemented, error.StatusCode);
    }
}
