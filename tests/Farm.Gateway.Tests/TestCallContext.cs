using Farm.Contracts;
using Grpc.Core;

namespace Farm.Gateway.Tests;

/// <summary>A server call context for calling services and interceptors without a server.</summary>
internal sealed class TestCallContext(Metadata? requestHeaders = null, CancellationToken cancellationToken = default, DateTime? deadline = null) : ServerCallContext
{
    public static TestCallContext Direct() => new(FarmMetadata.DirectHeaders());

    protected override string MethodCore => "/farm.v1.Messaging/Test";
    protected override string HostCore => "localhost";
    protected override string PeerCore => "ipv4:127.0.0.1:1";
    protected override DateTime DeadlineCore => deadline ?? DateTime.MaxValue;
    protected override Metadata RequestHeadersCore => requestHeaders ?? [];
    protected override CancellationToken CancellationTokenCore => cancellationToken;
    protected override Metadata ResponseTrailersCore { get; } = [];
    protected override Status StatusCore { get; set; }
    protected override WriteOptions? WriteOptionsCore { get; set; }
    protected override AuthContext AuthContextCore => new(null, []);

    protected override ContextPropagationToken CreatePropagationTokenCore(ContextPropagationOptions? options) => throw new NotSupportedException();

    protected override Task WriteResponseHeadersAsyncCore(Metadata responseHeaders) => Task.CompletedTask;
}
