using Farm.Contracts.V1;
using Grpc.Core;
using Grpc.Net.Client;

namespace Farm.Client;

/// <summary>
/// The generated gRPC clients of one endpoint, over one channel, its send stream and its receive session. Calls to a
/// gateway carry no headers and calls to a broker the direct header, so the headers of the first
/// send are those of every send to this endpoint.
/// </summary>
internal sealed class FarmStubs(GrpcChannel channel, FarmClientOptions options) : IDisposable
{
    private SendStreamLink? _sends;
    private ReceiveSession? _receives;

    public GrpcChannel Channel { get; } = channel;

    public Messaging.MessagingClient Messaging { get; } = new(channel);

    public Management.ManagementClient Management { get; } = new(channel);

    public NodeControl.NodeControlClient NodeControl { get; } = new(channel);

    /// <summary>A send: over the endpoint's send stream, or a Send call each when <see cref="FarmClientOptions.SendOverStream"/> is off.</summary>
    public AsyncUnaryCall<SendResponse> Send(SendRequest request, CallOptions callOptions)
    {
        if (!options.SendOverStream)
        {
            return Messaging.SendAsync(request, callOptions);
        }
        var sends = Volatile.Read(ref _sends);
        if (sends is null)
        {
            var created = new SendStreamLink(Messaging, callOptions.Headers, options.TimeProvider);
            sends = Interlocked.CompareExchange(ref _sends, created, null) ?? created;
        }
        return sends.Send(request, callOptions);
    }

    /// <summary>A receive link: over the endpoint's receive session, or a Receive call of its own when <see cref="FarmClientOptions.ReceiveOverSession"/> is off.</summary>
    public AsyncDuplexStreamingCall<ReceiveRequest, ReceiveResponse> Receive(CallOptions callOptions)
    {
        if (!options.ReceiveOverSession)
        {
            return Messaging.Receive(callOptions);
        }
        var receives = Volatile.Read(ref _receives);
        if (receives is null)
        {
            var created = new ReceiveSession(Messaging, callOptions.Headers);
            receives = Interlocked.CompareExchange(ref _receives, created, null) ?? created;
        }
        return receives.Receive(callOptions);
    }

    public void Dispose()
    {
        Volatile.Read(ref _sends)?.Dispose();
        Volatile.Read(ref _receives)?.Dispose();
        Channel.Dispose();
    }
}

/// <summary>
/// One unary operation of Farm's services: its name (for errors), whether it is a messaging call
/// on an entity (which redirect mode sends straight to the owner), and the generated client method.
/// <see cref="AsRepeat"/> gives the request for the tries after one that failed with its outcome
/// unknown (a Settle or Send that says it is a repeat): a marked copy, never the request changed
/// in place, which the failed try may still be writing.
/// </summary>
internal sealed record FarmCall<TRequest, TResponse>(string Name, bool IsEntityMessaging, Func<FarmStubs, TRequest, CallOptions, AsyncUnaryCall<TResponse>> Invoke)
{
    public Func<TRequest, TRequest>? AsRepeat { get; init; }

    /// <summary>The request to try next after <paramref name="failed"/> failed.</summary>
    public TRequest Repeat(TRequest failed) => AsRepeat is { } asRepeat ? asRepeat(failed) : failed;
}

/// <summary>Every unary call the SDK makes, named once.</summary>
internal static class FarmCalls
{
    private static FarmCall<TRequest, TResponse> Messaging<TRequest, TResponse>(string name, Func<Messaging.MessagingClient, TRequest, CallOptions, AsyncUnaryCall<TResponse>> invoke) =>
        new(name, IsEntityMessaging: true, (stubs, request, options) => invoke(stubs.Messaging, request, options));

    private static FarmCall<TRequest, TResponse> Management<TRequest, TResponse>(string name, Func<Management.ManagementClient, TRequest, CallOptions, AsyncUnaryCall<TResponse>> invoke) =>
        new(name, IsEntityMessaging: false, (stubs, request, options) => invoke(stubs.Management, request, options));

    private static FarmCall<TRequest, TResponse> NodeControl<TRequest, TResponse>(string name, Func<NodeControl.NodeControlClient, TRequest, CallOptions, AsyncUnaryCall<TResponse>> invoke) =>
        new(name, IsEntityMessaging: false, (stubs, request, options) => invoke(stubs.NodeControl, request, options));

    public static readonly FarmCall<SendRequest, SendResponse> Send = new("Send", IsEntityMessaging: true, (stubs, request, options) => stubs.Send(request, options))
    {
        // Sent again, it may have been stored by the try whose answer was lost, maybe by a node that is gone since.
        AsRepeat = static r => r.Repeat ? r : new SendRequest(r) { Repeat = true },
    };
    public static readonly FarmCall<SettleRequest, SettleResponse> Settle = Messaging<SettleRequest, SettleResponse>("Settle", (c, r, o) => c.SettleAsync(r, o)) with
    {
        // Sent again, it may find its settlements done by the try whose answer was lost.
        AsRepeat = static r => r.Repeat ? r : new SettleRequest(r) { Repeat = true },
    };
    public static readonly FarmCall<RenewLockRequest, RenewLockResponse> RenewLock = Messaging<RenewLockRequest, RenewLockResponse>("RenewLock", (c, r, o) => c.RenewLockAsync(r, o));
    public static readonly FarmCall<ReceiveDeferredRequest, ReceiveBatchResponse> ReceiveDeferred = Messaging<ReceiveDeferredRequest, ReceiveBatchResponse>("ReceiveDeferred", (c, r, o) => c.ReceiveDeferredAsync(r, o));
    public static readonly FarmCall<PeekRequest, PeekResponse> Peek = Messaging<PeekRequest, PeekResponse>("Peek", (c, r, o) => c.PeekAsync(r, o));
    public static readonly FarmCall<ResubmitDeadLettersRequest, ResubmitDeadLettersResponse> ResubmitDeadLetters = Messaging<ResubmitDeadLettersRequest, ResubmitDeadLettersResponse>("ResubmitDeadLetters", (c, r, o) => c.ResubmitDeadLettersAsync(r, o));
    public static readonly FarmCall<DeleteMessagesRequest, DeleteMessagesResponse> DeleteMessages = Messaging<DeleteMessagesRequest, DeleteMessagesResponse>("DeleteMessages", (c, r, o) => c.DeleteMessagesAsync(r, o));
    public static readonly FarmCall<CancelScheduledRequest, CancelScheduledResponse> CancelScheduled = Messaging<CancelScheduledRequest, CancelScheduledResponse>("CancelScheduled", (c, r, o) => c.CancelScheduledAsync(r, o));

    public static readonly FarmCall<CreateQueueRequest, QueueInfo> CreateQueue = Management<CreateQueueRequest, QueueInfo>("CreateQueue", (c, r, o) => c.CreateQueueAsync(r, o));
    public static readonly FarmCall<GetQueueRequest, QueueInfo> GetQueue = Management<GetQueueRequest, QueueInfo>("GetQueue", (c, r, o) => c.GetQueueAsync(r, o));
    public static readonly FarmCall<UpdateQueueRequest, QueueInfo> UpdateQueue = Management<UpdateQueueRequest, QueueInfo>("UpdateQueue", (c, r, o) => c.UpdateQueueAsync(r, o));
    public static readonly FarmCall<DeleteQueueRequest, DeleteQueueResponse> DeleteQueue = Management<DeleteQueueRequest, DeleteQueueResponse>("DeleteQueue", (c, r, o) => c.DeleteQueueAsync(r, o));
    public static readonly FarmCall<ListQueuesRequest, ListQueuesResponse> ListQueues = Management<ListQueuesRequest, ListQueuesResponse>("ListQueues", (c, r, o) => c.ListQueuesAsync(r, o));
    public static readonly FarmCall<CreateContainerRequest, ContainerInfo> CreateContainer = Management<CreateContainerRequest, ContainerInfo>("CreateContainer", (c, r, o) => c.CreateContainerAsync(r, o));
    public static readonly FarmCall<AddServerRequest, ServerInfo> AddServer = Management<AddServerRequest, ServerInfo>("AddServer", (c, r, o) => c.AddServerAsync(r, o));
    public static readonly FarmCall<ListServersRequest, ListServersResponse> ListServers = Management<ListServersRequest, ListServersResponse>("ListServers", (c, r, o) => c.ListServersAsync(r, o));
    public static readonly FarmCall<RemoveServerRequest, RemoveServerResponse> RemoveServer = Management<RemoveServerRequest, RemoveServerResponse>("RemoveServer", (c, r, o) => c.RemoveServerAsync(r, o));
    public static readonly FarmCall<ListContainersRequest, ListContainersResponse> ListContainers = Management<ListContainersRequest, ListContainersResponse>("ListContainers", (c, r, o) => c.ListContainersAsync(r, o));
    public static readonly FarmCall<GetStatusRequest, FarmStatus> GetStatus = Management<GetStatusRequest, FarmStatus>("GetStatus", (c, r, o) => c.GetStatusAsync(r, o));
    public static readonly FarmCall<CreateAccessPolicyRequest, AccessPolicyInfo> CreateAccessPolicy = Management<CreateAccessPolicyRequest, AccessPolicyInfo>("CreateAccessPolicy", (c, r, o) => c.CreateAccessPolicyAsync(r, o));
    public static readonly FarmCall<ListAccessPoliciesRequest, ListAccessPoliciesResponse> ListAccessPolicies = Management<ListAccessPoliciesRequest, ListAccessPoliciesResponse>("ListAccessPolicies", (c, r, o) => c.ListAccessPoliciesAsync(r, o));
    public static readonly FarmCall<DeleteAccessPolicyRequest, DeleteAccessPolicyResponse> DeleteAccessPolicy = Management<DeleteAccessPolicyRequest, DeleteAccessPolicyResponse>("DeleteAccessPolicy", (c, r, o) => c.DeleteAccessPolicyAsync(r, o));
    public static readonly FarmCall<RenewAccessPolicyKeyRequest, AccessPolicyInfo> RenewAccessPolicyKey = Management<RenewAccessPolicyKeyRequest, AccessPolicyInfo>("RenewAccessPolicyKey", (c, r, o) => c.RenewAccessPolicyKeyAsync(r, o));

    public static readonly FarmCall<CreateTopicRequest, TopicInfo> CreateTopic = Management<CreateTopicRequest, TopicInfo>("CreateTopic", (c, r, o) => c.CreateTopicAsync(r, o));
    public static readonly FarmCall<GetTopicRequest, TopicInfo> GetTopic = Management<GetTopicRequest, TopicInfo>("GetTopic", (c, r, o) => c.GetTopicAsync(r, o));
    public static readonly FarmCall<UpdateTopicRequest, TopicInfo> UpdateTopic = Management<UpdateTopicRequest, TopicInfo>("UpdateTopic", (c, r, o) => c.UpdateTopicAsync(r, o));
    public static readonly FarmCall<DeleteTopicRequest, DeleteTopicResponse> DeleteTopic = Management<DeleteTopicRequest, DeleteTopicResponse>("DeleteTopic", (c, r, o) => c.DeleteTopicAsync(r, o));
    public static readonly FarmCall<ListTopicsRequest, ListTopicsResponse> ListTopics = Management<ListTopicsRequest, ListTopicsResponse>("ListTopics", (c, r, o) => c.ListTopicsAsync(r, o));
    public static readonly FarmCall<CreateSubscriptionRequest, SubscriptionInfo> CreateSubscription = Management<CreateSubscriptionRequest, SubscriptionInfo>("CreateSubscription", (c, r, o) => c.CreateSubscriptionAsync(r, o));
    public static readonly FarmCall<GetSubscriptionRequest, SubscriptionInfo> GetSubscription = Management<GetSubscriptionRequest, SubscriptionInfo>("GetSubscription", (c, r, o) => c.GetSubscriptionAsync(r, o));
    public static readonly FarmCall<UpdateSubscriptionRequest, SubscriptionInfo> UpdateSubscription = Management<UpdateSubscriptionRequest, SubscriptionInfo>("UpdateSubscription", (c, r, o) => c.UpdateSubscriptionAsync(r, o));
    public static readonly FarmCall<DeleteSubscriptionRequest, DeleteSubscriptionResponse> DeleteSubscription = Management<DeleteSubscriptionRequest, DeleteSubscriptionResponse>("DeleteSubscription", (c, r, o) => c.DeleteSubscriptionAsync(r, o));
    public static readonly FarmCall<ListSubscriptionsRequest, ListSubscriptionsResponse> ListSubscriptions = Management<ListSubscriptionsRequest, ListSubscriptionsResponse>("ListSubscriptions", (c, r, o) => c.ListSubscriptionsAsync(r, o));
    public static readonly FarmCall<CreateRuleRequest, RuleInfo> CreateRule = Management<CreateRuleRequest, RuleInfo>("CreateRule", (c, r, o) => c.CreateRuleAsync(r, o));
    public static readonly FarmCall<DeleteRuleRequest, DeleteRuleResponse> DeleteRule = Management<DeleteRuleRequest, DeleteRuleResponse>("DeleteRule", (c, r, o) => c.DeleteRuleAsync(r, o));
    public static readonly FarmCall<GetRuleRequest, RuleInfo> GetRule = Management<GetRuleRequest, RuleInfo>("GetRule", (c, r, o) => c.GetRuleAsync(r, o));
    public static readonly FarmCall<UpdateRuleRequest, RuleInfo> UpdateRule = Management<UpdateRuleRequest, RuleInfo>("UpdateRule", (c, r, o) => c.UpdateRuleAsync(r, o));
    public static readonly FarmCall<ListRulesRequest, ListRulesResponse> ListRules = Management<ListRulesRequest, ListRulesResponse>("ListRules", (c, r, o) => c.ListRulesAsync(r, o));

    public static readonly FarmCall<MoveContainerRequest, ContainerInfo> MoveContainer = NodeControl<MoveContainerRequest, ContainerInfo>("MoveContainer", (c, r, o) => c.MoveContainerAsync(r, o));
    public static readonly FarmCall<DrainNodeRequest, NodeInfo> DrainNode = NodeControl<DrainNodeRequest, NodeInfo>("DrainNode", (c, r, o) => c.DrainNodeAsync(r, o));
}
