using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Contracts;

/// <summary>
/// The metadata Farm adds to gRPC calls, named once for the node, the SDK and the CLI. Any gRPC
/// client reads a failure's reason from the "farm-error" trailer, without knowing Farm's code.
/// </summary>
public static class FarmMetadata
{
    /// <summary>Trailer: the <see cref="FarmErrorCode"/> name of a failure (see <see cref="FarmErrorNames"/>).</summary>
    public const string ErrorTrailer = "farm-error";

    /// <summary>Trailer of NOT_OWNER: the address of the broker that owns the entity, when known.</summary>
    public const string OwnerTrailer = "farm-owner";

    /// <summary>
    /// Request header marking a call as addressed to this broker itself: it answers NOT_OWNER
    /// instead of forwarding. Gateways set it on calls they forward (so a call never bounces
    /// between two nodes with different views of who owns what), and redirect-mode clients on
    /// calls to the owner.
    /// </summary>
    public const string DirectHeader = "farm-direct";

    /// <summary>Headers of a direct call (a fresh copy: <see cref="Metadata"/> is mutable).</summary>
    public static Metadata DirectHeaders() => new() { { DirectHeader, "1" } };

    public static bool IsDirect(Metadata headers) => headers.Get(DirectHeader) is not null;

    /// <summary>The "farm-error" trailer of a failed call, or null.</summary>
    public static string? FarmError(this RpcException error) => error.Trailers.GetValue(ErrorTrailer);

    /// <summary>The "farm-owner" trailer of a NOT_OWNER failure, or null.</summary>
    public static string? FarmOwner(this RpcException error) => error.Trailers.GetValue(OwnerTrailer) is { Length: > 0 } owner ? owner : null;
}

/// <summary>
/// The names <see cref="FarmErrorCode"/> values travel under in the "farm-error" trailer: the proto
/// name without its FARM_ERROR_CODE_ prefix, stable for clients.
/// </summary>
public static class FarmErrorNames
{
    public static string Of(FarmErrorCode code) => code switch
    {
        FarmErrorCode.Unspecified => "",
        FarmErrorCode.InvalidArgument => "INVALID_ARGUMENT",
        FarmErrorCode.MessagingEntityNotFound => "MESSAGING_ENTITY_NOT_FOUND",
        FarmErrorCode.MessagingEntityAlreadyExists => "MESSAGING_ENTITY_ALREADY_EXISTS",
        FarmErrorCode.MessageSizeExceeded => "MESSAGE_SIZE_EXCEEDED",
        FarmErrorCode.MessageLockLost => "MESSAGE_LOCK_LOST",
        FarmErrorCode.MessageNotFound => "MESSAGE_NOT_FOUND",
        FarmErrorCode.QuotaExceeded => "QUOTA_EXCEEDED",
        FarmErrorCode.NotOwner => "NOT_OWNER",
        FarmErrorCode.StaleEpoch => "STALE_EPOCH",
        FarmErrorCode.ServiceBusy => "SERVICE_BUSY",
        FarmErrorCode.StoreUnavailable => "STORE_UNAVAILABLE",
        FarmErrorCode.NotSupported => "NOT_SUPPORTED",
        FarmErrorCode.ContainerNotFound => "CONTAINER_NOT_FOUND",
        _ => code.ToString(),
    };

    private static readonly Dictionary<string, FarmErrorCode> ByName =
        Enum.GetValues<FarmErrorCode>().Where(c => c != FarmErrorCode.Unspecified).ToDictionary(Of, StringComparer.Ordinal);

    /// <summary>The code a trailer names; false for none or one this version does not know.</summary>
    public static bool TryParse(string? name, out FarmErrorCode code)
    {
        code = FarmErrorCode.Unspecified;
        return name is { Length: > 0 } && ByName.TryGetValue(name, out code);
    }
}
