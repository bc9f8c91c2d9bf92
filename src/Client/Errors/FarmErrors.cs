using Farm.Contracts;
using Grpc.Core;

namespace Farm.Client;

/// <summary>The one place where wire failures (gRPC status + "farm-error" trailer) become <see cref="FarmException"/>.</summary>
internal static class FarmErrors
{
    public static FarmException FromRpc(RpcException exception, string? entityPath)
    {
        // A broken connection (a keep-alive ping a frozen node never answered) may come as Internal.
        var reason = ReasonOf(exception.FarmError(), exception.AsUnavailableWhenBroken().StatusCode);
        return new FarmException(Describe(reason, exception.TransportFailure() ?? exception.Status.Detail, entityPath), reason, entityPath, exception);
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
    public static FarmFailureReason ReasonOf(string? farmError, StatusCode status)
    {
        var fromTrailer = FromName(farmError);
        if (fromTrailer is { } reason)
        {
            return reason;
        }

        return status switch
        {
            StatusCode.Unavailable => FarmFailureReason.ServiceCommunicationProblem,
            StatusCode.DeadlineExceeded => FarmFailureReason.ServiceTimeout,
            StatusCode.NotFound => FarmFailureReason.MessagingEntityNotFound,
            StatusCode.AlreadyExists => FarmFailureReason.MessagingEntityAlreadyExists,
            StatusCode.InvalidArgument or StatusCode.OutOfRange => FarmFailureReason.InvalidArgument,
            StatusCode.ResourceExhausted => FarmFailureReason.QuotaExceeded,
            StatusCode.Unimplemented => FarmFailureReason.NotSupported,
            StatusCode.FailedPrecondition => FarmFailureReason.GeneralError,
            _ => FarmFailureReason.GeneralError,
        };
    }

    /// <summary>Maps a "farm-error" trailer (a FarmErrorCode name without its prefix); null for none.</summary>
    public static FarmFailureReason? FromName(string? name) =>
        string.IsNullOrEmpty(name) ? null
        : FarmErrorNames.TryParse(name, out var code) ? FromCode(code)
        // A code a newer farm added: still a failure, just not one this client can name.
        : FarmFailureReason.GeneralError;

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
