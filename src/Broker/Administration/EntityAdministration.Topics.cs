using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.ContainerStore.FarmDatabase;
using Farm.Contracts.V1;

namespace Farm.Broker.Administration;

// Topics, subscriptions and rules. A topic and its subscriptions live in the topic's container, so
// everything that touches a loaded topic (counts, new or deleted subscriptions, rule changes,
// settings) runs on the node that owns that container.
public sealed partial class EntityAdministration
{
    public async Task<TopicInfo> CreateTopicAsync(CreateTopicRequest request, CancellationToken ct)
    {
        if (EntityNames.Validate(request.Name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var settings = new TopicSettings().With(request.Properties);
        var containerId = await PlaceAsync(request.ContainerId, ct).ConfigureAwait(false);
        try
        {
            return DescribeTopic(await Farm.CreateEntityAsync(request.Name, EntityKinds.Topic, containerId, settings.ToJson(), ct).ConfigureAwait(false));
        }
        catch (EntityAlreadyExistsException)
        {
            throw FarmErrors.EntityExists(request.Name);
        }
    }

    /// <summary>The topic with its subscription and message counts (on its owner).</summary>
    public async Task<TopicInfo> GetTopicAsync(EntityRecord record, CancellationToken ct)
    {
        var info = DescribeTopic(record);
        var topic = await node.LoadTopicAsync(record, ct).ConfigureAwait(false);
        var (count, bytes) = topic.GetCounts();
        info.SubscriptionCount = topic.Subscriptions.Count;
        info.MessageCount = count;
        info.SizeInBytes = bytes;
        return info;
    }

    /// <summary>The topic as the farm database has it, without counts.</summary>
    public static TopicInfo DescribeTopic(EntityRecord record) => new()
    {
        Name = record.Name,
        ContainerId = record.ContainerId,
        Properties = TopicSettings.FromJson(record.PropertiesJson).ToProto(),
        CreatedAt = ToTimestamp(record.CreatedAt),
        UpdatedAt = ToTimestamp(record.UpdatedAt),
    };

    public async Task<TopicInfo> UpdateTopicAsync(EntityRecord record, UpdateTopicRequest request, CancellationToken ct)
    {
        var settings = TopicSettings.FromJson(record.PropertiesJson).With(request.Properties);
        var updated = await Farm.UpdateEntityAsync(record.Name, settings.ToJson(), ct).ConfigureAwait(false) ?? throw FarmErrors.EntityNotFound(request.Name);
        node.RefreshSettings(updated);
        return await GetTopicAsync(updated, ct).ConfigureAwait(false);
    }

    /// <summary>Deletes the topic with its subscriptions, rules and messages (on its owner).</summary>
    public async Task DeleteTopicAsync(EntityRecord record, CancellationToken ct)
    {
        var children = await Farm.ListChildEntitiesAsync(record.Id, ct).ConfigureAwait(false);
        // The records go first (subscriptions and rules with them), so nothing finds the topic while it is purged.
        await Farm.DeleteEntityAsync(record.Name, ct).ConfigureAwait(false);
        await node.DropEntityAsync(record, children.Select(c => c.Id).ToList()).ConfigureAwait(false);
    }

    /// <summary>
    /// Checks a new subscription before it is routed: a bad name, rule or forwarding target fails on
    /// the node the client called. Returns the rule it starts with (the default when none is given).
    /// </summary>
    public async Task<RuleProperties> ValidateNewSubscriptionAsync(CreateSubscriptionRequest request, CancellationToken ct)
    {
        if (EntityNames.ValidateSubscriptionName(request.Name) is { } error)
        {
            throw FarmErrors.Invalid(error);
        }
        var settings = new SubscriptionSettings().With(request.Properties, request.Topic, request.Name);
        var rule = request.Rule ?? RuleDefinitions.DefaultRule;
        if (string.IsNullOrEmpty(rule.Name))
        {
            rule = rule.Clone();
            rule.Name = Rules.Rule.DefaultRuleName;
        }
        RuleDefinitions.Parse(rule);
        await ValidateSubscriptionForwardTargetsAsync(request.Topic, request.Name, settings, ct).ConfigureAwait(false);
        return rule;
    }

    /// <summary>Creates the subscription (on the topic's owner, whose loaded topic starts fanning out to it).</summary>
    public async Task<SubscriptionInfo> CreateSubscriptionAsync(EntityRecord topic, CreateSubscriptionRequest request, CancellationToken ct)
    {
        var rule = await ValidateNewSubscriptionAsync(request, ct).ConfigureAwait(false);
        var settings = new SubscriptionSettings().With(request.Properties, topic.Name, request.Name);
        var path = EntityNames.SubscriptionPath(topic.Name, request.Name);
        EntityRecord record;
        try
        {
            record = await Farm.CreateChildEntityAsync(topic.Id, path, EntityKinds.Subscription, settings.ToJson(), rule.Name, RuleDefinitions.ToJson(rule), ct).ConfigureAwait(false);
        }
        catch (EntityAlreadyExistsException)
        {
            throw FarmErrors.EntityExists(path);
        }
        catch (KeyNotFoundException)
        {
            throw FarmErrors.EntityNotFound(topic.Name);
        }
        await node.AddSubscriptionAsync(record, ct).ConfigureAwait(false);
        return DescribeSubscription(record, new MessageCounts());
    }

    /// <summary>The subscription with its counts (on its topic's owner).</summary>
    public async Task<SubscriptionInfo> GetSubscriptionAsync(EntityRecord record, CancellationToken ct)
    {
        var queue = await node.LoadAsync(record, ct).ConfigureAwait(false);
        return DescribeSubscription(record, queue.GetCounts());
    }

    public async Task<SubscriptionInfo> UpdateSubscriptionAsync(EntityRecord record, UpdateSubscriptionRequest request, CancellationToken ct)
    {
        EntityNames.TrySplitSubscriptionPath(record.Name, out var topicName, out var name);
        var settings = SubscriptionSettings.FromJson(record.PropertiesJson).With(request.Properties, topicName, name);
        await ValidateSubscriptionForwardTargetsAsync(topicName, name, settings, ct).ConfigureAwait(false);
        var updated = await Farm.UpdateEntityAsync(record.Name, settings.ToJson(), ct).ConfigureAwait(false) ?? throw FarmErrors.EntityNotFound(record.Name);
        node.RefreshSettings(updated);
        return await GetSubscriptionAsync(updated, ct).ConfigureAwait(false);
    }

    public async Task DeleteSubscriptionAsync(EntityRecord record, CancellationToken ct)
    {
        await Farm.DeleteEntityAsync(record.Name, ct).ConfigureAwait(false);
        await node.DropSubscriptionAsync(record).ConfigureAwait(false);
    }

    /// <summary>Every subscription of the topic with its counts (on the topic's owner: one call, not one per subscription).</summary>
    public async Task<ListSubscriptionsResponse> ListSubscriptionsAsync(EntityRecord topic, CancellationToken ct)
    {
        var children = await Farm.ListChildEntitiesAsync(topic.Id, ct).ConfigureAwait(false);
        var response = new ListSubscriptionsResponse();
        foreach (var child in children.OrderBy(c => c.Name, StringComparer.OrdinalIgnoreCase))
        {
            response.Subscriptions.Add(await GetSubscriptionAsync(child, ct).ConfigureAwait(false));
        }
        return response;
    }

    /// <summary>Parses a rule before it is routed: a malformed filter or action fails where the client called.</summary>
    public static RuleProperties ValidateRule(RuleProperties? rule)
    {
        if (rule is null)
        {
            throw FarmErrors.Invalid("A rule is required.");
        }
        RuleDefinitions.Parse(rule);
        return rule;
    }

    /// <summary>Adds a rule (on the owner, whose loaded subscription re-reads its rules).</summary>
    public async Task<RuleInfo> CreateRuleAsync(EntityRecord subscription, RuleProperties? rule, CancellationToken ct)
    {
        rule = ValidateRule(rule);
        RuleRecord record;
        try
        {
            record = await Farm.CreateRuleAsync(subscription.Id, rule.Name, RuleDefinitions.ToJson(rule), ct).ConfigureAwait(false);
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
        await node.RefreshRulesAsync(subscription, ct).ConfigureAwait(false);
        return DescribeRule(subscription, record);
    }

    public async Task<RuleInfo> UpdateRuleAsync(EntityRecord subscription, RuleProperties? rule, CancellationToken ct)
    {
        rule = ValidateRule(rule);
        var record = await Farm.UpdateRuleAsync(subscription.Id, rule.Name, RuleDefinitions.ToJson(rule), ct).ConfigureAwait(false)
            ?? throw RuleNotFound(subscription, rule.Name);
        await node.RefreshRulesAsync(subscription, ct).ConfigureAwait(false);
        return DescribeRule(subscription, record);
    }

    public async Task DeleteRuleAsync(EntityRecord subscription, string name, CancellationToken ct)
    {
        if (!await Farm.DeleteRuleAsync(subscription.Id, name, ct).ConfigureAwait(false))
        {
            throw RuleNotFound(subscription, name);
        }
        await node.RefreshRulesAsync(subscription, ct).ConfigureAwait(false);
    }

    /// <summary>A rule as the farm database has it (anywhere).</summary>
    public async Task<RuleInfo> GetRuleAsync(EntityRecord subscription, string name, CancellationToken ct)
    {
        var rules = await Farm.ListRulesAsync(subscription.Id, ct).ConfigureAwait(false);
        var rule = rules.FirstOrDefault(r => string.Equals(r.Name, name, StringComparison.OrdinalIgnoreCase))
            ?? throw RuleNotFound(subscription, name);
        return DescribeRule(subscription, rule);
    }

    public async Task<ListRulesResponse> ListRulesAsync(EntityRecord subscription, CancellationToken ct)
    {
        var rules = await Farm.ListRulesAsync(subscription.Id, ct).ConfigureAwait(false);
        return new ListRulesResponse { Rules = { rules.Select(r => DescribeRule(subscription, r)) } };
    }

    private static BrokerException RuleNotFound(EntityRecord subscription, string rule) =>
        FarmErrors.Create(FarmErrorCode.MessagingEntityNotFound, $"The subscription '{subscription.Name}' has no rule named '{rule}'.");

    private async Task ValidateSubscriptionForwardTargetsAsync(string topic, string subscription, SubscriptionSettings settings, CancellationToken ct)
    {
        foreach (var target in new[] { settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo })
        {
            if (target is null)
            {
                continue;
            }
            var record = await Farm.GetEntityAsync(target, ct).ConfigureAwait(false);
            if (record is null || record.Kind is not (EntityKinds.Queue or EntityKinds.Topic))
            {
                throw FarmErrors.Invalid($"The forwarding target '{target}' is not an existing queue or topic; create it first.");
            }
        }
        await ForwardingLoops.EnsureNoneAsync(Farm, EntityNames.SubscriptionPath(topic, subscription), topic,
            [settings.ForwardTo, settings.ForwardDeadLetteredMessagesTo], ct).ConfigureAwait(false);
    }

    private static SubscriptionInfo DescribeSubscription(EntityRecord record, MessageCounts counts)
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

    private static RuleInfo DescribeRule(EntityRecord subscription, RuleRecord rule)
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
}
