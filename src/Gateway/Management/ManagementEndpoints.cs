using Farm.Broker.Rpc;
using Farm.Contracts.V1;

namespace Farm.Gateway.Management;

internal static class ManagementEndpoints
{
    public const string Prefix = "/farm.v1.Management/";

    public static void MapManagement(this IEndpointRouteBuilder endpoints, ManagementService service)
    {
        endpoints.MapUnary<CreateQueueRequest, QueueInfo>(Prefix + "CreateQueue", CreateQueueRequest.Parser, service.CreateQueueAsync);
        endpoints.MapUnary<GetQueueRequest, QueueInfo>(Prefix + "GetQueue", GetQueueRequest.Parser, service.GetQueueAsync);
        endpoints.MapUnary<UpdateQueueRequest, QueueInfo>(Prefix + "UpdateQueue", UpdateQueueRequest.Parser, service.UpdateQueueAsync);
        endpoints.MapUnary<DeleteQueueRequest, DeleteQueueResponse>(Prefix + "DeleteQueue", DeleteQueueRequest.Parser, service.DeleteQueueAsync);
        endpoints.MapUnary<ListQueuesRequest, ListQueuesResponse>(Prefix + "ListQueues", ListQueuesRequest.Parser, service.ListQueuesAsync);
        endpoints.MapUnary<CreateContainerRequest, ContainerInfo>(Prefix + "CreateContainer", CreateContainerRequest.Parser, service.CreateContainerAsync);
        endpoints.MapUnary<ListContainersRequest, ListContainersResponse>(Prefix + "ListContainers", ListContainersRequest.Parser, service.ListContainersAsync);
        endpoints.MapUnary<GetStatusRequest, FarmStatus>(Prefix + "GetStatus", GetStatusRequest.Parser, service.GetStatusAsync);
        endpoints.MapUnary<MoveContainerRequest, ContainerInfo>(Prefix + "MoveContainer", MoveContainerRequest.Parser, service.MoveContainerAsync);
        endpoints.MapUnary<DrainNodeRequest, NodeInfo>(Prefix + "DrainNode", DrainNodeRequest.Parser, service.DrainNodeAsync);
        endpoints.MapUnary<TakeContainerRequest, ContainerInfo>(Prefix + "TakeContainer", TakeContainerRequest.Parser, service.TakeContainerAsync);
    }
}
