using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm subscription create|show|update|delete|list TOPIC [NAME]`.</summary>
internal static class SubscriptionCommands
{
    public static Command Create()
    {
        var subscription = new Command("subscription", "Create, inspect, change and delete a topic's subscriptions (receive from TOPIC/Subscriptions/NAME)");
        subscription.Subcommands.Add(CreateCommand());
        subscription.Subcommands.Add(ShowCommand());
        subscription.Subcommands.Add(UpdateCommand());
        subscription.Subcommands.Add(DeleteCommand());
        subscription.Subcommands.Add(ListCommand());
        return subscription;
    }

    internal static Argument<string> TopicArgument() => new("TOPIC") { Description = "Topic name" };

    internal static Argument<string> NameArgument() => new("NAME") { Description = "Subscription name" };


    private static Command CreateCommand()
    {
        var topic = TopicArgument();
        var name = NameArgument();
        var properties = SubscriptionPropertyOptions.Create();
        var rule = new RuleOptions();
        var json = CliValues.JsonOption();
        var command = new Command(
            "create",
            $"Create a subscription; it receives messages sent after it was created. A filter or action given here becomes its first rule, named {RuleProperties.DefaultRuleName} (default: every message)")
        {
            topic, name, json,
        };
        rule.AddTo(command);
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var options = new CreateSubscriptionOptions(parseResult.GetValue(topic)!, parseResult.GetValue(name)!);
            properties.ApplyTo(parseResult, options);
            var firstRule = rule.ToRule(parseResult, RuleProperties.DefaultRuleName);

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var created = firstRule is null
                ? await admin.CreateSubscriptionAsync(options, cancellationToken)
                : await admin.CreateSubscriptionAsync(options, firstRule, cancellationToken);
            await PrintAsync(admin, parseResult.GetValue(json), created, $"Created subscription '{created.Path}'.", cancellationToken);
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ShowCommand()
    {
        var topic = TopicArgument();
        var name = NameArgument();
        var json = CliValues.JsonOption();
        var command = new Command("show", "Show a subscription's properties, message counts and rules") { topic, name, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var properties = await admin.GetSubscriptionAsync(parseResult.GetValue(topic)!, parseResult.GetValue(name)!, cancellationToken);
            await PrintAsync(admin, parseResult.GetValue(json), properties, header: null, cancellationToken);
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command UpdateCommand()
    {
        var topic = TopicArgument();
        var name = NameArgument();
        var properties = SubscriptionPropertyOptions.Create();
        var json = CliValues.JsonOption();
        var command = new Command("update", "Change some of a subscription's properties (the others keep their values); change its rules with 'farm rule'") { topic, name, json };
        properties.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var update = new SubscriptionProperties(parseResult.GetValue(topic)!, parseResult.GetValue(name)!);
            if (properties.ApplyTo(parseResult, update) == 0)
            {
                throw new CliException(ExitCodes.BadInput, "Nothing to update: give at least one property option, e.g. --max-delivery-count 5 (see 'farm subscription update --help').");
            }

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var updated = await admin.UpdateSubscriptionAsync(update, cancellationToken);
            await PrintAsync(admin, parseResult.GetValue(json), updated, $"Updated subscription '{updated.Path}'.", cancellationToken);
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command DeleteCommand()
    {
        var topic = TopicArgument();
        var name = NameArgument();
        var command = new Command("delete", "Delete a subscription with its rules and messages") { topic, name };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(topic)!;
            var subscriptionName = parseResult.GetValue(name)!;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            await admin.DeleteSubscriptionAsync(topicName, subscriptionName, cancellationToken);
            await Console.Out.WriteLineAsync($"Deleted subscription '{topicName}/{FarmEntityPath.SubscriptionsSegment}/{subscriptionName}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ListCommand()
    {
        var topic = TopicArgument();
        var json = CliValues.JsonOption();
        var command = new Command("list", "List a topic's subscriptions with their message counts") { topic, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(topic)!;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var subscriptions = await admin.ListSubscriptionsWithRuntimePropertiesAsync(topicName, cancellationToken);
            if (parseResult.GetValue(json))
            {
                var array = new JsonArray([.. subscriptions.Select(s => (JsonNode)ToJson(s.Properties, s.Runtime, rules: null))]);
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(array));
                return ExitCodes.Ok;
            }

            if (subscriptions.Count == 0)
            {
                await Console.Out.WriteLineAsync($"No subscriptions on topic '{topicName}'.");
                return ExitCodes.Ok;
            }

            await Console.Out.WriteAsync(CliValues.Table(
                ["NAME", "ACTIVE", "SCHEDULED", "DEFERRED", "DEAD-LETTER", "LOCK", "MAX-DELIVERY", "TTL", "FORWARD-TO"],
                subscriptions.OrderBy(s => s.Properties.SubscriptionName, StringComparer.Ordinal).Select(s => new[]
                {
                    s.Properties.SubscriptionName,
                    CliValues.Number(s.Runtime.ActiveMessageCount),
                    CliValues.Number(s.Runtime.ScheduledMessageCount),
                    CliValues.Number(s.Runtime.DeferredMessageCount),
                    CliValues.Number(s.Runtime.DeadLetterMessageCount),
                    CliValues.FormatDuration(s.Properties.LockDuration),
                    CliValues.Number(s.Properties.MaxDeliveryCount),
                    CliValues.FormatDuration(s.Properties.DefaultMessageTimeToLive),
                    s.Properties.ForwardTo ?? "-",
                })));
            return ExitCodes.Ok;
        });
        return command;
    }

    /// <summary>Properties, counts and rules: the counts and rules take two more calls.</summary>
    private static async Task PrintAsync(FarmAdministrationClient admin, bool json, SubscriptionProperties properties, string? header, CancellationToken cancellationToken)
    {
        var runtime = await admin.GetSubscriptionRuntimePropertiesAsync(properties.TopicName, properties.SubscriptionName, cancellationToken);
        var rules = await admin.ListRulesAsync(properties.TopicName, properties.SubscriptionName, cancellationToken);
        if (json)
        {
            await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(ToJson(properties, runtime, rules)));
            return;
        }

        if (header is not null)
        {
            await Console.Out.WriteLineAsync(header);
        }

        await Console.Out.WriteAsync(CliValues.Table(
            ["PROPERTY", "VALUE"],
            [
                ["topic", properties.TopicName],
                ["name", properties.SubscriptionName],
                ["path", properties.Path],
                ["lock_duration", CliValues.FormatDuration(properties.LockDuration)],
                ["max_delivery_count", CliValues.Number(properties.MaxDeliveryCount)],
                ["default_message_time_to_live", CliValues.FormatDuration(properties.DefaultMessageTimeToLive)],
                ["dead_lettering_on_message_expiration", CliValues.Bool(properties.DeadLetteringOnMessageExpiration)],
                ["dead_lettering_on_filter_evaluation_exceptions", CliValues.Bool(properties.EnableDeadLetteringOnFilterEvaluationExceptions)],
                ["requires_session", CliValues.Bool(properties.RequiresSession)],
                ["forward_to", properties.ForwardTo ?? "-"],
                ["forward_dead_lettered_messages_to", properties.ForwardDeadLetteredMessagesTo ?? "-"],
                ["enable_batched_operations", CliValues.Bool(properties.EnableBatchedOperations)],
                ["created_at", CliValues.Timestamp(properties.CreatedAt)],
                ["updated_at", CliValues.Timestamp(properties.UpdatedAt)],
                .. MessageCountsOutput.Rows(runtime),
            ]));
        await Console.Out.WriteLineAsync();
        await Console.Out.WriteAsync(rules.Count == 0 ? "No rules: the subscription selects no message.\n" : RuleOptions.Table(rules));
    }

    /// <summary>The JSON shape of a subscription; its names are a contract for scripts. Durations are seconds (null: infinite).</summary>
    internal static JsonObject ToJson(SubscriptionProperties properties, SubscriptionRuntimeProperties runtime, IReadOnlyList<RuleProperties>? rules)
    {
        var json = new JsonObject
        {
            ["topic"] = properties.TopicName,
            ["name"] = properties.SubscriptionName,
            ["path"] = properties.Path,
            ["lock_duration_seconds"] = CliValues.DurationSeconds(properties.LockDuration),
            ["max_delivery_count"] = properties.MaxDeliveryCount,
            ["default_message_time_to_live_seconds"] = CliValues.DurationSeconds(properties.DefaultMessageTimeToLive),
            ["dead_lettering_on_message_expiration"] = properties.DeadLetteringOnMessageExpiration,
            ["dead_lettering_on_filter_evaluation_exceptions"] = properties.EnableDeadLetteringOnFilterEvaluationExceptions,
            ["requires_session"] = properties.RequiresSession,
            ["forward_to"] = properties.ForwardTo,
            ["forward_dead_lettered_messages_to"] = properties.ForwardDeadLetteredMessagesTo,
            ["enable_batched_operations"] = properties.EnableBatchedOperations,
            ["created_at"] = CliValues.TimestampJson(properties.CreatedAt),
            ["updated_at"] = CliValues.TimestampJson(properties.UpdatedAt),
            ["counts"] = MessageCountsOutput.ToJson(runtime),
        };
        if (rules is not null)
        {
            json["rules"] = new JsonArray([.. rules.Select(r => (JsonNode)RuleOptions.ToJson(r))]);
        }

        return json;
    }
}

/// <summary>The property options of `subscription create` and `subscription update`.</summary>
internal static class SubscriptionPropertyOptions
{
    public static PropertyOptions<SubscriptionSettings> Create() => new PropertyOptions<SubscriptionSettings>()
        .LockDuration()
        .MaxDeliveryCount()
        .DefaultTtl()
        .DeadLetterOnExpiration("Dead-letter expired messages instead of dropping them (true|false, default false)")
        .Flag("--dead-letter-on-filter-errors",
            "Dead-letter a message whose filter cannot be evaluated instead of dropping it (true|false, default true)",
            (settings, value) => settings.EnableDeadLetteringOnFilterEvaluationExceptions = value)
        .ForwardTo("Forward every message to this queue or topic ('' clears)")
        .ForwardDeadLetteredTo(["--forward-dead-letters-to", "--forward-dead-lettered-to"], "Forward dead-lettered messages to this queue or topic ('' clears)")
        .BatchedOperations();
}
