using Proto = Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>Rules, filters and actions to and from farm.v1.RuleProperties / RuleInfo.</summary>
internal static class RuleMapper
{
    public static Proto.RuleProperties ToProto(CreateRuleOptions options)
    {
        ArgumentNullException.ThrowIfNull(options);
        var proto = new Proto.RuleProperties { Name = options.Name };
        switch (options.Filter)
        {
            // No filter on the wire is the true filter.
            case TrueRuleFilter:
                break;
            case SqlRuleFilter sql:
                proto.SqlFilter = new Proto.SqlFilter { Expression = sql.SqlExpression };
                break;
            case CorrelationRuleFilter correlation:
                proto.CorrelationFilter = ToProto(correlation);
                break;
            default:
                throw new ArgumentException($"Rule '{options.Name}' has a filter of unsupported type {options.Filter.GetType().Name}.", nameof(options));
        }

        switch (options.Action)
        {
            case null:
                break;
            case SqlRuleAction action:
                proto.SqlAction = action.SqlExpression;
                break;
            default:
                throw new ArgumentException($"Rule '{options.Name}' has an action of unsupported type {options.Action.GetType().Name}.", nameof(options));
        }

        return proto;
    }

    public static Proto.CorrelationFilter ToProto(CorrelationRuleFilter filter)
    {
        var proto = new Proto.CorrelationFilter();

        // Unset (null) fields stay off the wire: they match any value.
        if (filter.CorrelationId is { } correlationId)
        {
            proto.CorrelationId = correlationId;
        }

        if (filter.MessageId is { } messageId)
        {
            proto.MessageId = messageId;
        }

        if (filter.To is { } to)
        {
            proto.To = to;
        }

        if (filter.ReplyTo is { } replyTo)
        {
            proto.ReplyTo = replyTo;
        }

        if (filter.Subject is { } subject)
        {
            proto.Subject = subject;
        }

        if (filter.SessionId is { } sessionId)
        {
            proto.SessionId = sessionId;
        }

        if (filter.ReplyToSessionId is { } replyToSessionId)
        {
            proto.ReplyToSessionId = replyToSessionId;
        }

        if (filter.ContentType is { } contentType)
        {
            proto.ContentType = contentType;
        }

        PropertyValues.CopyTo(filter.ApplicationProperties, proto.ApplicationProperties);
        return proto;
    }

    public static RuleProperties FromInfo(Proto.RuleInfo info)
    {
        var rule = info.Rule ?? new Proto.RuleProperties();
        return new RuleProperties(info.Topic, info.Subscription, rule.Name, FilterFromProto(rule), ActionFromProto(rule.SqlAction))
        {
            CreatedAt = info.CreatedAt?.ToDateTimeOffset() ?? default,
        };
    }

    public static RuleFilter FilterFromProto(Proto.RuleProperties rule) => rule.FilterCase switch
    {
        Proto.RuleProperties.FilterOneofCase.SqlFilter => SqlFilterFromExpression(rule.SqlFilter.Expression),
        Proto.RuleProperties.FilterOneofCase.CorrelationFilter => FromProto(rule.CorrelationFilter),
        _ => new TrueRuleFilter(),
    };

    private static RuleFilter SqlFilterFromExpression(string expression)
    {
        // As Azure's SDK does: the canonical true and false expressions come back as their own types.
        var compact = string.Concat(expression.Where(c => !char.IsWhiteSpace(c)));
        return compact switch
        {
            "" or "1=1" => new TrueRuleFilter(),
            "1=0" => new FalseRuleFilter(),
            _ => new SqlRuleFilter(expression),
        };
    }

    private static CorrelationRuleFilter FromProto(Proto.CorrelationFilter proto)
    {
        var filter = new CorrelationRuleFilter
        {
            CorrelationId = proto.HasCorrelationId ? proto.CorrelationId : null,
            MessageId = proto.HasMessageId ? proto.MessageId : null,
            To = proto.HasTo ? proto.To : null,
            ReplyTo = proto.HasReplyTo ? proto.ReplyTo : null,
            Subject = proto.HasSubject ? proto.Subject : null,
            SessionId = proto.HasSessionId ? proto.SessionId : null,
            ReplyToSessionId = proto.HasReplyToSessionId ? proto.ReplyToSessionId : null,
            ContentType = proto.HasContentType ? proto.ContentType : null,
        };
        foreach (var (name, value) in proto.ApplicationProperties)
        {
            filter.ApplicationProperties[name] = PropertyValues.FromProto(value);
        }

        return filter;
    }

    private static SqlRuleAction? ActionFromProto(string expression)
        => string.IsNullOrWhiteSpace(expression) ? null : new SqlRuleAction(expression);
}
