namespace Farm.Client;

/// <summary>Why an operation failed; mirrors the wire's FarmErrorCode (and Azure's ServiceBusFailureReason).</summary>
public enum FarmFailureReason
{
    GeneralError = 0,
    InvalidArgument,
    MessagingEntityNotFound,
    MessagingEntityAlreadyExists,
    MessageSizeExceeded,
    MessageLockLost,
    MessageNotFound,
    QuotaExceeded,

    /// <summary>The broker that answered does not own the entity's container (it moved); retried.</summary>
    NotOwner,

    /// <summary>The broker lost ownership of the container while writing; retried.</summary>
    StaleEpoch,
    ServiceBusy,

    /// <summary>The container database could not be reached; retried.</summary>
    StoreUnavailable,
    NotSupported,
    ContainerNotFound,

    /// <summary>No endpoint could be reached (gRPC Unavailable).</summary>
    ServiceCommunicationProblem,

    /// <summary>The operation did not finish within its try timeout.</summary>
    ServiceTimeout,
}
