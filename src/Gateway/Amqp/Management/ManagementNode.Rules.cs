using Farm.Broker.Entities;
using Farm.Contracts.V1;
using Farm.Gateway.Amqp.Messages;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Encoding;
using CorrelationFilter = Farm.Contracts.V1.CorrelationFilter;
using SqlFilter = Farm.Contracts.V1.SqlFilter;

namespace Farm.Gateway.Amqp.Management;

/// <summary>
/// A subscription's rules over $management (the SDKs' rule manager): add-rule and remove-rule by
/// name, and enumerate-rules, which answers each rule as the described types Azure uses
/// (rule description, SQL / true / correlation filter, SQL or empty action) with numeric descriptors.
/// </summary>
internal sealed partial class ManagementNode
{
    private const ulong RuleDescriptionCode = 0x0000013700000004;
    private const ulong SqlFilterCode = 0x0000001370000006;
    private const ulong TrueFilterCode = 0x0000001370000007;
    private const ulong CorrelationFilterCode = 0x0000001370000009;
    private const ulong EmptyRuleActionCode = 0x0000013700000005;
    private const ulong SqlRuleActionCode = 0x0000013700000006;

    private static (string Topic, string Subscription) SubscriptionOf(string entityPath)
    {
        var parts = entityPath.Split('/');
        if (parts.Length != 3 || !parts[1].Equals("Subscriptions", StringComparison.OrdinalIgnoreCase) || !EntityNames.IsSubscriptionPath(entityPath))
        {
            throw new AmqpException(AmqpErrors.ArgumentError, $"Rules belong to subscriptions ('TOPIC/Subscriptions/NAME'); '{entityPath}' is not one.");
        }
        return (parts[0], parts[2]);
    }

    private async Task<AmqpMessage> AddRuleAsync(string entityPath, AmqpMap body)
    {
        var (topic, subscription) = SubscriptionOf(entityPath);
        if (!body.TryGetValue<string>(new MapKey("rule-name"), out var name) || string.IsNullOrEmpty(name))
        {
            throw new AmqpException(AmqpErrorCode.InvalidField, "add-rule needs 'rule-name'.");
        }
        if (!body.TryGetValue<AmqpMap>(new MapKey("rule-description"), out var description) || description is null)
        {
            throw new AmqpException(AmqpErrorCode.InvalidField, "add-rule needs 'rule-description'.");
        }
        var rule = new RuleProperties { Name = name };
        if (description.TryGetValue<AmqpMap>(new MapKey("sql-filter"), out var sql) && sql is not null)
        {
            sql.TryGetValue<string>(new MapKey("expression"), out var expression);
            rule.SqlFilter = new SqlFilter { Expression = expression ?? string.Empty };
        }
        else if (description.TryGetValue<AmqpMap>(new MapKey("correlation-filter"), out var correlation) && correlation is not null)
        {
            rule.CorrelationFilter = CorrelationFilterOf(correlation);
        }
        if (description.TryGetValue<AmqpMap>(new MapKey("sql-rule-action"), out var action) && action is not null
            && action.TryGetValue<string>(new MapKey("expression"), out var actionExpression) && !string.IsNullOrEmpty(actionExpression))
        {
            rule.SqlAction = actionExpression;
        }
        await calls.Node.Management.CreateRuleAsync(new CreateRuleRequest { Topic = topic, Subscription = subscription, Rule = rule }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        return Answer(200, "OK");
    }

    private static CorrelationFilter CorrelationFilterOf(AmqpMap map)
    {
        string? Text(string key) => map.TryGetValue<object>(new MapKey(key), out var value) && value is not null ? value.ToString() : null;
        var filter = new CorrelationFilter();
        if (Text("correlation-id") is { } correlationId) filter.CorrelationId = correlationId;
        if (Text("message-id") is { } messageId) filter.MessageId = messageId;
        if (Text("to") is { } to) filter.To = to;
        if (Text("reply-to") is { } replyTo) filter.ReplyTo = replyTo;
        if (Text("label") is { } label) filter.Subject = label;
        if (Text("session-id") is { } sessionId) filter.SessionId = sessionId;
        if (Text("reply-to-session-id") is { } replyToSessionId) filter.ReplyToSessionId = replyToSessionId;
        if (Text("content-type") is { } contentType) filter.ContentType = contentType;
        if (map.TryGetValue<AmqpMap>(new MapKey("properties"), out var properties) && properties is not null)
        {
            foreach (var (key, value) in properties)
            {
                var name = key.Key?.ToString() ?? string.Empty;
                if (value is not null)
                {
                    // A plain name is an application property to Farm only when it says so ("user."):
                    // bare names that look like system properties would otherwise be read as those.
                    filter.ApplicationProperties["user." + name] = AmqpMessageMapping.ToPropertyValue(name, value);
                }
            }
        }
        return filter;
    }

    private async Task<AmqpMessage> RemoveRuleAsync(string entityPath, AmqpMap body)
    {
        var (topic, subscription) = SubscriptionOf(entityPath);
        if (!body.TryGetValue<string>(new MapKey("rule-name"), out var name) || string.IsNullOrEmpty(name))
        {
            throw new AmqpException(AmqpErrorCode.InvalidField, "remove-rule needs 'rule-name'.");
        }
        await calls.Node.Management.DeleteRuleAsync(new DeleteRuleRequest { Topic = topic, Subscription = subscription, Name = name }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        return Answer(200, "OK");
    }

    private async Task<AmqpMessage> EnumerateRulesAsync(string entityPath, AmqpMap body)
    {
        var (topic, subscription) = SubscriptionOf(entityPath);
        var top = (int)Math.Clamp(Long(body, "top", int.MaxValue), 0, int.MaxValue);
        var skip = (int)Math.Clamp(Long(body, "skip", 0), 0, int.MaxValue);
        var response = await calls.Node.Management.ListRulesAsync(new ListRulesRequest { Topic = topic, Subscription = subscription }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        var rules = response.Rules.Skip(skip).Take(top).Select(r => new AmqpMap { [new MapKey("rule-description")] = Describe(r.Rule) }).ToList();
        if (rules.Count == 0)
        {
            return Answer(204, "No rules");
        }
        return Answer(200, "OK", new AmqpMap { [new MapKey("rules")] = rules });
    }

    internal static DescribedType Describe(RuleProperties rule)
    {
        var filter = rule.FilterCase switch
        {
            RuleProperties.FilterOneofCase.SqlFilter => new DescribedType(SqlFilterCode, new List<object?> { rule.SqlFilter.Expression }),
            RuleProperties.FilterOneofCase.CorrelationFilter => new DescribedType(CorrelationFilterCode, CorrelationFields(rule.CorrelationFilter)),
            _ => new DescribedType(TrueFilterCode, new List<object?>()),
        };
        var action = string.IsNullOrEmpty(rule.SqlAction)
            ? new DescribedType(EmptyRuleActionCode, new List<object?>())
            : new DescribedType(SqlRuleActionCode, new List<object?> { rule.SqlAction });
        return new DescribedType(RuleDescriptionCode, new List<object?> { filter, action, rule.Name });
    }

    private static List<object?> CorrelationFields(CorrelationFilter filter)
    {
        var properties = new AmqpMap();
        foreach (var (key, value) in filter.ApplicationProperties)
        {
            var name = key.StartsWith("user.", StringComparison.OrdinalIgnoreCase) ? key[5..] : key;
            properties[new MapKey(name)] = AmqpMessageMapping.FromPropertyValue(value);
        }
        return
        [
            filter.HasCorrelationId ? filter.CorrelationId : null,
            filter.HasMessageId ? filter.MessageId : null,
            filter.HasTo ? filter.To : null,
            filter.HasReplyTo ? filter.ReplyTo : null,
            filter.HasSubject ? filter.Subject : null,
            filter.HasSessionId ? filter.SessionId : null,
            filter.HasReplyToSessionId ? filter.ReplyToSessionId : null,
            filter.HasContentType ? filter.ContentType : null,
            properties,
        ];
    }
}
