using System.Net;
using System.Reflection;
using System.Text.Json;
using Farm.Broker;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;

namespace Farm.Gateway.Dashboard;

/// <summary>
/// The dashboard on a node's HTTP/1.1 listener (beside /metrics; the gRPC port speaks only
/// HTTP/2): the page and its assets from this assembly (nothing from the internet), the farm's
/// view as JSON and as server-sent events, and the control endpoints. Controls answer only callers
/// on loopback unless the node was started with --dashboard-remote-control, and only requests
/// carrying the X-Farm-Dashboard header (which a cross-site form cannot send).
/// </summary>
internal static class DashboardEndpoints
{
    public const string ControlHeader = "X-Farm-Dashboard";

    private static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.Web);

    private static readonly Dictionary<string, string> Assets = new(StringComparer.Ordinal)
    {
        ["/"] = "index.html",
        ["/dashboard.js"] = "dashboard.js",
        ["/dashboard.css"] = "dashboard.css",
    };

    public static IServiceCollection AddDashboard(this IServiceCollection services, DashboardOptions options)
    {
        services.AddSingleton(options);
        services.AddSingleton<NodeProcessControl>();
        services.AddSingleton(provider => new EntityRates(new HttpClient { Timeout = TimeSpan.FromSeconds(2) }, provider.GetRequiredService<TimeProvider>()));
        services.AddSingleton<DashboardFeed>();
        services.AddSingleton<DashboardControls>();
        return services;
    }

    public static void MapDashboard(this IEndpointRouteBuilder endpoints)
    {
        foreach (var (path, asset) in Assets)
        {
            endpoints.MapGet(path, context => ServeAssetAsync(context, asset));
        }
        endpoints.MapGet("/api/farm", FarmAsync);
        endpoints.MapGet("/api/events", EventsAsync);

        var controls = endpoints.MapGroup("/api").AddEndpointFilter(GuardControlsAsync);
        controls.MapPost("/nodes/{id}/{action}", (HttpContext c, long id, string action) => Control(c, async ct => await c.Controls().NodeAsync(id, action, ct)));
        controls.MapPost("/containers/{id}/move", (HttpContext c, long id) => Control(c, async ct => await c.Controls().MoveAsync(id, await BodyAsync<MoveBody>(c), ct)));
        controls.MapPost("/topics/ordering", (HttpContext c) => Control(c, async ct => await c.Controls().OrderingAsync(await BodyAsync<OrderingBody>(c), ct)));
        controls.MapPost("/entities", (HttpContext c) => Control(c, async ct => await c.Controls().CreateAsync(await BodyAsync<EntityBody>(c), ct)));
        controls.MapPost("/entities/delete", (HttpContext c) => Control(c, async ct => await c.Controls().DeleteAsync(await BodyAsync<EntityBody>(c), ct)));
        controls.MapGet("/messages", (HttpContext c) => Control(c, async ct => await c.Controls().PeekAsync(
            c.Request.Query["entity"].ToString(), c.Request.Query["deadLetter"] == "true", c.Request.Query["max"].ToString(), ct)));
        controls.MapPost("/dead-letters/resubmit", (HttpContext c) => Control(c, async ct => await c.Controls().ResubmitAsync(await BodyAsync<ResubmitBody>(c), ct)));
        controls.MapPost("/messages/purge", (HttpContext c) => Control(c, async ct => await c.Controls().PurgeAsync(await BodyAsync<PurgeBody>(c), ct)));
    }

    private static DashboardControls Controls(this HttpContext context) => context.RequestServices.GetRequiredService<DashboardControls>();

    internal static bool MayControl(HttpContext context) =>
        context.RequestServices.GetRequiredService<DashboardOptions>().RemoteControl
        || context.Connection.RemoteIpAddress is { } remote && IPAddress.IsLoopback(remote.IsIPv4MappedToIPv6 ? remote.MapToIPv4() : remote);

    private static async ValueTask<object?> GuardControlsAsync(EndpointFilterInvocationContext invocation, EndpointFilterDelegate next)
    {
        var context = invocation.HttpContext;
        if (!MayControl(context))
        {
            return Error(HttpStatusCode.Forbidden,
                "The dashboard's controls answer only callers on the node's own machine (loopback); start the node with --dashboard-remote-control to open them.");
        }
        if (!context.Request.Headers.ContainsKey(ControlHeader))
        {
            return Error(HttpStatusCode.BadRequest, $"Control requests must carry the {ControlHeader} header (the page sends it; a cross-site form cannot).");
        }
        return await next(invocation);
    }

    /// <summary>Runs one control and answers its result as JSON, or its failure as one line the page shows.</summary>
    private static async Task Control(HttpContext context, Func<CancellationToken, Task<object>> action) =>
        await (await RunAsync(context, action)).ExecuteAsync(context);

    private static async Task<IResult> RunAsync(HttpContext context, Func<CancellationToken, Task<object>> action)
    {
        try
        {
            return Results.Json(await action(context.RequestAborted), Json);
        }
        catch (DashboardException e)
        {
            return Error(e.Status, e.Message);
        }
        catch (Exception e) when (e is RpcException or BrokerException)
        {
            // A farm error from this node's own checks maps as the gRPC interceptor maps it.
            var rpc = e as RpcException ?? FarmErrorInterceptor.ToRpc((BrokerException)e);
            return Error(StatusOf(rpc.StatusCode), string.IsNullOrEmpty(rpc.Status.Detail) ? rpc.StatusCode.ToString() : rpc.Status.Detail);
        }
    }

    private static IResult Error(HttpStatusCode status, string message) => Results.Json(new { error = message }, Json, statusCode: (int)status);

    private static HttpStatusCode StatusOf(StatusCode code) => code switch
    {
        StatusCode.InvalidArgument or StatusCode.OutOfRange => HttpStatusCode.BadRequest,
        StatusCode.NotFound => HttpStatusCode.NotFound,
        StatusCode.AlreadyExists or StatusCode.FailedPrecondition or StatusCode.Aborted => HttpStatusCode.Conflict,
        StatusCode.ResourceExhausted => HttpStatusCode.TooManyRequests,
        StatusCode.PermissionDenied => HttpStatusCode.Forbidden,
        StatusCode.Unimplemented => HttpStatusCode.NotImplemented,
        StatusCode.DeadlineExceeded => HttpStatusCode.GatewayTimeout,
        StatusCode.Unavailable => HttpStatusCode.ServiceUnavailable,
        _ => HttpStatusCode.InternalServerError,
    };

    private static async Task<T> BodyAsync<T>(HttpContext context)
        where T : class
    {
        try
        {
            return await context.Request.ReadFromJsonAsync<T>(Json, context.RequestAborted)
                ?? throw new DashboardException(HttpStatusCode.BadRequest, "The request needs a JSON body.");
        }
        catch (Exception e) when (e is JsonException or InvalidOperationException or BadHttpRequestException)
        {
            throw new DashboardException(HttpStatusCode.BadRequest, $"The request body is not the JSON this call takes: {e.Message}");
        }
    }

    private static async Task FarmAsync(HttpContext context)
    {
        var feed = context.RequestServices.GetRequiredService<DashboardFeed>();
        var view = await feed.CurrentAsync(context.RequestAborted);
        await context.Response.WriteAsJsonAsync(view with { Controls = feed.Controls(MayControl(context)) }, Json, context.RequestAborted);
    }

    /// <summary>Server-sent events: one "data:" line of JSON per view, as long as the page stays (or the node stops).</summary>
    private static async Task EventsAsync(HttpContext context)
    {
        var feed = context.RequestServices.GetRequiredService<DashboardFeed>();
        var stopping = context.RequestServices.GetRequiredService<IHostApplicationLifetime>().ApplicationStopping;
        using var watch = CancellationTokenSource.CreateLinkedTokenSource(context.RequestAborted, stopping);
        var controls = feed.Controls(MayControl(context));
        context.Response.ContentType = "text/event-stream";
        context.Response.Headers.CacheControl = "no-cache";
        // Buffering proxies would hold the events back.
        context.Response.Headers["X-Accel-Buffering"] = "no";
        try
        {
            await context.Response.WriteAsync("retry: 1000\n\n", watch.Token);
            long seen = 0;
            while (true)
            {
                var view = await feed.NextAsync(seen, watch.Token);
                seen = view.Version;
                var json = JsonSerializer.Serialize(view with { Controls = controls }, Json);
                await context.Response.WriteAsync($"data: {json}\n\n", watch.Token);
                await context.Response.Body.FlushAsync(watch.Token);
            }
        }
        catch (OperationCanceledException) when (watch.IsCancellationRequested)
        {
            // The page went away or the node is stopping: a node must not wait for its watchers to stop.
        }
    }

    private static async Task ServeAssetAsync(HttpContext context, string asset)
    {
        await using var stream = typeof(DashboardEndpoints).Assembly.GetManifestResourceStream("dashboard/" + asset);
        if (stream is null)
        {
            context.Response.StatusCode = StatusCodes.Status404NotFound;
            return;
        }
        context.Response.ContentType = Path.GetExtension(asset) switch
        {
            ".html" => "text/html; charset=utf-8",
            ".js" => "text/javascript; charset=utf-8",
            ".css" => "text/css; charset=utf-8",
            _ => "application/octet-stream",
        };
        context.Response.Headers.CacheControl = "no-cache";
        await stream.CopyToAsync(context.Response.Body, context.RequestAborted);
    }
}

internal sealed record MoveBody(long ToNode);

internal sealed record OrderingBody(string Topic, bool SupportOrdering);

/// <summary>Kind: queue, topic or subscription (Topic names its topic).</summary>
internal sealed record EntityBody(string Kind, string Name, string? Topic, bool? SupportOrdering);

/// <summary>Resubmits the named dead letters, or all of them when none is named.</summary>
internal sealed record ResubmitBody(string Entity, long[]? SequenceNumbers);

internal sealed record PurgeBody(string Entity, bool DeadLetter);
