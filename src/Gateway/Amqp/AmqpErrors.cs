using Farm.Broker;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Encoding;
using Microsoft.Azure.Amqp.Framing;

namespace Farm.Gateway.Amqp;

/// <summary>
/// Farm's failures as the AMQP error conditions Azure Service Bus uses, which its SDKs turn into
/// their error codes (MessagingEntityNotFound, MessageLockLost, MessageSizeExceeded,
/// UnauthorizedAccess, ServiceBusy, ...), and as the status codes of $management answers.
/// </summary>
internal static class AmqpErrors
{
    /// <summary>
    /// An unknown entity: the SDKs recognise it by its description ("The messaging entity 'X' could
    /// not be found"), whatever the condition, so the description is worded that way.
    /// </summary>
    public static readonly AmqpSymbol EntityNotFound = AmqpErrorCode.NotFound;
    public static readonly AmqpSymbol EntityAlreadyExists = "com.microsoft:entity-already-exists";
    public static readonly AmqpSymbol MessageLockLost = "com.microsoft:message-lock-lost";
    public static readonly AmqpSymbol MessageNotFound = "com.microsoft:message-not-found";
    public static readonly AmqpSymbol ServerBusy = "com.microsoft:server-busy";
    public static readonly AmqpSymbol Timeout = "com.microsoft:timeout";
    public static readonly AmqpSymbol ArgumentError = "com.microsoft:argument-error";

    /// <summary>A failure of a call to the farm (or of reading the request) as an AMQP error.</summary>
    public static Error ToError(Exception e)
    {
        var (condition, description) = Classify(e);
        return new Error { Condition = condition, Description = description };
    }

    public static AmqpException ToException(Exception e) => e as AmqpException ?? new AmqpException(ToError(e));

    public static (AmqpSymbol Condition, string Description) Classify(Exception e)
    {
        switch (e)
        {
            case AmqpException amqp:
                return (amqp.Error.Condition, amqp.Error.Description ?? amqp.Message);
            case OperationCanceledException:
                return (Timeout, "The operation did not complete in time.");
        }
        var code = e switch
        {
            BrokerException broker => broker.Code,
            RpcException rpc when FarmErrorNames.TryParse(rpc.FarmError(), out var farm) => farm,
            _ => (FarmErrorCode?)null,
        };
        var message = e is RpcException r ? r.Status.Detail : e.Message;
        if (code is { } known)
        {
            return (ConditionOf(known), known == FarmErrorCode.MessagingEntityNotFound ? EntityNotFoundDescription(message) : message);
        }
        return e switch
        {
            RpcException { StatusCode: StatusCode.Unavailable or StatusCode.DeadlineExceeded or StatusCode.Cancelled } =>
                (ServerBusy, $"The farm could not serve the request now; try again ({message})."),
            RpcException { StatusCode: StatusCode.InvalidArgument } => (ArgumentError, message),
            RpcException { StatusCode: StatusCode.NotFound } => (EntityNotFound, EntityNotFoundDescription(message)),
            _ => (AmqpErrorCode.InternalError, message),
        };
    }

    private static string EntityNotFoundDescription(string message) =>
        message.Contains("could not be found", StringComparison.Ordinal) ? message : message.Replace(" was not found", " could not be found", StringComparison.Ordinal);

    public static AmqpSymbol ConditionOf(FarmErrorCode code) => code switch
    {
        FarmErrorCode.MessagingEntityNotFound => EntityNotFound,
        FarmErrorCode.MessagingEntityAlreadyExists => EntityAlreadyExists,
        FarmErrorCode.MessageLockLost => MessageLockLost,
        FarmErrorCode.MessageNotFound => MessageNotFound,
        FarmErrorCode.MessageSizeExceeded => AmqpErrorCode.MessageSizeExceeded,
        FarmErrorCode.QuotaExceeded => AmqpErrorCode.ResourceLimitExceeded,
        FarmErrorCode.InvalidArgument => ArgumentError,
        FarmErrorCode.NotSupported => AmqpErrorCode.NotImplemented,
        FarmErrorCode.NotOwner or FarmErrorCode.StaleEpoch or FarmErrorCode.ServiceBusy or FarmErrorCode.StoreUnavailable => ServerBusy,
        FarmErrorCode.ContainerNotFound => AmqpErrorCode.NotFound,
        _ => AmqpErrorCode.InternalError,
    };

    /// <summary>The HTTP-style status a $management answer carries for a failure.</summary>
    public static int StatusCodeOf(AmqpSymbol condition) => condition.Value switch
    {
        "amqp:not-found" or "com.microsoft:message-not-found" => 404,
        "com.microsoft:message-lock-lost" => 410,
        "amqp:unauthorized-access" => 401,
        "com.microsoft:entity-already-exists" => 409,
        "amqp:link:message-size-exceeded" => 413,
        "com.microsoft:argument-error" or "amqp:invalid-field" or "amqp:decode-error" => 400,
        "amqp:not-implemented" => 501,
        "amqp:resource-limit-exceeded" => 403,
        "com.microsoft:server-busy" => 503,
        "com.microsoft:timeout" => 408,
        _ => 500,
    };

    /// <summary>True for failures a client may simply try again (the entity is between owners, the farm is busy).</summary>
    public static bool IsTransient(Exception e) => Classify(e).Condition is var condition && (condition.Equals(ServerBusy) || condition.Equals(Timeout));
}
