namespace Farm.Client;

/// <summary>The gRPC method paths the client calls.</summary>
internal static class RpcMethods
{
    public const string Send = "/farm.v1.Messaging/Send";
    public const string Receive = "/farm.v1.Messaging/Receive";
    public const string ReceiveBatch = "/farm.v1.Messaging/ReceiveBatch";
    public const string Settle = "/farm.v1.Messaging/Settle";
    public const string RenewLock = "/farm.v1.Messaging/RenewLock";
    public const string ReceiveDeferred = "/farm.v1.Messaging/ReceiveDeferred";
    public const string Peek = "/farm.v1.Messaging/Peek";
    public const string CancelScheduled = "/farm.v1.Messaging/CancelScheduled";
    public const string Lookup = "/farm.v1.Messaging/Lookup";

    public const string CreateQueue = "/farm.v1.Management/CreateQueue";
    public const string GetQueue = "/farm.v1.Management/GetQueue";
    public const string UpdateQueue = "/farm.v1.Management/UpdateQueue";
    public const string DeleteQueue = "/farm.v1.Management/DeleteQueue";
    public const string ListQueues = "/farm.v1.Management/ListQueues";
    public const string CreateContainer = "/farm.v1.Management/CreateContainer";
    public const string ListContainers = "/farm.v1.Management/ListContainers";
    public const string GetStatus = "/farm.v1.Management/GetStatus";
    public const string MoveContainer = "/farm.v1.NodeControl/MoveContainer";
    public const string DrainNode = "/farm.v1.NodeControl/DrainNode";

    public const string CreateTopic = "/farm.v1.Management/CreateTopic";
    public const string GetTopic = "/farm.v1.Management/GetTopic";
    public const string UpdateTopic = "/farm.v1.Management/UpdateTopic";
    public const string DeleteTopic = "/farm.v1.Management/DeleteTopic";
    public const string ListTopics = "/farm.v1.Management/ListTopics";
    public const string CreateSubscription = "/farm.v1.Management/CreateSubscription";
    public const string GetSubscription = "/farm.v1.Management/GetSubscription";
    public const string UpdateSubscription = "/farm.v1.Management/UpdateSubscription";
    public const string DeleteSubscription = "/farm.v1.Management/DeleteSubscription";
    public const string ListSubscriptions = "/farm.v1.Management/ListSubscriptions";
    public const string CreateRule = "/farm.v1.Management/CreateRule";
    public const string DeleteRule = "/farm.v1.Management/DeleteRule";
    public const string GetRule = "/farm.v1.Management/GetRule";
    public const string UpdateRule = "/farm.v1.Management/UpdateRule";
    public const string ListRules = "/farm.v1.Management/ListRules";
}
