using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>
/// `--sql-filter EXPR | --correlation-filter NAME=VALUE... [--action EXPR]`: a rule's filter and
/// action, shared by `subscription create` and `rule add`; and how rules are printed.
/// </summary>
internal sealed class RuleOptions
{
    private readonly Option<string?> _sqlFilter = new("--sql-filter")
    {
        Description = "SQL filter selecting the messages, e.g. \"color = 'red' AND quantity > 10\" (sys.X: system property X)",
        HelpName = "EXPR",
    };

    private readonly Option<string[]> _correlationFilter = new("--correlation-filter")
    {
        Description = "Correlation filter, one or more NAME=VALUE: sys.CorrelationId, sys.MessageId, sys.To, sys.ReplyTo, sys.Subject (sys.Label), "
            + "sys.SessionId, sys.ReplyToSessionId, sys.ContentType (also without 'sys.'); user.NAME or any other NAME is an application property, matched as text",
        HelpName = "NAME=VALUE",
        AllowMultipleArgumentsPerToken = true,
    };

    private readonly Option<string?> _action = new("--action")
    {
        Description = "SQL rule action run on each selected message, e.g. \"SET priority = 'high'; REMOVE temp\"",
        HelpName = "EXPR",
    };

    public void AddTo(Command command)
    {
        command.Options.Add(_sqlFilter);
        command.Options.Add(_correlationFilter);
        command.Options.Add(_action);
    }

    /// <summary>The rule the options describe, named <paramref name="name"/>; null when no filter or action was given.</summary>
    public CreateRuleOptions? ToRule(ParseResult parseResult, string name)
    {
        var sql = parseResult.GetValue(_sqlFilter);
        var pairs = parseResult.GetValue(_correlationFilter);
        var correlationGiven = CliValues.IsGiven(parseResult, _correlationFilter);
        var action = parseResult.GetValue(_action);
        if (sql is not null && correlationGiven)
        {
            throw new CliException(ExitCodes.BadInput, "Give either --sql-filter or --correlation-filter, not both.");
        }

        if (sql is not null && string.IsNullOrWhiteSpace(sql))
        {
            throw new CliException(ExitCodes.BadInput, "--sql-filter needs an expression, e.g. \"color = 'red'\".");
        }

        if (action is not null && string.IsNullOrWhiteSpace(action))
        {
            throw new CliException(ExitCodes.BadInput, "--action needs an expression, e.g. \"SET priority = 'high'\".");
        }

        RuleFilter? filter = sql is not null ? new SqlRuleFilter(sql)
            : correlationGiven ? CorrelationFilterPairs.Parse(pairs ?? [])
            : null;
        if (filter is null && action is null)
        {
            return null;
        }

        return new CreateRuleOptions(name, filter) { Action = action is null ? null : new SqlRuleAction(action) };
    }

    /// <summary>"true", "false", "sql: EXPR" or "correlation: sys.CorrelationId = 'x' AND color = 'red'".</summary>
    public static string FilterText(RuleFilter filter) => filter switch
    {
        TrueRuleFilter => "true",
        FalseRuleFilter => "false",
        SqlRuleFilter sql => "sql: " + sql.SqlExpression,
        CorrelationRuleFilter correlation => "correlation: " + correlation,
        _ => filter.ToString() ?? string.Empty,
    };

    public static string ActionText(RuleAction? action) => action switch
    {
        null => "-",
        SqlRuleAction sql => sql.SqlExpression,
        _ => action.ToString() ?? string.Empty,
    };

    public static string Table(IEnumerable<RuleProperties> rules) => CliValues.Table(
        ["RULE", "FILTER", "ACTION"],
        rules.Select(r => new[] { r.Name, FilterText(r.Filter), ActionText(r.Action) }));

    /// <summary>The JSON shape of a rule; its names are a contract for scripts.</summary>
    public static JsonObject ToJson(RuleProperties rule) => new()
    {
        ["name"] = rule.Name,
        ["filter"] = FilterJson(rule.Filter),
        ["action"] = rule.Action is SqlRuleAction action ? action.SqlExpression : null,
        ["created_at"] = CliValues.TimestampJson(rule.CreatedAt),
    };

    private static JsonObject FilterJson(RuleFilter filter)
    {
        switch (filter)
        {
            case TrueRuleFilter:
                return new JsonObject { ["type"] = "true" };
            case FalseRuleFilter:
                return new JsonObject { ["type"] = "false" };
            case SqlRuleFilter sql:
                return new JsonObject { ["type"] = "sql", ["expression"] = sql.SqlExpression };
            case CorrelationRuleFilter correlation:
                var properties = new JsonObject();
                foreach (var (key, value) in correlation.ApplicationProperties.OrderBy(p => p.Key, StringComparer.Ordinal))
                {
                    properties[key] = Messaging.MessageOutput.PropertyJson(value);
                }

                return new JsonObject
                {
                    ["type"] = "correlation",
                    ["correlation_id"] = correlation.CorrelationId,
                    ["message_id"] = correlation.MessageId,
                    ["to"] = correlation.To,
                    ["reply_to"] = correlation.ReplyTo,
                    ["subject"] = correlation.Subject,
                    ["session_id"] = correlation.SessionId,
                    ["reply_to_session_id"] = correlation.ReplyToSessionId,
                    ["content_type"] = correlation.ContentType,
                    ["properties"] = properties,
                };
            default:
                return new JsonObject { ["type"] = filter.GetType().Name };
        }
    }
}

/// <summary>
/// `--correlation-filter` pairs to a <see cref="CorrelationRuleFilter"/>, as the broker reads them:
/// sys.X (and the bare names of the matchable system properties, any case) set those fields,
/// sys.Label is Subject; user.X and every other name is an application property with a text value.
/// </summary>
internal static class CorrelationFilterPairs
{
    private const string Example = "e.g. sys.CorrelationId=order-1 or color=red";

    private static readonly string[] SystemFields =
        ["CorrelationId", "MessageId", "To", "ReplyTo", "Subject", "SessionId", "ReplyToSessionId", "ContentType"];

    public static CorrelationRuleFilter Parse(IReadOnlyCollection<string> pairs)
    {
        if (pairs.Count == 0)
        {
            throw BadInput($"--correlation-filter needs at least one NAME=VALUE, {Example}.");
        }

        var filter = new CorrelationRuleFilter();
        var fieldsSet = new HashSet<string>(StringComparer.Ordinal);
        var propertiesSet = new HashSet<string>(StringComparer.OrdinalIgnoreCase);
        foreach (var pair in pairs)
        {
            var eq = pair.IndexOf('=', StringComparison.Ordinal);
            var key = eq < 0 ? string.Empty : pair[..eq].Trim();
            if (key.Length == 0)
            {
                throw BadInput($"--correlation-filter '{pair}' must be NAME=VALUE, {Example}.");
            }

            var value = pair[(eq + 1)..];
            string? field;
            if (key.StartsWith("sys.", StringComparison.OrdinalIgnoreCase))
            {
                field = SystemField(key[4..]) ?? throw BadInput(
                    $"--correlation-filter '{pair}': '{key}' is not a system property a correlation filter can match; "
                    + $"use sys.{string.Join(", sys.", SystemFields)} (sys.Label is sys.Subject), or an application property (NAME or user.NAME). Use --sql-filter for anything else.");
            }
            else if (key.StartsWith("user.", StringComparison.OrdinalIgnoreCase))
            {
                AddProperty(key[5..]);
                continue;
            }
            else
            {
                field = SystemField(key);
            }

            if (field is null)
            {
                AddProperty(key);
                continue;
            }

            if (value.Length == 0)
            {
                throw BadInput($"--correlation-filter '{pair}': {field} needs a value.");
            }

            if (!fieldsSet.Add(field))
            {
                throw BadInput($"--correlation-filter sets {field} twice.");
            }

            Set(filter, field, value);

            void AddProperty(string name)
            {
                if (name.Length == 0)
                {
                    throw BadInput($"--correlation-filter '{pair}' names no application property after 'user.'.");
                }

                if (!propertiesSet.Add(name))
                {
                    throw BadInput($"--correlation-filter names the application property '{name}' twice.");
                }

                filter.ApplicationProperties[name] = value;
            }
        }

        return filter;
    }

    private static string? SystemField(string name)
        => name.Equals("Label", StringComparison.OrdinalIgnoreCase)
            ? "Subject"
            : Array.Find(SystemFields, f => f.Equals(name, StringComparison.OrdinalIgnoreCase));

    private static void Set(CorrelationRuleFilter filter, string field, string value)
    {
        switch (field)
        {
            case "CorrelationId": filter.CorrelationId = value; break;
            case "MessageId": filter.MessageId = value; break;
            case "To": filter.To = value; break;
            case "ReplyTo": filter.ReplyTo = value; break;
            case "Subject": filter.Subject = value; break;
            case "SessionId": filter.SessionId = value; break;
            case "ReplyToSessionId": filter.ReplyToSessionId = value; break;
            case "ContentType": filter.ContentType = value; break;
            default: throw new InvalidOperationException($"Unknown correlation field {field}.");
        }
    }

    private static CliException BadInput(string message) => new(ExitCodes.BadInput, message);
}
