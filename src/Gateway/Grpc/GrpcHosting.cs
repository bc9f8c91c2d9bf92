using System.Net;
using Grpc.AspNetCore.Server.Model;
using Farm.Contracts;
using Farm.Gateway.Hosting;
using Farm.Gateway.Management;
using Farm.Gateway.Routing;
using Microsoft.AspNetCore.Server.Kestrel.Core;

namespace Farm.Gateway.Grpc;

/// <summary>How a node serves gRPC: Kestrel's HTTP/2 listener, the Grpc.AspNetCore services and their limits.</summary>
internal static class GrpcHosting
{
    /// <summary>
    /// Listens for gRPC on <paramref name="address"/>:<paramref name="port"/> (0: any free port) over
    /// HTTP/2 cleartext with prior knowledge, the way gRPC clients connect to an http:// address.
    /// </summary>
    public static ListenOptions ListenGrpc(this KestrelServerOptions options, IPAddress address, int port)
    {
        var http2 = options.Limits.Http2;
        // Every open receive stream holds an HTTP/2 stream; the default of 100 per connection
        // would make a client with many receivers queue or open connection after connection.
        http2.MaxStreamsPerConnection = 1000;
        // The 64-128 KB defaults cap one stream at a window per round trip; batches of messages
        // need more in flight to fill the link.
        http2.InitialConnectionWindowSize = 8 * 1024 * 1024;
        http2.InitialStreamWindowSize = 4 * 1024 * 1024;
        // Notice dead clients on idle receive streams, so their credit and locks are released.
        http2.KeepAlivePingDelay = TimeSpan.FromSeconds(10);
        http2.KeepAlivePingTimeout = TimeSpan.FromSeconds(10);
        // gRPC streams live for minutes or hours and idle between messages; each message is limited instead.
        options.Limits.MinRequestBodyDataRate = null;
        options.Limits.MaxRequestBodySize = null;

        ListenOptions? grpc = null;
        options.Listen(address, port, listen =>
        {
            listen.Protocols = HttpProtocols.Http2;
            grpc = listen;
        });
        return grpc!;
    }

    /// <summary>The HTTP/1.1 listener Prometheus scrapes (cleartext HTTP/2 cannot share a port with HTTP/1.1).</summary>
    public static ListenOptions ListenMetrics(this KestrelServerOptions options, IPAddress address, int port)
    {
        ListenOptions? metrics = null;
        options.Listen(address, port, listen =>
        {
            listen.Protocols = HttpProtocols.Http1;
            metrics = listen;
        });
        return metrics!;
    }

    /// <summary>
    /// http://host:port of a started listener, with the port the OS picked for port 0 and a reachable
    /// host for "any"; <paramref name="advertiseHost"/>, when given, is the host others reach it by.
    /// </summary>
    public static string AddressOf(ListenOptions listener, string? advertiseHost = null)
    {
        var endpoint = listener.IPEndPoint!;
        return $"http://{HostOf(endpoint, advertiseHost)}:{endpoint.Port}";
    }

    /// <summary>The host part of a bound endpoint's address, as <see cref="AddressOf"/> writes it (IPv6 in brackets).</summary>
    public static string HostOf(IPEndPoint endpoint, string? advertiseHost) =>
        advertiseHost is not null ? (advertiseHost.Contains(':', StringComparison.Ordinal) ? $"[{advertiseHost}]" : advertiseHost)
            : endpoint.Address.Equals(IPAddress.Any) || endpoint.Address.Equals(IPAddress.IPv6Any) ? "127.0.0.1"
            : endpoint.AddressFamily == System.Net.Sockets.AddressFamily.InterNetworkV6 ? $"[{endpoint.Address}]"
            : endpoint.Address.ToString();

    private static readonly string[] FarmServices =
    [
        Contracts.V1.Messaging.Descriptor.FullName,
        Contracts.V1.Management.Descriptor.FullName,
        Contracts.V1.NodeControl.Descriptor.FullName,
    ];

    public static IServiceCollection AddFarmGrpc(this IServiceCollection services)
    {
        services.AddGrpc(grpc =>
        {
            grpc.MaxReceiveMessageSize = FarmChannels.MaxMessageSize;
            grpc.MaxSendMessageSize = FarmChannels.MaxMessageSize;
            grpc.Interceptors.Add<FarmErrorInterceptor>();
            grpc.EnableDetailedErrors = true;
        });
        // Grpc.AspNetCore's own binder of generated services, replaced by one that can give a method
        // Farm's response marshaller (GeneratedServiceBinding): one binder only, or each method maps twice.
        // Found by its type's name: a Grpc.AspNetCore that renames it fails here, at startup, not quietly.
        var generatedBinder = services.Single(d => d.ServiceType == typeof(IServiceMethodProvider<>)
            && d.ImplementationType is { Name: "BinderServiceMethodProvider`1" });
        services.Remove(generatedBinder);
        services.AddSingleton(typeof(IServiceMethodProvider<>), typeof(GeneratedServiceBinding<>));
        services.AddGrpcReflection();
        services.AddGrpcHealthChecks(health =>
        {
            // The node as a whole ("") and each Farm service report the node's one check.
            health.Services.Map("", _ => true);
            foreach (var service in FarmServices)
            {
                health.Services.Map(service, _ => true);
            }
        }).AddCheck<NodeHealthCheck>("node");
        return services;
    }

    public static void MapFarmGrpc(this IEndpointRouteBuilder endpoints)
    {
        endpoints.MapGrpcService<MessagingRouter>();
        endpoints.MapGrpcService<ManagementService>();
        endpoints.MapGrpcService<NodeControlService>();
        endpoints.MapGrpcReflectionService();
        endpoints.MapGrpcHealthChecksService();
    }
}
