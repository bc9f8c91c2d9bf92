using Farm.Broker;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;
using Google.Protobuf.WellKnownTypes;

namespace Farm.Gateway.Management;

// Topics, subscriptions and rules. A topic and its subscriptions live in the topic's container, so
// everything that touches a loaded topic (counts, new or deleted subscriptions, rule changes,
// settings) runs on the node that owns that container: another node forwards the call there.
internal sealed partial class ManagementService
{
    public override async Task<TopicInfo> CreateTopic(CreateTopicRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        if (EntityNames.Validate(request.Name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var settings = new TopicSettings().With(request.Properties);
        var containerId = await PlaceAsync(request.ContainerId, ct);
        EntityRecord record;
        try
        {
            record = await node.Farm.CreateEntityAsync(request.Name, EntityKinds.Topic, containerId, settings.ToJson(), ct);
        }
        catch (EntityAlreadyExistsException)
        {
            throw FarmErrors.EntityExists(request.Name);
        }
        return ToTopicInfo(record, null);
    }

    public override async Task<TopicInfo> GetTopic(GetTopicRequest request, ServerCallContext context)
    {
        var record = await GetRecordAsync(request.Name, EntityKinds.Topic, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.GetTopicAsync(request, options), context,
            () => ToTopicInfoAsync(record, context.CancellationToken));
    }

    public override async Task<TopicInfo> UpdateTopic(UpdateTopicRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var record = await GetRecordAsync(request.Name, EntityKinds.Topic, ct);
        return await OnOwnerAsync(record, (owner, options) => owner.UpdateTopicAsync(request, options), context, async () =>
        {
            var settings = TopicSettings.FromJson(record.PropertiesJson).With(request.Properties);
            var updated = await node.Farm.UpdateEntityAsync(record.Name, settings.ToJson(), ct) ?? throw FarmErrors.EntityNotFound(request.Name);
            node.RefreshSettings(updated);
            return await ToTopicInfoAsync(updated, ct);
        });
    }

    public override async Task<DeleteTopicResponse> DeleteTopic(DeleteTopicRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var record = await GetRecordAsync(request.Name, EntityKinds.Topic, ct);
        var response = await OnOwnerAsync(record, (owner, options) => owner.DeleteTopicAsync(request, options), context, async () =>
        {
            var children = await node.Farm.ListChildEntitiesAsync(record.Id, ct);
            // The records go first (subscriptions and rules with them), so nothing finds the topic while it is purged.
            await node.Farm.DeleteEntityAsync(record.Name, ct);
            await node.DropEntityAsync(record, children.Select(c => c.Id).ToList());
            return new DeleteTopicResponse();
        });
        node.ForgetEntity(record.Name);
        return response;
    }

    public override async Task<ListTopicsResponse> ListTopics(ListTopicsRequest request, ServerCallContext context)
    {
        var records = await node.Farm.ListEntitiesAsync(EntityKinds.Topic, context.CancellationToken);
        var response = new ListTopicsResponse();
        foreach (var record in records.OrderBy(r => r.Name, StringComparer.OrdinalIgnoreCase))
        {
            try
            {
                response.Topics.Add(await OnOwnerAsync(record, (owner, options) => owner.GetTopicAsync(new GetTopicRequest { Name = record.Name }, options), context,
                    () => ToTopicInfoAsync(record, context.CancellationToken), hold: false));
            }
            catch (Exception e) when (CallFailures.IsUnavailable(e))
            {
                // Its owner is unreachable right now (a failover): list it without counts.
                response.Topics.Add(ToTopicInfo(record, null));
            }
        }
        return response;
    }

    public override async Task<SubscriptionInfo> CreateSubscription(CreateSubscriptionRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var topic = await GetRecordAsync(request.Topic, EntityKinds.Topic, ct);
        if (EntityNames.ValidateSubscriptionName(request.Name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var settings = new SubscriptionSettings().With(request.Properties, topic.Name, request.Name);
        var rule = request.Rule ?? RuleDefinitions.DefaultRule;
        if (string.IsNullOrEmpty(rule.Name))
        {
            rule = rule.Clone();
            rule.Name = Broker.Rules.Rule.DefaultRuleName;
        }
        RuleDefinitions.Parse(rule);
        await ValidateSubscriptionForwardTargetsAsync(topic.Name, request.Name, settings, ct);
        return await OnOwnerAsync(topic, (owner, options) => owner.CreateSubscriptionAsync(request, options), context, async () =>
        {
            var path = EntityNames.SubscriptionPath(topic.Name, request.Name);
            EntityRecord record;
            try
            {
                record = await node.Farm.CreateChildEntityAsync(topic.Id, path, EntityKinds.Subscription, settings.ToJson(), rule.Name, RuleDefinitions.ToJson(rule), ct);
            }
            catch (EntityAlreadyExistsException)
            {
                throw FarmErrors.EntityExists(path);
            }
            catch (KeyNotFoundException)
            {
                throw FarmErrors.EntityNotFound(topic.Name);
            }
            await node.AddSubscriptionAsync(record, ct);
            return ToSubscriptionInfo(record, new MessageCounts());
        });
    }

    public override async Task<SubscriptionInfo> GetSubscription(GetSubscriptionRequest request, ServerCallContext context)
    {
        var record = await GetSubscriptionRecordAsync(request.Topic, request.Name, context.CancellationToken);
        return await OnOwnerAsync(record, (owner, options) => owner.GetSubscriptionAsync(request, options), context,
            () => ToSubscriptionInfoAsync(record, context.CancellationToken));
    }

    public override async Task<SubscriptionInfo> UpdateSubscription(UpdateSubscriptionRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var record = await GetSubscriptionRecordAsync(request.Topic, request.Name, ct);
        return await OnOwnerAsync(record, (owner, options) => owner.UpdateSubscriptionAsync(request, options), context, async () =>
        {
            EntityNames.TrySplitSubscriptionPath(record.Name, out var topicName, out var name);
            var settings = SubscriptionSettings.FromJson(record.PropertiesJson).With(request.Properties, topicName, name);
            await ValidateSubscriptionForwardTargetsAsync(topicName, name, settings, ct);
            var updated = await node.Farm.UpdateEntityAsync(record.Name, settings.ToJson(), ct) ?? throw FarmErrors.EntityNotFound(record.Name);
            node.RefreshSettings(updated);
            return await ToSubscriptionInfoAsync(updated, ct);
        });
    }

    public override async Task<DeleteSubscriptionResponse> DeleteSubscription(DeleteSubscriptionRequest request, ServerCallContext context)
    {
        var record = await GetSubscriptionRecordAsync(request.Topic, request.Name, context.CancellationToken);
        var response = await OnOwnerAsync(record, (owner, options) => owner.DeleteSubscriptionAsync(request, options), context, async () =>
        {
            await node.Farm.DeleteEntityAsync(record.Name, context.CancellationToken);
            await node.DropSubscriptionAsync(record);
            return new DeleteSubscriptionResponse();
        });
        node.ForgetEntity(record.Name);
        return response;
    }

    public override async Task<ListSubscriptionsResponse> ListSubscriptions(ListSubscriptionsRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var topic = await GetRecordAsync(request.Topic, EntityKinds.Topic, ct);
        // One call to the owner for all of them: a topic may have a thousand subscriptions.
        return await OnOwnerAsync(topic, (owner, options) => owner.ListSubscriptionsAsync(request, options), context, async () =>
        {
            var children = await node.Farm.ListChildEntitiesAsync(topic.Id, ct);
            var response = new ListSubscriptionsResponse();
            foreach (var child in children.OrderBy(c => c.Name, StringComparer.OrdinalIgnoreCase))
            {
                response.Subscriptions.Add(await ToSubscriptionInfoAsync(child, ct));
            }
            return response;
        });
    }

    public override async Task<RuleInfo> CreateRule(CreateRuleRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var subscription = await GetSubscriptionRecordAsync(request.Topic, request.Subscription, ct);
        var rule = request.Rule ?? throw FarmErrors.Invalid("A rule is required.");
        RuleDefinitions.Parse(rule);
        return await OnOwnerAsync(subscription, (owner, options) => owner.CreateRuleAsync(request, options), context, async () =>
        {
            RuleRecord record;
            try
            {
                record = await node.Farm.CreateRuleAsync(subscription.Id, rule.Name, RuleDefinitions.ToJson(rule), ct);
            }
            catch (RuleAlreadyExistsException)
            {
                throw FarmErrors.Create(FarmErrorCode.MessagingEntityAlreadyExists,
                    $"The subscription '{subscription.Name}' already has a rule named '{rule.Name}'.");
            }
            catch (KeyNotFoundException)
            {
                throw FarmErrors.EntityNotFound(subscription.Name);
            }
            await node.RefreshRulesAsync(subscription, ct);
            return ToRuleInfo(subscription, record);
        });
    }

    public override async Task<DeleteRuleResponse> DeleteRule(DeleteRuleRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var subscription = await GetSubscriptionRecordAsync(request.Topic, request.Subscription, ct);
        return await OnOwnerAsync(subscription, (owner, options) => owner.DeleteRuleAsync(request, options), context, async () =>
        {
            if (!await node.Farm.DeleteRuleAsync(subscription.Id, request.Name, ct))
            {
                throw RuleNotFound(subscription, request.Name);
            }
            await node.RefreshRulesAsync(subscription, ct);
            return new DeleteRuleResponse();
        });
    }

    public override async Task<RuleInfo> GetRule(GetRuleRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var subscription = await GetSubscriptionRecordAsync(request.Topic, request.Subscription, ct);
        var rules = await node.Farm.ListRulesAsync(subscription.Id, ct);
        var rule = rules.FirstOrDefault(r => string.Equals(r.Name, request.Name, StringComparison.OrdinalIgnoreCase))
            ?? throw RuleNotFound(subscription, request.Name);
        return ToRuleInfo(subscription, rule);
    }

    public override async Task<RuleInfo> UpdateRule(UpdateRuleRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var subscription = await GetSubscriptionRecordAsync(request.Topic, request.Subscription, ct);
        var rule = request.Rule ?? throw FarmErrors.Invalid("A rule is required.");
        RuleDefinitions.Parse(rule);
        return await OnOwnerAsync(subscription, (owner, options) => owner.UpdateRuleAsync(request, options), context, async () =>
        {
            var record = await node.Farm.UpdateRuleAsync(subscription.Id, rule.Name, RuleDefinitions.ToJson(rule), ct)
                ?? throw RuleNotFound(subscription, rule.Name);
            await node.RefreshRulesAsync(subscription, ct);
            return ToRuleInfo(subscription, record);
        });
    }

    private static BrokerException RuleNotFound(EntityRecord subscription, string rule) =>
        FarmErrors.Create(FarmErrorCode.MessagingEntityNotFound,
            $"The subscription '{subscription.Name}' has no rule named '{rule}'.");

    public override async Task<ListRulesResponse> ListRules(ListRulesRequest request, ServerCallContext context)
    {
        var ct = context.CancellationToken;
        var subscription = await GetSubscriptionRecordAsync(request.Topic, request.Subscription, ct);
        var rules = await node.Farm.ListRulesAsync(subscription.Id, ct);
        return new ListRulesResponse { Rules = { rules.Select(r => ToRuleInfo(subscription, r)) } };
    }

    /// <summary>The container the caller named (which must exist), or else the one with the fewest entities.</summary>
    private async Task<long> PlaceAsync(long requested, CancellationToken ct)
    {
        if (requested != 0)
        {
            return await node.Farm.GetContainerAsync(requested, ct) is null ? throw FarmErrors.ContainerNotFound(requested) : requested;
        }
        var containers = await node.Farm.ListContainersAsync(ct);
        return containers.OrderBy(c => c.EntityCount).ThenBy(c => c.Id).First().Id;
    }

    private async Task ValidateSubscriptionForwardTargetsAsync(string topic, string subscription, SubscriptionSettings settings, CancellationToken ct)
    {
        foreach (var target in new[] { settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo })
        {
            if (target is null)
            {
                continue;
            }
            var record = await node.Farm.GetEntityAsync(target, ct);
            if (record is null || record.Kind is not (EntityKinds.Queue or EntityKinds.Topic))
            {
                throw FarmErrors.Invalid($"The forwarding target '{target}' is not an existing queue or topic; create it first.");
            }
        }
        await ForwardingLoops.EnsureNoneAsync(node.Farm, EntityNames.SubscriptionPath(topic, subscription), topic,
            [settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo], ct);
    }

    private async Task<EntityRecord> GetRecordAsync(string name, string kind, CancellationToken ct)
    {
        if (EntityNames.Validate(name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var record = await node.Farm.GetEntityAsync(name, ct);
        if (record is null || record.Kind != kind)
        {
            throw FarmErrors.Create(FarmErrorCode.MessagingEntityNotFound, $"The {kind} '{name}' does not exist.");
        }
        return record;
    }

    private async Task<EntityRecord> GetSubscriptionRecordAsync(string topic, string name, CancellationToken ct)
    {
        if ((EntityNames.Validate(topic) ?? EntityNames.ValidateSubscriptionName(name)) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var path = EntityNames.SubscriptionPath(topic, name);
        var record = await node.Farm.GetEntityAsync(path, ct);
        if (record is null || record.Kind != EntityKinds.Subscription)
        {
            var topicRecord = await node.Farm.GetEntityAsync(topic, ct);
            throw FarmErrors.Create(FarmErrorCode.MessagingEntityNotFound,
                topicRecord is null || topicRecord.Kind != EntityKinds.Topic
                    ? $"The topic '{topic}' does not exist."
                    : $"The subscription '{path}' does not exist.");
        }
        return record;
    }

    private async Task<TopicInfo> ToTopicInfoAsync(EntityRecord record, CancellationToken ct)
    {
        var topic = await node.LoadTopicAsync(record, ct);
        return ToTopicInfo(record, topic);
    }

    private static TopicInfo ToTopicInfo(EntityRecord record, TopicEntity? loaded)
    {
        var info = new TopicInfo
        {
            Name = record.Name,
            ContainerId = record.ContainerId,
            Properties = TopicSettings.FromJson(record.PropertiesJson).ToProto(),
            CreatedAt = ToTimestamp(record.CreatedAt),
            UpdatedAt = ToTimestamp(record.UpdatedAt),
        };
        if (loaded is not null)
        {
            var (count, bytes) = loaded.GetCounts();
            info.SubscriptionCount = loaded.Subscriptions.Count;
            info.MessageCount = count;
            info.SizeInBytes = bytes;
        }
        return info;
    }

    private async Task<SubscriptionInfo> ToSubscriptionInfoAsync(EntityRecord record, CancellationToken ct)
    {
        var queue = await node.LoadAsync(record, ct);
        return ToSubscriptionInfo(record, queue.GetCounts());
    }

    private static SubscriptionInfo ToSubscriptionInfo(EntityRecord record, MessageCounts counts)
    {
        EntityNames.TrySplitSubscriptionPath(record.Name, out var topic, out var name);
        return new SubscriptionInfo
        {
            Topic = topic,
            Name = name,
            Path = record.Name,
            Properties = SubscriptionSettings.FromJson(record.PropertiesJson).ToProto(),
            Counts = counts,
            CreatedAt = ToTimestamp(record.CreatedAt),
            UpdatedAt = ToTimestamp(record.UpdatedAt),
        };
    }

    private static RuleInfo ToRuleInfo(EntityRecord subscription, RuleRecord rule)
    {
        EntityNames.TrySplitSubscriptionPath(subscription.Name, out var topic, out var name);
        return new RuleInfo
        {
            Topic = topic,
            Subscription = name,
            Rule = RuleDefinitions.FromJson(rule.DefinitionJson),
            CreatedAt = ToTimestamp(rule.CreatedAt),
        };
    }

    private static Timestamp ToTimestamp(DateTime utc) => Timestamp.FromDateTime(DateTime.SpecifyKind(utc, DateTimeKind.Utc));
}
