using Farm.Contracts.Rpc;

namespace Farm.Client;

/// <summary>The one place where wire failures (gRPC status + "farm-error" trailer) become <see cref="FarmException"/>.</summary>
internal static class FarmErrors
{
    public static FarmException FromRpc(RpcException exception, string? entityPath)
    {
        var reason = ReasonOf(exception.FarmError, exception.StatusCode);
        return new FarmException(Describe(reason, exception.Detail, entityPath), reason, entityPath, exception);
    }

    /// <summary>A failed item of a settle or renew-lock answer (its error_code).</summary>
    public static FarmException FromErrorCode(Contracts.V1.FarmErrorCode errorCode, string? detail, string? entityPath)
    {
        var reason = FromCode(errorCode) ?? FarmFailureReason.GeneralError;
        return new FarmException(Describe(reason, detail, entityPath), reason, entityPath);
    }

    /// <summary>Null for UNSPECIFIED (no error).</summary>
    public static FarmFailureReason? FromCode(Contracts.V1.FarmErrorCode code) => code switch
    {
        Contracts.V1.FarmErrorCode.Unspecified => null,
        Contracts.V1.FarmErrorCode.InvalidArgument => FarmFailureReason.InvalidArgument,
        Contracts.V1.FarmErrorCode.MessagingEntityNotFound => FarmFailureReason.MessagingEntityNotFound,
        Contracts.V1.FarmErrorCode.MessagingEntityAlreadyExists => FarmFailureReason.MessagingEntityAlreadyExists,
        Contracts.V1.FarmErrorCode.MessageSizeExceeded => FarmFailureReason.MessageSizeExceeded,
        Contracts.V1.FarmErrorCode.MessageLockLost => FarmFailureReason.MessageLockLost,
        Contracts.V1.FarmErrorCode.MessageNotFound => FarmFailureReason.MessageNotFound,
        Contracts.V1.FarmErrorCode.QuotaExceeded => FarmFailureReason.QuotaExceeded,
        Contracts.V1.FarmErrorCode.NotOwner => FarmFailureReason.NotOwner,
        Contracts.V1.FarmErrorCode.StaleEpoch => FarmFailureReason.StaleEpoch,
        Contracts.V1.FarmErrorCode.ServiceBusy => FarmFailureReason.ServiceBusy,
        Contracts.V1.FarmErrorCode.StoreUnavailable => FarmFailureReason.StoreUnavailable,
        Contracts.V1.FarmErrorCode.NotSupported => FarmFailureReason.NotSupported,
        Contracts.V1.FarmErrorCode.ContainerNotFound => FarmFailureReason.ContainerNotFound,
        _ => FarmFailureReason.GeneralError,
    };

    /// <summary>The trailer names the reason; without it the gRPC status decides.</summary>
    public static FarmFailureReason ReasonOf(string? farmError, RpcStatusCode status)
    {
        var fromTrailer = FromName(farmError);
        if (fromTrailer is { } reason)
        {
            return reason;
        }

        return status switch
        {
            RpcStatusCode.Unavailable => FarmFailureReason.ServiceCommunicationProblem,
            RpcStatusCode.DeadlineExceeded => FarmFailureReason.ServiceTimeout,
            RpcStatusCode.NotFound => FarmFailureReason.MessagingEntityNotFound,
            RpcStatusCode.AlreadyExists => FarmFailureReason.MessagingEntityAlreadyExists,
            RpcStatusCode.InvalidArgument or RpcStatusCode.OutOfRange => FarmFailureReason.InvalidArgument,
            RpcStatusCode.ResourceExhausted => FarmFailureReason.QuotaExceeded,
            RpcStatusCode.Unimplemented => FarmFailureReason.NotSupported,
            RpcStatusCode.FailedPrecondition => FarmFailureReason.GeneralError,
            _ => FarmFailureReason.GeneralError,
        };
    }

    /// <summary>Maps a "farm-error" trailer (a FarmErrorCode name without its prefix); null for none.</summary>
    public static FarmFailureReason? FromName(string? name) => name switch
    {
        null or "" => null,
        "INVALID_ARGUMENT" => FarmFailureReason.InvalidArgument,
        "MESSAGING_ENTITY_NOT_FOUND" => FarmFailureReason.MessagingEntityNotFound,
        "MESSAGING_ENTITY_ALREADY_EXISTS" => FarmFailureReason.MessagingEntityAlreadyExists,
        "MESSAGE_SIZE_EXCEEDED" => FarmFailureReason.MessageSizeExceeded,
        "MESSAGE_LOCK_LOST" => FarmFailureReason.MessageLockLost,
        "MESSAGE_NOT_FOUND" => FarmFailureReason.MessageNotFound,
        "QUOTA_EXCEEDED" => FarmFailureReason.QuotaExceeded,
        "NOT_OWNER" => FarmFailureReason.NotOwner,
        "STALE_EPOCH" => FarmFailureReason.StaleEpoch,
        "SERVICE_BUSY" => FarmFailureReason.ServiceBusy,
        "STORE_UNAVAILABLE" => FarmFailureReason.StoreUnavailable,
        "NOT_SUPPORTED" => FarmFailureReason.NotSupported,
        "CONTAINER_NOT_FOUND" => FarmFailureReason.ContainerNotFound,
        _ => FarmFailureReason.GeneralError,
    };

    public static bool IsSuccessCode(Contracts.V1.FarmErrorCode errorCode) => errorCode == Contracts.V1.FarmErrorCode.Unspecified;

    private static string Describe(FarmFailureReason reason, string? detail, string? entityPath)
    {
        // One readable line: the server's detail when it gave one, else the reason itself.
        var text = string.IsNullOrWhiteSpace(detail) ? DefaultText(reason) : detail.ReplaceLineEndings(" ").Trim();
        return entityPath is null ? $"{text} ({reason})" : $"{text} ({reason}, entity '{entityPath}')";
    }

    private static string DefaultText(FarmFailureReason reason) => reason switch
    {
        FarmFailureReason.ServiceCommunicationProblem => "The farm could not be reached",
        FarmFailureReason.ServiceTimeout => "The operation timed out",
        FarmFailureReason.MessagingEntityNotFound => "The messaging entity was not found",
        FarmFailureReason.MessageLockLost => "The message lock was lost",
        _ => "The operation failed",
    };
}
