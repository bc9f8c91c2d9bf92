using Farm.Contracts.Rpc;
using Farm.Contracts.V1;

namespace Farm.Broker;

/// <summary>
/// The errors the broker and gateway answer with: a gRPC status, one readable line, and the
/// "farm-error" trailer naming the <see cref="FarmErrorCode"/> so clients can tell the reasons apart.
/// </summary>
public static class FarmErrors
{
    public static RpcException Create(RpcStatusCode status, FarmErrorCode code, string message, string? owner = null)
    {
        var trailers = new Dictionary<string, string> { [RpcException.FarmErrorTrailer] = CodeName(code) };
        if (owner is not null)
        {
            trailers[RpcException.FarmOwnerTrailer] = owner;
        }
        return new RpcException(status, message, trailers);
    }

    public static string CodeName(FarmErrorCode code) => code switch
    {
        // The trailer carries the proto name without its FARM_ERROR_CODE_ prefix (stable for clients).
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

    public static RpcException Invalid(string message) =>
        Create(RpcStatusCode.InvalidArgument, FarmErrorCode.InvalidArgument, message);

    public static RpcException EntityNotFound(string entity) =>
        Create(RpcStatusCode.NotFound, FarmErrorCode.MessagingEntityNotFound, $"The messaging entity '{entity}' was not found.");

    public static RpcException EntityExists(string entity) =>
        Create(RpcStatusCode.AlreadyExists, FarmErrorCode.MessagingEntityAlreadyExists, $"The messaging entity '{entity}' already exists.");

    public static RpcException ContainerNotFound(long id) =>
        Create(RpcStatusCode.NotFound, FarmErrorCode.ContainerNotFound, $"The container {id} was not found.");

    public static RpcException LockLost(string entity, string lockToken) =>
        Create(RpcStatusCode.FailedPrecondition, FarmErrorCode.MessageLockLost,
            $"The lock '{lockToken}' on a message of '{entity}' is not held: it expired, was already settled, or never existed.");

    public static RpcException MessageNotFound(string entity, long sequenceNumber, string why) =>
        Create(RpcStatusCode.NotFound, FarmErrorCode.MessageNotFound, $"Message {sequenceNumber} of '{entity}' {why}.");

    public static RpcException SizeExceeded(string message) =>
        Create(RpcStatusCode.InvalidArgument, FarmErrorCode.MessageSizeExceeded, message);

    public static RpcException NotOwner(string entity, string? owner) =>
        Create(RpcStatusCode.Unavailable, FarmErrorCode.NotOwner,
            $"This broker does not own the container of '{entity}'" + (owner is null ? "." : $"; its owner is {owner}."), owner);

    public static RpcException StaleEpoch(long containerId) =>
        Create(RpcStatusCode.Unavailable, FarmErrorCode.StaleEpoch,
            $"Container {containerId} moved to another broker while this one was writing; nothing was written.");

    public static RpcException StoreUnavailable(string message) =>
        Create(RpcStatusCode.Unavailable, FarmErrorCode.StoreUnavailable, message);

    public static RpcException NotSupported(string message) =>
        // Not UNIMPLEMENTED: generic gRPC clients read that as "no such method".
        Create(RpcStatusCode.FailedPrecondition, FarmErrorCode.NotSupported, message);

    private static readonly Dictionary<string, FarmErrorCode> ByName =
        Enum.GetValues<FarmErrorCode>().Where(c => c != FarmErrorCode.Unspecified).ToDictionary(CodeName, StringComparer.Ordinal);

    /// <summary>The code an error carries in its trailer (INVALID_ARGUMENT when it carries none Farm knows).</summary>
    public static FarmErrorCode CodeOf(RpcException error) =>
        error.FarmError is { } name && ByName.TryGetValue(name, out var code) ? code : FarmErrorCode.InvalidArgument;
}
