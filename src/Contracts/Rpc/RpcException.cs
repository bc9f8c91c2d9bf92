namespace Farm.Contracts.Rpc;

/// <summary>
/// A failed gRPC call: the status code, the status message, and the trailers that came with it
/// (Farm puts the failure reason in "farm-error" and, for NOT_OWNER, the owner in "farm-owner").
/// Thrown by server handlers to fail a call, and by <see cref="RpcChannel"/> when a call fails.
/// </summary>
public sealed class RpcException : Exception
{
    public const string FarmErrorTrailer = "farm-error";
    public const string FarmOwnerTrailer = "farm-owner";

    public RpcException(RpcStatusCode statusCode, string detail, IReadOnlyDictionary<string, string>? trailers = null, Exception? inner = null)
        : base($"{statusCode}: {detail}", inner)
    {
        StatusCode = statusCode;
        Detail = detail;
        Trailers = trailers ?? new Dictionary<string, string>();
    }

    public RpcStatusCode StatusCode { get; }

    /// <summary>The grpc-message: one readable line.</summary>
    public string Detail { get; }

    /// <summary>Trailing metadata, keys in lower case.</summary>
    public IReadOnlyDictionary<string, string> Trailers { get; }

    /// <summary>The "farm-error" trailer (a <c>FarmErrorCode</c> name), or null.</summary>
    public string? FarmError => Trailers.TryGetValue(FarmErrorTrailer, out var value) ? value : null;
}
