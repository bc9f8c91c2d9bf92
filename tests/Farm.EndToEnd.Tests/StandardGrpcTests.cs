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

    /// <summary>
    /// A receive stream the node ends (its queue deleted) while the client still holds its request
    /// side open leaves no read of that request stream behind: Kestrel reuses the HTTP/2 stream for
    /// the next calls on the connection, and a leftover read failed one of them with INTERNAL
    /// "Reading is already in progress" (a send failing during a drain, now and then).
    /// </summary>
    [Fact]
    public async Task AReceiveStreamEndedByTheNode_LeavesNoReadBehind_ForTheNextCallsOnTheConnection()
    {
        // A farm of its own: its log then holds only this test's calls.
        await using var farm = await LocalFarm.StartAsync();
        using var admin = new Farm.Client.FarmAdministrationClient(farm.ConnectionString);
        var gone = "gone-" + Guid.NewGuid().ToString("N")[..8];
        var kept = "kept-" + Guid.NewGuid().ToString("N")[..8];
        await admin.CreateQueueAsync(new Farm.Client.CreateQueueOptions(gone));
        await admin.CreateQueueAsync(new Farm.Client.CreateQueueOptions(kept));
        using var channel = FarmChannels.Create(new Uri(farm.Address));
        var messaging = new Farm.Contracts.V1.Messaging.MessagingClient(channel);

        for (var round = 0; round < 5; round++)
        {
            var name = $"{gone}-{round}";
            await admin.CreateQueueAsync(new Farm.Client.CreateQueueOptions(name));
            await messaging.SendAsync(new Farm.Contracts.V1.SendRequest { Entity = name, Messages = { new Farm.Contracts.V1.Message() } });
            using var stream = messaging.Receive(deadline: DateTime.UtcNow + Patience);
            await stream.RequestStream.WriteAsync(new Farm.Contracts.V1.ReceiveRequest
            {
                Open = new Farm.Contracts.V1.ReceiveOpen { Entity = name, Credit = 1, Mode = Farm.Contracts.V1.ReceiveMode.PeekLock },
            });
            // The stream is open on the node once its one message came. Credit keeps coming while
            // the node ends the stream, so its reader is in the middle of reading when it ends.
            Assert.True(await stream.ResponseStream.MoveNext());
            using var stopCredit = new CancellationTokenSource();
            var credit = Task.Run(async () =>
            {
                while (!stopCredit.IsCancellationRequested)
                {
                    await stream.RequestStream.WriteAsync(new Farm.Contracts.V1.ReceiveRequest { Credit = 1 });
                }
            });
            await admin.DeleteQueueAsync(name);
            var ended = await Assert.ThrowsAsync<RpcException>(async () => await stream.ResponseStream.MoveNext());
            Assert.Equal(StatusCode.NotFound, ended.StatusCode);
            await stopCredit.CancelAsync();
            await credit.ContinueWith(_ => { }); // the stream is over: its writes may fail

            // The request side is still open; the next calls on this connection must all work.
            for (var i = 0; i < 20; i++)
            {
                var sent = await messaging.SendAsync(new Farm.Contracts.V1.SendRequest
                {
                    Entity = kept,
                    Messages = { new Farm.Contracts.V1.Message { Body = Google.Protobuf.ByteString.CopyFromUtf8($"{round}-{i}") } },
                }, deadline: DateTime.UtcNow + Patience);
                Assert.Single(sent.SequenceNumbers);
            }
        }

        // And no read of an ended call's request stream happened at all (grpc-dotnet logs each as
        // "Error reading message" with the disposed request stream).
        var log = await File.ReadAllTextAsync(Path.Combine(farm.DataDirectory, "logs", "node-1.log"));
        Assert.DoesNotContain("Object name: 'HttpRequestStream'", log, StringComparison.Ordinal);
    }

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
