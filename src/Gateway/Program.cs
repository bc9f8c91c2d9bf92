using System.Net;
using Farm.Broker;
using Farm.Broker.Administration;
using Farm.Broker.Messaging;
using Farm.Broker.Node;
using Farm.ContainerStore;
using Farm.ContainerStore.Postgres;
using Farm.ContainerStore.Sqlite;
using Farm.Gateway.Amqp;
using Farm.Gateway.Dashboard;
using Farm.Gateway.Grpc;
using Farm.Gateway.Hosting;
using Farm.Gateway.Management;
using Farm.Gateway.Routing;

// A Farm node: the gateway (management API, messaging front door) and the broker in one process,
// so killing the process kills the node as a unit.
// The content root is the node's own directory, not the working directory: the host watches its
// content root, every directory under it, for configuration changes, and `farm up` keeps the data
// under the working directory (./.farm), so every container write woke that watcher (about 5% of a
// core; FarmLifecycleTests checks what the node watches). The node reads no files from it.
if (args is ["--help"] or ["-h"])
{
    // Before the host is built: asking for help must not start a node (nor make ./.farm).
    Console.WriteLine(NodeHostOptions.Usage);
    return 0;
}
var builder = WebApplication.CreateSlimBuilder(new WebApplicationOptions { Args = args, ContentRootPath = AppContext.BaseDirectory });
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
// gRPC logs every call that ends with an error status at Information: a client's NotFound, each
// send refused while the node sheds load. Failures of the node itself are logged by FarmErrorInterceptor.
builder.Logging.AddFilter("Grpc.AspNetCore.Server.ServerCallHandler", LogLevel.Warning);
// A port that cannot be bound fails the host's start, which logs the whole exception; the catch
// below says it in one line instead.
builder.Logging.AddFilter("Microsoft.Extensions.Hosting.Internal.Host", LogLevel.Critical);
// A node that is starting or draining answers /healthz with 503 by design; that is not an error to log on every probe.
builder.Logging.AddFilter("Microsoft.Extensions.Diagnostics.HealthChecks", LogLevel.Critical);
var listeners = new NodeListeners();
builder.WebHost.ConfigureKestrel(kestrel =>
{
    listeners.Grpc = kestrel.ListenGrpc(IPAddress.Parse(options.Host), options.Port);
    listeners.Metrics = kestrel.ListenMetrics(IPAddress.Parse(options.Host), options.MetricsPort);
});
builder.Services.AddSingleton(options);
if (options.DrainOnStop)
{
    // The host's stop (30 s by default) must outlast the hand-over of every container.
    builder.Services.Configure<HostOptions>(host => host.ShutdownTimeout = NodeHostOptions.DrainOnStopTimeout + TimeSpan.FromSeconds(10));
}
builder.Services.AddSingleton(listeners);
builder.Services.AddSingleton(options.Node);
builder.Services.AddSingleton(options.Broker);
builder.Services.AddSingleton(TimeProvider.System);
builder.Services.AddSingleton<IStoreProvider>(options.Node.Store switch
{
    NodeHostOptions.Postgres => new PostgresStoreProvider(),
    NodeHostOptions.Sqlite => new SqliteStoreProvider(),
    var store => throw new InvalidOperationException($"No store provider is named '{store}'."),
});
builder.Services.AddSingleton<BrokerNode>();
builder.Services.AddSingleton<BrokerNodeService>();
builder.Services.AddHostedService(services => services.GetRequiredService<BrokerNodeService>());
builder.Services.AddSingleton<MessagingService>();
builder.Services.AddSingleton<EntityAdministration>();
builder.Services.AddSingleton<OwnerChannels>();
builder.Services.AddSingleton<IOwnerDirectory, OwnerDirectory>();
builder.Services.AddSingleton(options.Forwarding);
builder.Services.AddSingleton<OwnerRouting>();
builder.Services.AddSingleton<MessagingRouter>();
builder.Services.AddSingleton<ForwardedSends>();
builder.Services.AddSingleton<ManagementService>();
builder.Services.AddSingleton<NodeControlService>();
builder.Services.AddFarmGrpc();
builder.Services.AddNodeTelemetry(options.Node.NodeId);
builder.Services.AddDashboard(options.Dashboard);
builder.Services.AddAmqpFrontDoor(new AmqpOptions { Port = options.AmqpPort });

var app = builder.Build();
// A stopping node releases its containers: their PostgreSQL connections close instead of being kept for a retake.
app.Lifetime.ApplicationStopping.Register(PostgresStoreProvider.StopKeepingReleasedDatabases);
// A queue that forwards to an entity another node serves sends through this node's routing.
app.Services.GetRequiredService<BrokerNode>().SendToOwner = app.Services.GetRequiredService<ForwardedSends>().SendAsync;
app.MapFarmGrpc();
app.MapNodeTelemetry();
app.MapDashboard();
// For container engines and load balancers: 200 while the node serves, 503 while it starts, drains or was replaced.
app.MapHealthChecks("/healthz");

try
{
    await app.StartAsync();
}
catch (IOException e)
{
    // Kestrel reports a taken port as an IOException; say so in one line instead of a crash dump.
    Console.Error.WriteLine(e is ListenerBindException
        ? $"farm node {options.Node.NodeId}: {e.Message}"
        : $"farm node {options.Node.NodeId}: cannot listen on {options.Host}:{options.Port}: {e.Message}");
    return 1;
}
await app.WaitForShutdownAsync();
return app.Services.GetRequiredService<BrokerNodeService>().ExitCode;
