using Farm.Broker.Rpc;
using Farm.Contracts.V1;

namespace Farm.Gateway.Management;

internal static class ManagementEndpoints
{
    public const string Prefix = "/farm.v1.Management/";

    /// <summary>Node-to-node and operator calls: their own service, so an access check can tell them from a client's.</summary>
    public const string NodeControlPrefix = "/farm.v1.NodeControl/";

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
        endpoints.MapUnary<MoveContainerRequest, ContainerInfo>(NodeControlPrefix + "MoveContainer", MoveContainerRequest.Parser, service.MoveContainerAsync);
        endpoints.MapUnary<DrainNodeRequest, NodeInfo>(NodeControlPrefix + "DrainNode", DrainNodeRequest.Parser, service.DrainNodeAsync);
        endpoints.MapUnary<TakeContainerRequest, ContainerInfo>(NodeControlPrefix + "TakeContainer", TakeContainerRequest.Parser, service.TakeContainerAsync);
        endpoints.MapUnary<CreateTopicRequest, TopicInfo>(Prefix + "CreateTopic", CreateTopicRequest.Parser, service.CreateTopicAsync);
        endpoints.MapUnary<GetTopicRequest, TopicInfo>(Prefix + "GetTopic", GetTopicRequest.Parser, service.GetTopicAsync);
        endpoints.MapUnary<UpdateTopicRequest, TopicInfo>(Prefix + "UpdateTopic", UpdateTopicRequest.Parser, service.UpdateTopicAsync);
        endpoints.MapUnary<DeleteTopicRequest, DeleteTopicResponse>(Prefix + "DeleteTopic", DeleteTopicRequest.Parser, service.DeleteTopicAsync);
        endpoints.MapUnary<ListTopicsRequest, ListTopicsResponse>(Prefix + "ListTopics", ListTopicsRequest.Parser, service.ListTopicsAsync);
        endpoints.MapUnary<CreateSubscriptionRequest, SubscriptionInfo>(Prefix + "CreateSubscription", CreateSubscriptionRequest.Parser, service.CreateSubscriptionAsync);
        endpoints.MapUnary<GetSubscriptionRequest, SubscriptionInfo>(Prefix + "GetSubscription", GetSubscriptionRequest.Parser, service.GetSubscriptionAsync);
        endpoints.MapUnary<UpdateSubscriptionRequest, SubscriptionInfo>(Prefix + "UpdateSubscription", UpdateSubscriptionRequest.Parser, service.UpdateSubscriptionAsync);
        endpoints.MapUnary<DeleteSubscriptionRequest, DeleteSubscriptionResponse>(Prefix + "DeleteSubscription", DeleteSubscriptionRequest.Parser, service.DeleteSubscriptionAsync);
        endpoints.MapUnary<ListSubscriptionsRequest, ListSubscriptionsResponse>(Prefix + "ListSubscriptions", ListSubscriptionsRequest.Parser, service.ListSubscriptionsAsync);
        endpoints.MapUnary<CreateRuleRequest, RuleInfo>(Prefix + "CreateRule", CreateRuleRequest.Parser, service.CreateRuleAsync);
        endpoints.MapUnary<DeleteRuleRequest, DeleteRuleResponse>(Prefix + "DeleteRule", DeleteRuleRequest.Parser, service.DeleteRuleAsync);
        endpoints.MapUnary<GetRuleRequest, RuleInfo>(Prefix + "GetRule", GetRuleRequest.Parser, service.GetRuleAsync);
        endpoints.MapUnary<UpdateRuleRequest, RuleInfo>(Prefix + "UpdateRule", UpdateRuleRequest.Parser, service.UpdateRuleAsync);
        endpoints.MapUnary<ListRulesRequest, ListRulesResponse>(Prefix + "ListRules", ListRulesRequest.Parser, service.ListRulesAsync);
    }
}
