using Farm.Contracts.V1;

namespace Farm.Broker;

/// <summary>
/// A failure the broker reports to its caller: what went wrong (<see cref="Code"/>, one readable
/// line) and, for NOT_OWNER, who owns the entity. The broker knows nothing of the transport; the
/// node's gRPC interceptor turns this into a status and the "farm-error" / "farm-owner" trailers.
/// </summary>
public sealed class BrokerException(FarmErrorCode code, string message, string? owner = null) : Exception(message)
{
    public FarmErrorCode Code { get; } = code;

    /// <summary>For <see cref="FarmErrorCode.NotOwner"/>: the owner's address, when this node knows it.</summary>
    public string? Owner { get; } = owner;

    /// <summary>
    /// A SERVICE_BUSY of an overloaded node shedding load (RESOURCE_EXHAUSTED on the wire), as opposed
    /// to one of an entity between owners (UNAVAILABLE): a gateway passes it on instead of holding the
    /// call for the next owner, which would only add to the load.
    /// </summary>
    public bool Overloaded { get; init; }
}

/// <summary>The failures the broker and gateway answer with, worded once.</summary>
public static class FarmErrors
{
    public static BrokerException Create(FarmErrorCode code, string message, string? owner = null) => new(code, message, owner);

    public static BrokerException Invalid(string message) => new(FarmErrorCode.InvalidArgument, message);

    public static BrokerException EntityNotFound(string entity) =>
        new(FarmErrorCode.MessagingEntityNotFound, $"The messaging entity '{entity}' was not found.");

    public static BrokerException EntityExists(string entity) =>
        new(FarmErrorCode.MessagingEntityAlreadyExists, $"The messaging entity '{entity}' already exists.");

    public static BrokerException ContainerNotFound(long id) =>
        new(FarmErrorCode.ContainerNotFound, $"The container {id} was not found.");

    public static BrokerException LockLost(string entity, string lockToken) =>
        new(FarmErrorCode.MessageLockLost,
            $"The lock '{lockToken}' on a message of '{entity}' is not held: it expired, was already settled, or never existed.");

    public static BrokerException MessageNotFound(string entity, long sequenceNumber, string why) =>
        new(FarmErrorCode.MessageNotFound, $"Message {sequenceNumber} of '{entity}' {why}.");

    public static BrokerException SizeExceeded(string message) => new(FarmErrorCode.MessageSizeExceeded, message);

    public static BrokerException QuotaExceeded(string message) => new(FarmErrorCode.QuotaExceeded, message);

    /// <summary>The node cannot serve this now (starting, stopping, or handing the entity over); try again.</summary>
    public static BrokerException Busy(string message) => new(FarmErrorCode.ServiceBusy, message);

    /// <summary>The node is too far behind its work to take more; nothing was done, try again after a pause.</summary>
    public static BrokerException Overloaded(string message) => new(FarmErrorCode.ServiceBusy, message) { Overloaded = true };

    public static BrokerException NotOwner(string entity, string? owner) =>
        new(FarmErrorCode.NotOwner,
            $"This broker does not own the container of '{entity}'" + (owner is null ? "." : $"; its owner is {owner}."), owner);

    public static BrokerException StaleEpoch(long containerId) =>
        new(FarmErrorCode.StaleEpoch,
            $"Container {containerId} moved to another broker while this one was writing; nothing was written.");

    public static BrokerException StoreUnavailable(string message) => new(FarmErrorCode.StoreUnavailable, message);

    public static BrokerException NotSupported(string message) => new(FarmErrorCode.NotSupported, message);
}
