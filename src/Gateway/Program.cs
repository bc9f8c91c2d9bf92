using System.Net;
using Farm.Broker;
using Farm.Broker.Messaging;
using Farm.Broker.Node;
using Farm.ContainerStore;
using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Sqlite;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Farm.Gateway.Hosting;
using Farm.Gateway.Management;
using Farm.Gateway.Routing;
using Microsoft.AspNetCore.Server.Kestrel.Core;

// A Farm node: the gateway (management API, messaging front door) and the broker in one process,
// so killing the process kills the node as a unit.
var builder = WebApplication.CreateSlimBuilder(args);
NodeHostOptions options;
try
{
    options = NodeHostOptions.Parse(builder.Configuration);
}
catch (ArgumentException e)
{
    Console.Error.WriteLine($"farm node: {e.Message}");
    return 2;
}

builder.Logging.AddSimpleConsole(console => console.TimestampFormat = "HH:mm:ss.fff ");
builder.Logging.AddFilter("Microsoft.AspNetCore", LogLevel.Warning);
builder.Logging.AddFilter("Microsoft.Hosting", LogLevel.Warning);
ListenOptions? grpcListener = null, metricsListener = null;
builder.WebHost.ConfigureKestrel(kestrel =>
{
    grpcListener = kestrel.ListenGrpc(IPAddress.Parse(options.Host), options.Port);
    metricsListener = kestrel.ListenMetrics(IPAddress.Parse(options.Host), options.MetricsPort);
});
builder.Services.AddSingleton(options.Node);
builder.Services.AddSingleton(new BrokerOptions());
builder.Services.AddSingleton(TimeProvider.System);
builder.Services.AddSingleton<IStoreProvider>(options.Node.Store switch
{
    NodeHostOptions.Postgres => new PostgresStoreProvider(),
    NodeHostOptions.Sqlite => new SqliteStoreProvider(),
    var store => throw new InvalidOperationException($"No store provider is named '{store}'."),
});
builder.Services.AddSingleton<BrokerNode>();
builder.Services.AddSingleton<MessagingService>();
builder.Services.AddSingleton<OwnerChannels>();
builder.Services.AddSingleton<IOwnerDirectory>(services => services.GetRequiredService<BrokerNode>());
builder.Services.AddSingleton(options.Forwarding);
builder.Services.AddSingleton<OwnerRouting>();
builder.Services.AddSingleton<MessagingRouter>();
builder.Services.AddSingleton<ManagementService>();
builder.Services.AddSingleton<NodeControlService>();
builder.Services.AddFarmGrpc();
builder.Services.AddNodeTelemetry(options.Node.NodeId);

var app = builder.Build();
app.MapFarmGrpc();
app.MapNodeTelemetry();

try
{
    await app.StartAsync();
}
catch (IOException e)
{
    // Kestrel reports a taken port as an IOException; say so in one line instead of a crash dump.
    Console.Error.WriteLine($"farm node {options.Node.NodeId}: cannot listen on {options.Host}:{options.Port}: {e.Message}");
    return 1;
}
// The ports the OS picked for port 0 are known once Kestrel listens.
var address = GrpcHosting.AddressOf(grpcListener!);
var metricsAddress = GrpcHosting.AddressOf(metricsListener!) + NodeTelemetry.MetricsPath;
var node = app.Services.GetRequiredService<BrokerNode>();
try
{
    await node.StartAsync(address, app.Lifetime.ApplicationStopping, metricsAddress);
}
catch (Exception e) when (e is StoreUnavailableException or InvalidOperationException or IOException or UnauthorizedAccessException)
{
    Console.Error.WriteLine($"farm node {options.Node.NodeId}: cannot start: {e.Message}");
    await app.StopAsync();
    return 1;
}
NodeReadyFile.Write(options.Node.DataDirectory, options.Node.NodeId, address);
// A drained node has handed every container over: it leaves the farm by stopping.
_ = node.Drained.ContinueWith(_ => app.Lifetime.StopApplication(), TaskScheduler.Default);
// Another process took this node id over (started with the same --node-id while this one was frozen).
_ = node.Replaced.ContinueWith(_ => app.Lifetime.StopApplication(), TaskScheduler.Default);
Console.WriteLine($"Farm node {options.Node.NodeId} serving at {address}, metrics at {metricsAddress}");

await app.WaitForShutdownAsync();
await node.DisposeAsync();
if (node.Replaced.IsCompleted)
{
    Console.Error.WriteLine($"farm node {options.Node.NodeId}: stopped: another process registered node {options.Node.NodeId}; node ids must be unique.");
    return 1;
}
return 0;
