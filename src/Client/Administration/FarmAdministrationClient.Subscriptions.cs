using System.Runtime.CompilerServices;
using Farm.Contracts.V1;

namespace Farm.Client;

// Subscriptions and their rules, named and shaped like Azure's ServiceBusAdministrationClient.
public sealed partial class FarmAdministrationClient
{
    /// <summary>Creates a subscription with the <c>$Default</c> rule (every message) and the farm's default properties.</summary>
    public Task<SubscriptionProperties> CreateSubscriptionAsync(string topicName, string subscriptionName, CancellationToken cancellationToken = default)
        => CreateSubscriptionAsync(new CreateSubscriptionOptions(topicName, subscriptionName), cancellationToken);

    /// <summary>Creates a subscription with the <c>$Default</c> rule; only the properties assigned on <paramref name="options"/> are sent.</summary>
    public Task<SubscriptionProperties> CreateSubscriptionAsync(CreateSubscriptionOptions options, CancellationToken cancellationToken = default)
        => CreateSubscriptionCoreAsync(options, rule: null, cancellationToken);

    /// <summary>Creates a subscription whose first rule is <paramref name="rule"/> instead of <c>$Default</c>.</summary>
    public Task<SubscriptionProperties> CreateSubscriptionAsync(CreateSubscriptionOptions options, CreateRuleOptions rule, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(rule);
        return CreateSubscriptionCoreAsync(options, rule, cancellationToken);
    }

    public async Task<SubscriptionProperties> GetSubscriptionAsync(string topicName, string subscriptionName, CancellationToken cancellationToken = default)
        => SubscriptionMapper.FromInfo(await GetSubscriptionInfoAsync(topicName, subscriptionName, cancellationToken).ConfigureAwait(false));

    public async Task<SubscriptionRuntimeProperties> GetSubscriptionRuntimePropertiesAsync(string topicName, string subscriptionName, CancellationToken cancellationToken = default)
        => SubscriptionMapper.RuntimeFromInfo(await GetSubscriptionInfoAsync(topicName, subscriptionName, cancellationToken).ConfigureAwait(false));

    /// <summary>Updates the properties assigned on <paramref name="subscription"/> since it was fetched (or created); returns the result.</summary>
    public async Task<SubscriptionProperties> UpdateSubscriptionAsync(SubscriptionProperties subscription, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(subscription);
        var request = new UpdateSubscriptionRequest
        {
            Topic = subscription.TopicName,
            Name = subscription.SubscriptionName,
            Properties = SubscriptionMapper.ToProto(subscription, onlyAssigned: true),
        };
        var info = await CallAsync(FarmCalls.UpdateSubscription, request, subscription.Path, cancellationToken).ConfigureAwait(false);
        return SubscriptionMapper.FromInfo(info);
    }

    /// <summary>Deletes the subscription, its rules and its messages.</summary>
    public async Task DeleteSubscriptionAsync(string topicName, string subscriptionName, CancellationToken cancellationToken = default)
    {
        var path = SubscriptionPathOf(topicName, subscriptionName);
        var request = new DeleteSubscriptionRequest { Topic = topicName, Name = subscriptionName };
        await CallAsync(FarmCalls.DeleteSubscription, request, path, cancellationToken).ConfigureAwait(false);
    }

    public async Task<bool> SubscriptionExistsAsync(string topicName, string subscriptionName, CancellationToken cancellationToken = default)
    {
        try
        {
            await GetSubscriptionInfoAsync(topicName, subscriptionName, cancellationToken).ConfigureAwait(false);
            return true;
        }
        catch (FarmException e) when (e.Reason == FarmFailureReason.MessagingEntityNotFound)
        {
            return false;
        }
    }

    public async Task<IReadOnlyList<SubscriptionProperties>> ListSubscriptionsAsync(string topicName, CancellationToken cancellationToken = default)
    {
        var response = await ListSubscriptionInfosAsync(topicName, cancellationToken).ConfigureAwait(false);
        return response.Subscriptions.Select(SubscriptionMapper.FromInfo).ToList();
    }

    /// <summary>Every subscription of the topic with its message counts, in one call.</summary>
    public async Task<IReadOnlyList<(SubscriptionProperties Properties, SubscriptionRuntimeProperties Runtime)>> ListSubscriptionsWithRuntimePropertiesAsync(string topicName, CancellationToken cancellationToken = default)
    {
        var response = await ListSubscriptionInfosAsync(topicName, cancellationToken).ConfigureAwait(false);
        return response.Subscriptions.Select(s => (SubscriptionMapper.FromInfo(s), SubscriptionMapper.RuntimeFromInfo(s))).ToList();
    }

    /// <summary>Azure-style enumeration of a topic's subscriptions.</summary>
    public async IAsyncEnumerable<SubscriptionProperties> GetSubscriptionsAsync(string topicName, [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        foreach (var subscription in await ListSubscriptionsAsync(topicName, cancellationToken).ConfigureAwait(false))
        {
            yield return subscription;
        }
    }

    public async IAsyncEnumerable<SubscriptionRuntimeProperties> GetSubscriptionsRuntimePropertiesAsync(string topicName, [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        var response = await ListSubscriptionInfosAsync(topicName, cancellationToken).ConfigureAwait(false);
        foreach (var subscription in response.Subscriptions)
        {
            yield return SubscriptionMapper.RuntimeFromInfo(subscription);
        }
    }

    /// <summary>
    /// Adds a rule to a subscription; it applies to messages sent afterwards. A malformed SQL
    /// filter or action fails with <see cref="FarmFailureReason.InvalidArgument"/> naming the position.
    /// </summary>
    public async Task<RuleProperties> CreateRuleAsync(string topicName, string subscriptionName, CreateRuleOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        var path = RulePathOf(topicName, subscriptionName, options.Name);
        var request = new CreateRuleRequest { Topic = topicName, Subscription = subscriptionName, Rule = RuleMapper.ToProto(options) };
        var info = await CallAsync(FarmCalls.CreateRule, request, path, cancellationToken).ConfigureAwait(false);
        return RuleMapper.FromInfo(info);
    }

    /// <summary>Removes a rule; messages sent afterwards are no longer selected by it.</summary>
    public async Task DeleteRuleAsync(string topicName, string subscriptionName, string ruleName, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(ruleName);
        var path = RulePathOf(topicName, subscriptionName, ruleName);
        var request = new DeleteRuleRequest { Topic = topicName, Subscription = subscriptionName, Name = ruleName };
        await CallAsync(FarmCalls.DeleteRule, request, path, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>One rule of a subscription; <see cref="FarmFailureReason.MessagingEntityNotFound"/> when it has none of that name.</summary>
    public async Task<RuleProperties> GetRuleAsync(string topicName, string subscriptionName, string ruleName, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(ruleName);
        var path = RulePathOf(topicName, subscriptionName, ruleName);
        var request = new GetRuleRequest { Topic = topicName, Subscription = subscriptionName, Name = ruleName };
        return RuleMapper.FromInfo(await CallAsync(FarmCalls.GetRule, request, path, cancellationToken).ConfigureAwait(false));
    }

    /// <summary>
    /// Replaces the filter and action of the rule named <c>rule.Name</c> in one step, as Azure's
    /// UpdateRuleAsync does: no message sent meanwhile is matched by neither or both versions.
    /// <see cref="FarmFailureReason.MessagingEntityNotFound"/> when there is no such rule.
    /// </summary>
    public async Task<RuleProperties> UpdateRuleAsync(string topicName, string subscriptionName, RuleProperties rule, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(rule);
        var path = RulePathOf(topicName, subscriptionName, rule.Name);
        var options = new CreateRuleOptions(rule.Name, rule.Filter) { Action = rule.Action };
        var request = new UpdateRuleRequest { Topic = topicName, Subscription = subscriptionName, Rule = RuleMapper.ToProto(options) };
        return RuleMapper.FromInfo(await CallAsync(FarmCalls.UpdateRule, request, path, cancellationToken).ConfigureAwait(false));
    }

    public async Task<bool> RuleExistsAsync(string topicName, string subscriptionName, string ruleName, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(ruleName);
        var rules = await ListRulesAsync(topicName, subscriptionName, cancellationToken).ConfigureAwait(false);
        return rules.Any(r => string.Equals(r.Name, ruleName, StringComparison.OrdinalIgnoreCase));
    }

    public async Task<IReadOnlyList<RuleProperties>> ListRulesAsync(string topicName, string subscriptionName, CancellationToken cancellationToken = default)
    {
        var path = SubscriptionPathOf(topicName, subscriptionName);
        var request = new ListRulesRequest { Topic = topicName, Subscription = subscriptionName };
        var response = await CallAsync(FarmCalls.ListRules, request, path, cancellationToken).ConfigureAwait(false);
        return response.Rules.Select(RuleMapper.FromInfo).ToList();
    }

    /// <summary>Azure-style enumeration of a subscription's rules.</summary>
    public async IAsyncEnumerable<RuleProperties> GetRulesAsync(string topicName, string subscriptionName, [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        foreach (var rule in await ListRulesAsync(topicName, subscriptionName, cancellationToken).ConfigureAwait(false))
        {
            yield return rule;
        }
    }

    private async Task<SubscriptionProperties> CreateSubscriptionCoreAsync(CreateSubscriptionOptions options, CreateRuleOptions? rule, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(options);
        var request = new CreateSubscriptionRequest
        {
            Topic = options.TopicName,
            Name = options.SubscriptionName,
            Properties = SubscriptionMapper.ToProto(options, onlyAssigned: true),
            Rule = rule is null ? null : RuleMapper.ToProto(rule),
        };
        var info = await CallAsync(FarmCalls.CreateSubscription, request, options.Path, cancellationToken).ConfigureAwait(false);
        return SubscriptionMapper.FromInfo(info);
    }

    private Task<SubscriptionInfo> GetSubscriptionInfoAsync(string topicName, string subscriptionName, CancellationToken cancellationToken)
    {
        var path = SubscriptionPathOf(topicName, subscriptionName);
        var request = new GetSubscriptionRequest { Topic = topicName, Name = subscriptionName };
        return CallAsync(FarmCalls.GetSubscription, request, path, cancellationToken);
    }

    private Task<ListSubscriptionsResponse> ListSubscriptionInfosAsync(string topicName, CancellationToken cancellationToken)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(topicName);
        return CallAsync(FarmCalls.ListSubscriptions, new ListSubscriptionsRequest { Topic = topicName }, topicName, cancellationToken);
    }

    /// <summary>"topic/Subscriptions/sub", for error messages; checks both names are given.</summary>
    private static string SubscriptionPathOf(string topicName, string subscriptionName)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(topicName);
        ArgumentException.ThrowIfNullOrWhiteSpace(subscriptionName);
        return FarmEntityPath.SubscriptionPath(topicName, subscriptionName);
    }

    /// <summary>"topic/Subscriptions/sub/Rules/rule" (Azure's form), so a failure names the rule and its subscription.</summary>
    private static string RulePathOf(string topicName, string subscriptionName, string ruleName)
        => $"{SubscriptionPathOf(topicName, subscriptionName)}/Rules/{ruleName}";
}
