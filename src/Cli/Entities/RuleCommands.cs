using System.CommandLine;
using System.Text.Json.Nodes;
using Farm.Client;

namespace Farm.Cli.Entities;

/// <summary>`farm rule add|show|update|remove|list TOPIC SUB [NAME]`: the rules that select a subscription's messages.</summary>
internal static class RuleCommands
{
    public static Command Create()
    {
        var rule = new Command(
            "rule",
            "Add, show, update, remove and list a subscription's rules: it receives a copy of every message that at least one of its rules selects (changes apply to messages sent afterwards)");
        rule.Subcommands.Add(AddCommand());
        rule.Subcommands.Add(ShowCommand());
        rule.Subcommands.Add(UpdateCommand());
        rule.Subcommands.Add(RemoveCommand());
        rule.Subcommands.Add(ListCommand());
        return rule;
    }

    private static Argument<string> NameArgument() => new("NAME") { Description = "Rule name" };

    private static Argument<string> SubscriptionArgument() => new("SUB") { Description = "Subscription name" };


    private static Command AddCommand()
    {
        var topic = SubscriptionCommands.TopicArgument();
        var subscription = SubscriptionArgument();
        var name = NameArgument();
        var options = new RuleOptions();
        var json = CliValues.JsonOption();
        var command = new Command("add", "Add a rule to a subscription (no filter: every message)") { topic, subscription, name, json };
        options.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(topic)!;
            var subscriptionName = parseResult.GetValue(subscription)!;
            var ruleName = parseResult.GetValue(name)!;
            var rule = options.ToRule(parseResult, ruleName) ?? new CreateRuleOptions(ruleName);

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var created = await admin.CreateRuleAsync(topicName, subscriptionName, rule, cancellationToken);
            return await PrintChangedAsync("Added rule", "to", created, topicName, subscriptionName, parseResult.GetValue(json));
        });
        return command;
    }

    /// <summary>The rule as added or updated: JSON, or one line ("Added rule 'r' to 't/Subscriptions/s': filter ..., action: ...").</summary>
    private static async Task<int> PrintChangedAsync(string what, string preposition, RuleProperties rule, string topic, string subscription, bool json)
    {
        if (json)
        {
            await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(RuleOptions.ToJson(rule)));
            return ExitCodes.Ok;
        }

        var action = rule.Action is null ? string.Empty : $", action: {RuleOptions.ActionText(rule.Action)}";
        await Console.Out.WriteLineAsync(
            $"{what} '{rule.Name}' {preposition} '{FarmEntityPath.FormatSubscriptionPath(topic, subscription)}': filter {RuleOptions.FilterText(rule.Filter)}{action}.");
        return ExitCodes.Ok;
    }

    private static Command ShowCommand()
    {
        var topic = SubscriptionCommands.TopicArgument();
        var subscription = SubscriptionArgument();
        var name = NameArgument();
        var json = CliValues.JsonOption();
        var command = new Command("show", "Show one rule of a subscription") { topic, subscription, name, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var rule = await admin.GetRuleAsync(parseResult.GetValue(topic)!, parseResult.GetValue(subscription)!, parseResult.GetValue(name)!, cancellationToken);
            await Console.Out.WriteAsync(parseResult.GetValue(json)
                ? CliValues.ToJsonIndented(RuleOptions.ToJson(rule)) + "\n"
                : RuleOptions.Table([rule]));
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command UpdateCommand()
    {
        var topic = SubscriptionCommands.TopicArgument();
        var subscription = SubscriptionArgument();
        var name = NameArgument();
        var options = new RuleOptions();
        var json = CliValues.JsonOption();
        var command = new Command(
            "update",
            "Replace a rule's filter and action in one step (no filter: every message; no --action: none); messages sent afterwards see the new rule")
        { topic, subscription, name, json };
        options.AddTo(command);
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(topic)!;
            var subscriptionName = parseResult.GetValue(subscription)!;
            var ruleName = parseResult.GetValue(name)!;
            var wanted = options.ToRule(parseResult, ruleName) ?? new CreateRuleOptions(ruleName);

            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var rule = await admin.GetRuleAsync(topicName, subscriptionName, ruleName, cancellationToken);
            rule.Filter = wanted.Filter;
            rule.Action = wanted.Action;
            var updated = await admin.UpdateRuleAsync(topicName, subscriptionName, rule, cancellationToken);
            return await PrintChangedAsync("Updated rule", "of", updated, topicName, subscriptionName, parseResult.GetValue(json));
        });
        return command;
    }

    private static Command RemoveCommand()
    {
        var topic = SubscriptionCommands.TopicArgument();
        var subscription = SubscriptionArgument();
        var name = NameArgument();
        var command = new Command("remove", "Remove a rule from a subscription") { topic, subscription, name };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(topic)!;
            var subscriptionName = parseResult.GetValue(subscription)!;
            var ruleName = parseResult.GetValue(name)!;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            await admin.DeleteRuleAsync(topicName, subscriptionName, ruleName, cancellationToken);
            await Console.Out.WriteLineAsync($"Removed rule '{ruleName}' from '{topicName}/{FarmEntityPath.SubscriptionsSegment}/{subscriptionName}'.");
            return ExitCodes.Ok;
        });
        return command;
    }

    private static Command ListCommand()
    {
        var topic = SubscriptionCommands.TopicArgument();
        var subscription = SubscriptionArgument();
        var json = CliValues.JsonOption();
        var command = new Command("list", "List a subscription's rules") { topic, subscription, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var topicName = parseResult.GetValue(topic)!;
            var subscriptionName = parseResult.GetValue(subscription)!;
            using var admin = new FarmAdministrationClient(CliContext.ResolveConnectionString(parseResult));
            var rules = await admin.ListRulesAsync(topicName, subscriptionName, cancellationToken);
            if (parseResult.GetValue(json))
            {
                var array = new JsonArray([.. rules.Select(r => (JsonNode)RuleOptions.ToJson(r))]);
                await Console.Out.WriteLineAsync(CliValues.ToJsonIndented(array));
                return ExitCodes.Ok;
            }

            await Console.Out.WriteAsync(rules.Count == 0
                ? $"No rules on '{topicName}/{FarmEntityPath.SubscriptionsSegment}/{subscriptionName}': it selects no message.\n"
                : RuleOptions.Table(rules.OrderBy(r => r.Name, StringComparer.Ordinal)));
            return ExitCodes.Ok;
        });
        return command;
    }
}
