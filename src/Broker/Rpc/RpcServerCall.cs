using Farm.Contracts.Rpc;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.AspNetCore.Server.Kestrel.Core.Features;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace Farm.Broker.Rpc;

/// <summary>
/// Runs one server-side call: checks the request is gRPC, sets up its deadline and cancellation,
/// runs the method's body and ends the response with the call's status.
/// </summary>
internal static class RpcServerCall
{
    public static async Task RunAsync(HttpContext http, string method, ILogger logger, Func<RpcCallContext, Task> body)
    {
        var response = http.Response;
        if (!GrpcProtocol.IsGrpcContentType(http.Request.ContentType))
        {
            response.StatusCode = StatusCodes.Status415UnsupportedMediaType;
            WriteStatusHeaders(response, RpcStatusCode.Internal, $"Content-Type '{http.Request.ContentType}' is not supported: gRPC requests use {GrpcProtocol.ContentType}.");
            return;
        }

        if (!HttpProtocol.IsHttp2(http.Request.Protocol))
        {
            // Without HTTP/2 there are no trailers to carry the status in.
            response.StatusCode = StatusCodes.Status426UpgradeRequired;
            response.Headers.Upgrade = "h2c";
            WriteStatusHeaders(response, RpcStatusCode.Internal, $"Protocol {http.Request.Protocol} is not supported: gRPC needs HTTP/2.");
            return;
        }

        AllowLongLivedBody(http);
        response.ContentType = GrpcProtocol.ContentType;

        using var deadline = StartDeadline(http);
        using var cancellation = deadline is null
            ? CancellationTokenSource.CreateLinkedTokenSource(http.RequestAborted)
            : CancellationTokenSource.CreateLinkedTokenSource(http.RequestAborted, deadline.Token);
        var context = new RpcCallContext(http, method, cancellation.Token);

        RpcStatusCode status;
        string detail;
        IReadOnlyDictionary<string, string>? errorTrailers = null;
        try
        {
            await body(context);
            status = RpcStatusCode.OK;
            detail = string.Empty;
        }
        catch (Exception ex) when (http.RequestAborted.IsCancellationRequested)
        {
            // The client cancelled or disconnected: there is nobody left to tell.
            RpcLog.CallAborted(logger, method, ex.GetType().Name);
            return;
        }
        catch (RpcException ex)
        {
            status = ex.StatusCode;
            detail = ex.Detail;
            errorTrailers = ex.Trailers;
        }
        catch (OperationCanceledException) when (deadline?.IsCancellationRequested == true)
        {
            status = RpcStatusCode.DeadlineExceeded;
            detail = "Deadline exceeded.";
        }
        catch (Exception ex)
        {
            RpcLog.HandlerFailed(logger, method, ex);
            status = RpcStatusCode.Internal;
            detail = ex.Message;
        }

        if (response.HasStarted)
        {
            AppendStatusTrailers(response, status, detail, context.ResponseTrailers, errorTrailers);
        }
        else
        {
            // Nothing was sent yet: a "trailers-only" response, where the headers carry the status.
            WriteStatusHeaders(response, status, detail, context.ResponseTrailers, errorTrailers);
        }
    }

    private static void WriteStatusHeaders(HttpResponse response, RpcStatusCode status, string detail,
        IEnumerable<KeyValuePair<string, string>>? trailers = null, IEnumerable<KeyValuePair<string, string>>? errorTrailers = null)
    {
        response.ContentType = GrpcProtocol.ContentType;
        foreach (var (name, value) in StatusMetadata(status, detail, trailers, errorTrailers))
        {
            response.Headers[name] = value;
        }
    }

    private static void AppendStatusTrailers(HttpResponse response, RpcStatusCode status, string detail,
        IEnumerable<KeyValuePair<string, string>> trailers, IEnumerable<KeyValuePair<string, string>>? errorTrailers)
    {
        foreach (var (name, value) in StatusMetadata(status, detail, trailers, errorTrailers))
        {
            response.AppendTrailer(name, value);
        }
    }

    private static IEnumerable<(string Name, string Value)> StatusMetadata(RpcStatusCode status, string detail,
        IEnumerable<KeyValuePair<string, string>>? trailers, IEnumerable<KeyValuePair<string, string>>? errorTrailers)
    {
        var metadata = new Dictionary<string, string>();
        // The exception's trailers win over the context's: they describe the failure being reported.
        foreach (var (name, value) in (trailers ?? []).Concat(errorTrailers ?? []))
        {
            var key = name.ToLowerInvariant();
            // grpc-* names are reserved for the protocol; a handler cannot override the status.
            if (!key.StartsWith("grpc-", StringComparison.Ordinal) && !key.StartsWith(':'))
            {
                metadata[key] = value;
            }
        }

        yield return (GrpcProtocol.StatusHeader, GrpcProtocol.FormatStatus(status));
        if (detail.Length > 0)
        {
            yield return (GrpcProtocol.MessageHeader, GrpcProtocol.EncodeMessage(detail));
        }

        foreach (var (name, value) in metadata)
        {
            yield return (name, value);
        }
    }

    /// <summary>gRPC streams live for minutes or hours and idle between messages.</summary>
    private static void AllowLongLivedBody(HttpContext http)
    {
        if (http.Features.Get<IHttpMinRequestBodyDataRateFeature>() is { } minRate)
        {
            minRate.MinDataRate = null;
        }

        // Each message is limited instead (RpcEndpoints.MaxRequestMessageSize).
        if (http.Features.Get<IHttpMaxRequestBodySizeFeature>() is { IsReadOnly: false } maxSize)
        {
            maxSize.MaxRequestBodySize = null;
        }
    }

    /// <summary>A timer for the client's grpc-timeout, or null when it set none (or one beyond what a timer can hold).</summary>
    private static CancellationTokenSource? StartDeadline(HttpContext http)
    {
        if (!GrpcProtocol.TryParseTimeout(http.Request.Headers[GrpcProtocol.TimeoutHeader], out var timeout)
            || timeout >= TimeSpan.FromDays(30))
        {
            return null;
        }

        var timeProvider = http.RequestServices.GetService<TimeProvider>() ?? TimeProvider.System;
        return new CancellationTokenSource(timeout, timeProvider);
    }
}
