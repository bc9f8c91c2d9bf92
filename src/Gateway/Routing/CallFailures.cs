using Farm.Broker;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;

namespace Farm.Gateway.Routing;

/// <summary>
/// Reads a failure the same way whether this node's broker threw it (<see cref="BrokerException"/>)
/// or a forwarded call came back with it (<see cref="RpcException"/> with a "farm-error" trailer).
/// </summary>
internal static class CallFailures
{
    public static FarmErrorCode? CodeOf(Exception e) => e switch
    {
        BrokerException broker => broker.Code,
        RpcException rpc when FarmErrorNames.TryParse(rpc.FarmError(), out var code) => code,
        _ => null,
    };

    /// <summary>The owner a NOT_OWNER failure names, or null.</summary>
    public static string? OwnerOf(Exception e) => e switch
    {
        BrokerException { Code: FarmErrorCode.NotOwner, Owner: { Length: > 0 } owner } => owner,
        RpcException rpc when CodeOf(rpc) == FarmErrorCode.NotOwner => rpc.FarmOwner(),
        _ => null,
    };

    /// <summary>The peer could not be reached or gave up without saying why (no "farm-error").</summary>
    public static bool IsUnreachable(Exception e) => e is RpcException { StatusCode: StatusCode.Unavailable } rpc && rpc.FarmError() is null;

    /// <summary>
    /// "Nothing was written, the entity is between owners": the owner moved, lost its epoch, is
    /// stopping, or cannot be reached. Safe to try again. Not an overloaded node's SERVICE_BUSY: held
    /// and tried again at once, it would only add to the load (the client backs off instead).
    /// </summary>
    public static bool IsBetweenOwners(Exception e) =>
        (CodeOf(e) is FarmErrorCode.NotOwner or FarmErrorCode.StaleEpoch or FarmErrorCode.ServiceBusy && !IsOverloaded(e)) || IsUnreachable(e);

    /// <summary>An overloaded node shedding load (here, or the owner's answer: RESOURCE_EXHAUSTED with SERVICE_BUSY).</summary>
    public static bool IsOverloaded(Exception e) => e switch
    {
        BrokerException broker => broker.Overloaded,
        RpcException { StatusCode: StatusCode.ResourceExhausted } rpc => CodeOf(rpc) == FarmErrorCode.ServiceBusy,
        _ => false,
    };

    /// <summary>Unavailable as a client sees it: a transient failure here or at the owner.</summary>
    public static bool IsUnavailable(Exception e) =>
        e is RpcException { StatusCode: StatusCode.Unavailable } || (e is BrokerException broker && Grpc.FarmErrorInterceptor.StatusOf(broker.Code) == StatusCode.Unavailable);
}
