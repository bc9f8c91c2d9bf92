using System.Net;
using Grpc.Core;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.Extensions.DependencyInjection;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// A stand-in node in the test process: a gRPC server on a real loopback socket serving only what
/// <typeparamref name="TService"/> overrides (an older node, or one that answers by hand).
/// </summary>
internal static class InProcessNode
{
    public static async Task<WebApplication> ServeAsync<TService>() where TService : Contracts.V1.Messaging.MessagingBase
    {
        var builder = WebApplication.CreateSlimBuilder();
        builder.WebHost.ConfigureKestrel(k => k.Listen(IPAddress.Loopback, 0, listen => listen.Protocols = HttpProtocols.Http2));
        builder.Services.AddGrpc();
        builder.Services.AddSingleton<TService>();
        var app = builder.Build();
        app.MapGrpcService<TService>();
        await app.StartAsync();
        return app;
    }
}
