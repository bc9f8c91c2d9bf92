using Farm.Broker.Administration;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;

namespace Farm.Gateway.Management;

// Topics, subscriptions and rules. A topic and its subscriptions live in the topic's container, so
// everything that touches a loaded topic (counts, new or deleted subscriptions, rule changes,
// settings) runs on the node that owns that container: another node forwards the call there.
internal sealed partial class ManagementService
{
    public override Task<TopicInfo> CreateTopic(CreateTopicRequest request, ServerCallContext context) =>
        admin.CreateTopicAsync(request, context.CancellationToken);

    public override async Task<TopicInfo> GetTopic(GetTopicRequest request, ServerCallContext context)
    {
        var record = await admin.RequireEntityAsync(request.Name, EntityKinds.Topic, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.GetTopicAsync(request, options), context,
            ct => admin.GetTopicAsync(record, ct));
    }

    public override async Task<TopicInfo> UpdateTopic(UpdateTopicRequest request, ServerCallContext context)
    {
        var record = await admin.RequireEntityAsync(request.Name, EntityKinds.Topic, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.UpdateTopicAsync(request, options), context,
            ct => admin.UpdateTopicAsync(record, request, ct));
    }

    public override async Task<DeleteTopicResponse> DeleteTopic(DeleteTopicRequest request, ServerCallContext context)
    {
        var record = await admin.RequireEntityAsync(request.Name, EntityKinds.Topic, context.CancellationToken);
        var response = await OnOwnerAsync(record, (owner, options) => owner.DeleteTopicAsync(request, options), context, async ct =>
        {
            await admin.DeleteTopicAsync(record, ct);
            return new DeleteTopicResponse();
        });
        Forget(record.Name);
        return response;
    }

    public override async Task<ListTopicsResponse> ListTopics(ListTopicsRequest request, ServerCallContext context)
    {
        var response = new ListTopicsResponse();
        foreach (var record in await admin.ListAsync(EntityKinds.Topic, context.CancellationToken))
        {
            try
            {
                response.Topics.Add(await OnOwnerAsync(record, (owner, options) => owner.GetTopicAsync(new GetTopicRequest { Name = record.Name }, options), context,
                    ct => admin.GetTopicAsync(record, ct), hold: false));
            }
            catch (Exception e) when (CallFailures.IsUnavailable(e))
            {
                // Its owner is unreachable right now (a failover): list it without counts.
                response.Topics.Add(EntityAdministration.DescribeTopic(record));
            }
        }
        return response;
    }

    public override async Task<SubscriptionInfo> CreateSubscription(CreateSubscriptionRequest request, ServerCallContext context)
    {
        var topic = await admin.RequireEntityAsync(request.Topic, EntityKinds.Topic, context.CancellationToken);
        await admin.ValidateNewSubscriptionAsync(request, context.CancellationToken);
        return await OnOwnerAsync(topic, (owner, options) => owner.CreateSubscriptionAsync(request, options), context,
            ct => admin.CreateSubscriptionAsync(topic, request, ct));
    }

    public override async Task<SubscriptionInfo> GetSubscription(GetSubscriptionRequest request, ServerCallContext context)
    {
        var record = await admin.RequireSubscriptionAsync(request.Topic, request.Name, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.GetSubscriptionAsync(request, options), context,
            ct => admin.GetSubscriptionAsync(record, ct));
    }

    public override async Task<SubscriptionInfo> UpdateSubscription(UpdateSubscriptionRequest request, ServerCallContext context)
    {
        var record = await admin.RequireSubscriptionAsync(request.Topic, request.Name, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.UpdateSubscriptionAsync(request, options), context,
            ct => admin.UpdateSubscriptionAsync(record, request, ct));
    }

    public override async Task<DeleteSubscriptionResponse> DeleteSubscription(DeleteSubscriptionRequest request, ServerCallContext context)
    {
        var record = await admin.RequireSubscriptionAsync(request.Topic, request.Name, context.CancellationToken);
        var response = await OnOwnerAsync(record, (owner, options) => owner.DeleteSubscriptionAsync(request, options), context, async ct =>
        {
            await admin.DeleteSubscriptionAsync(record, ct);
            return new DeleteSubscriptionResponse();
        });
        Forget(record.Name);
        return response;
    }

    public override async Task<ListSubscriptionsResponse> ListSubscriptions(ListSubscriptionsRequest request, ServerCallContext context)
    {
        var topic = await admin.RequireEntityAsync(request.Topic, EntityKinds.Topic, context.CancellationToken);
        // One call to the owner for all of them: a topic may have a thousand subscriptions.
        return await OnOwnerAsync(topic, (owner, options) => owner.ListSubscriptionsAsync(request, options), context,
            ct => admin.ListSubscriptionsAsync(topic, ct));
    }

    public override async Task<RuleInfo> CreateRule(CreateRuleRequest request, ServerCallContext context)
    {
        var subscription = await admin.RequireSubscriptionAsync(request.Topic, request.Subscription, context.CancellationToken);
        EntityAdministration.ValidateRule(request.Rule);
        return await OnOwnerAsync(subscription, (owner, options) => owner.CreateRuleAsync(request, options), context,
            ct => admin.CreateRuleAsync(subscription, request.Rule, ct));
    }

    public override async Task<DeleteRuleResponse> DeleteRule(DeleteRuleRequest request, ServerCallContext context)
    {
        var subscription = await admin.RequireSubscriptionAsync(request.Topic, request.Subscription, context.CancellationToken);
        return await OnOwnerAsync(subscription, (owner, options) => owner.DeleteRuleAsync(request, options), context, async ct =>
        {
            await admin.DeleteRuleAsync(subscription, request.Name, ct);
            return new DeleteRuleResponse();
        });
    }

    public override async Task<RuleInfo> GetRule(GetRuleRequest request, ServerCallContext context)
    {
        var subscription = await admin.RequireSubscriptionAsync(request.Topic, request.Subscription, context.CancellationToken);
        return await admin.GetRuleAsync(subscription, request.Name, context.CancellationToken);
    }

    public override async Task<RuleInfo> UpdateRule(UpdateRuleRequest request, ServerCallContext context)
    {
        var subscription = await admin.RequireSubscriptionAsync(request.Topic, request.Subscription, context.CancellationToken);
        EntityAdministration.ValidateRule(request.Rule);
        return await OnOwnerAsync(subscription, (owner, options) => owner.UpdateRuleAsync(request, options), context,
            ct => admin.UpdateRuleAsync(subscription, request.Rule, ct));
    }

    public override async Task<ListRulesResponse> ListRules(ListRulesRequest request, ServerCallContext context)
    {
        var subscription = await admin.RequireSubscriptionAsync(request.Topic, request.Subscription, context.CancellationToken);
        return await admin.ListRulesAsync(subscription, context.CancellationToken);
    }
}
