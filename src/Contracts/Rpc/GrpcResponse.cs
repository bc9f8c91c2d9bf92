using System.Net;
using System.Net.Http.Headers;

namespace Farm.Contracts.Rpc;

/// <summary>Reads the gRPC status of an HTTP response, from its headers or its trailers.</summary>
internal static class GrpcResponse
{
    // Response headers that travel with a trailers-only response but are not call metadata.
    private static readonly HashSet<string> NotMetadata = new(StringComparer.OrdinalIgnoreCase)
    {
        GrpcProtocol.StatusHeader, GrpcProtocol.MessageHeader, "date", "server", "content-length",
    };

    /// <summary>
    /// Checks that the response is a gRPC response. True when it is "trailers-only": the status
    /// came in the headers and there is no body; then <paramref name="error"/> is null for OK.
    /// </summary>
    public static bool IsTrailersOnly(HttpResponseMessage response, out RpcException? error)
    {
        if (TryReadStatus(response.Headers, out error))
        {
            return true;
        }

        if (response.StatusCode != HttpStatusCode.OK)
        {
            throw new RpcException(GrpcProtocol.StatusFromHttp((int)response.StatusCode),
                $"Bad gRPC response: HTTP status {(int)response.StatusCode} {response.ReasonPhrase}.");
        }

        var contentType = response.Content.Headers.ContentType?.MediaType;
        if (!GrpcProtocol.IsGrpcContentType(contentType))
        {
            throw new RpcException(RpcStatusCode.Internal, $"Bad gRPC response: content-type '{contentType}'.");
        }

        return false;
    }

    /// <summary>The status in the trailers, read once the body has ended: null for OK.</summary>
    public static RpcException? GetFinalStatus(HttpResponseMessage response)
    {
        if (TryReadStatus(response.TrailingHeaders, out var error))
        {
            return error;
        }

        return new RpcException(RpcStatusCode.Internal, "The response ended without a grpc-status trailer.");
    }

    private static bool TryReadStatus(HttpHeaders headers, out RpcException? error)
    {
        error = null;
        if (!headers.TryGetValues(GrpcProtocol.StatusHeader, out var statusValues))
        {
            return false;
        }

        var status = GrpcProtocol.ParseStatus(statusValues.First());
        if (status == RpcStatusCode.OK)
        {
            return true;
        }

        var detail = headers.TryGetValues(GrpcProtocol.MessageHeader, out var messageValues)
            ? GrpcProtocol.DecodeMessage(messageValues.First())
            : string.Empty;

        var trailers = new Dictionary<string, string>();
        foreach (var (name, values) in headers.NonValidated)
        {
            if (!NotMetadata.Contains(name))
            {
                trailers[name.ToLowerInvariant()] = string.Join(',', values);
            }
        }

        error = new RpcException(status, detail, trailers);
        return true;
    }
}
