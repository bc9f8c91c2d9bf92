using Farm.Broker.Rpc;
using Farm.Contracts.V1;
using Microsoft.AspNetCore.Routing;

namespace Farm.Broker.Messaging;

/// <summary>Maps the farm.v1.Messaging gRPC methods onto a <see cref="MessagingService"/>.</summary>
public static class MessagingEndpoints
{
    public const string Prefix = "/farm.v1.Messaging/";

    public static void MapMessaging(this IEndpointRouteBuilder endpoints, MessagingService service)
    {
        endpoints.MapUnary<SendRequest, SendResponse>(Prefix + "Send", SendRequest.Parser, service.SendAsync);
        endpoints.MapDuplex<ReceiveRequest, ReceiveResponse>(Prefix + "Receive", ReceiveRequest.Parser, service.ReceiveAsync);
        endpoints.MapUnary<ReceiveBatchRequest, ReceiveBatchResponse>(Prefix + "ReceiveBatch", ReceiveBatchRequest.Parser, service.ReceiveBatchAsync);
        endpoints.MapUnary<SettleRequest, SettleResponse>(Prefix + "Settle", SettleRequest.Parser, service.SettleAsync);
        endpoints.MapUnary<RenewLockRequest, RenewLockResponse>(Prefix + "RenewLock", RenewLockRequest.Parser, service.RenewLockAsync);
        endpoints.MapUnary<ReceiveDeferredRequest, ReceiveBatchResponse>(Prefix + "ReceiveDeferred", ReceiveDeferredRequest.Parser, service.ReceiveDeferredAsync);
        endpoints.MapUnary<PeekRequest, PeekResponse>(Prefix + "Peek", PeekRequest.Parser, service.PeekAsync);
        endpoints.MapUnary<CancelScheduledRequest, CancelScheduledResponse>(Prefix + "CancelScheduled", CancelScheduledRequest.Parser, service.CancelScheduledAsync);
    }
}
