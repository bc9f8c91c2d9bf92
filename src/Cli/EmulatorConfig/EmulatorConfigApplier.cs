using System.Globalization;
using Farm.Client;

namespace Farm.Cli.EmulatorConfig;

/// <summary>
/// Creates what an <see cref="EmulatorConfigFile"/> asks for through <see cref="FarmAdministrationClient"/>,
/// leaving every entity and rule that already exists as it is, so applying the same file again
/// (a restart, as the emulator re-reads its file at each start) changes nothing. One line per
/// entity goes to <c>report</c> (stderr). Before writing anything it checks, with reads only,
/// what only the farm knows: a name taken by the other kind of entity, and forwarding targets
/// that are neither in the file nor in the farm. What the farm alone can judge (a SQL filter's
/// syntax) fails at that rule, naming its JSON path, with what came before it created.
/// </summary>
internal sealed class EmulatorConfigApplier(FarmAdministrationClient admin, TextWriter report)
{
    private int _created;
    private int _existing;

    /// <summary>What applying the file did: entities and rules created, and those already there.</summary>
    public readonly record struct Outcome(int Created, int Existing);

    public async Task<Outcome> ApplyAsync(EmulatorConfigFile config, CancellationToken cancellationToken)
    {
        var queues = (await admin.ListQueuesAsync(cancellationToken)).Select(q => q.Name).ToHashSet(StringComparer.OrdinalIgnoreCase);
        var topics = (await admin.ListTopicsAsync(cancellationToken)).Select(t => t.Name).ToHashSet(StringComparer.OrdinalIgnoreCase);
        CheckAgainstFarm(config, queues, topics);

        // Forwarding targets must exist when forwarding is set, and the file may name them in
        // any order: every entity first, then the forwarding of those this run created.
        var forwarding = new List<Func<Task>>();
        foreach (var queue in config.Queues)
        {
            await StepAsync(queue.Path, async () =>
            {
                if (queues.Contains(queue.Name))
                {
                    await ExistsAsync($"queue '{queue.Name}'");
                    return;
                }

                await admin.CreateQueueAsync(ToOptions(queue), cancellationToken);
                await CreatedAsync($"queue '{queue.Name}'");
                if (HasForwarding(queue.Receiver))
                {
                    forwarding.Add(() => StepAsync(queue.Path + ".Properties", async () =>
                    {
                        var properties = await admin.GetQueueAsync(queue.Name, cancellationToken);
                        SetForwarding(properties, queue.Receiver);
                        await admin.UpdateQueueAsync(properties, cancellationToken);
                    }));
                }
            });
        }

        foreach (var topic in config.Topics)
        {
            var topicExisted = topics.Contains(topic.Name);
            await StepAsync(topic.Path, async () =>
            {
                if (topicExisted)
                {
                    await ExistsAsync($"topic '{topic.Name}'");
                    return;
                }

                await admin.CreateTopicAsync(ToOptions(topic), cancellationToken);
                await CreatedAsync($"topic '{topic.Name}'");
            });

            var subscriptions = topicExisted
                ? (await admin.ListSubscriptionsAsync(topic.Name, cancellationToken)).Select(s => s.SubscriptionName).ToHashSet(StringComparer.OrdinalIgnoreCase)
                : [];
            foreach (var subscription in topic.Subscriptions)
            {
                if (subscriptions.Contains(subscription.Name))
                {
                    await ApplyToExistingSubscriptionAsync(topic, subscription, cancellationToken);
                    continue;
                }

                await CreateSubscriptionAsync(topic, subscription, cancellationToken);
                if (HasForwarding(subscription.Receiver))
                {
                    forwarding.Add(() => StepAsync(subscription.Path + ".Properties", async () =>
                    {
                        var properties = await admin.GetSubscriptionAsync(topic.Name, subscription.Name, cancellationToken);
                        SetForwarding(properties, subscription.Receiver);
                        await admin.UpdateSubscriptionAsync(properties, cancellationToken);
                    }));
                }
            }
        }

        foreach (var step in forwarding)
        {
            await step();
        }

        return new Outcome(_created, _existing);
    }

    /// <summary>A new subscription gets exactly the file's rules: the first replaces $Default at creation, the others follow; none listed: $Default.</summary>
    private async Task CreateSubscriptionAsync(TopicConfig topic, SubscriptionConfig subscription, CancellationToken cancellationToken)
    {
        var what = $"subscription '{FarmEntityPath.FormatSubscriptionPath(topic.Name, subscription.Name)}'";
        await StepAsync(subscription.Path, async () =>
        {
            var options = ToOptions(topic.Name, subscription);
            if (subscription.Rules.Count == 0)
            {
                await admin.CreateSubscriptionAsync(options, cancellationToken);
                await CreatedAsync($"{what} (rule {RuleProperties.DefaultRuleName}: every message)");
                return;
            }

            var first = subscription.Rules[0];
            await StepAsync(first.Path, () => admin.CreateSubscriptionAsync(options, ToOptions(first), cancellationToken));
            await CreatedAsync($"{what} with rule '{first.Name}'");
        });

        foreach (var rule in subscription.Rules.Skip(1))
        {
            await StepAsync(rule.Path, async () =>
            {
                await admin.CreateRuleAsync(topic.Name, subscription.Name, ToOptions(rule), cancellationToken);
                await CreatedAsync($"rule '{rule.Name}' of {what}");
            });
        }
    }

    /// <summary>An existing subscription keeps its properties and rules; rules of the file it lacks are added (none removed).</summary>
    private async Task ApplyToExistingSubscriptionAsync(TopicConfig topic, SubscriptionConfig subscription, CancellationToken cancellationToken)
    {
        var what = $"subscription '{FarmEntityPath.FormatSubscriptionPath(topic.Name, subscription.Name)}'";
        await ExistsAsync(what);
        var rules = (await admin.ListRulesAsync(topic.Name, subscription.Name, cancellationToken)).Select(r => r.Name).ToHashSet(StringComparer.OrdinalIgnoreCase);
        foreach (var rule in subscription.Rules)
        {
            if (rules.Contains(rule.Name))
            {
                await ExistsAsync($"rule '{rule.Name}' of {what}");
                continue;
            }

            await StepAsync(rule.Path, async () =>
            {
                await admin.CreateRuleAsync(topic.Name, subscription.Name, ToOptions(rule), cancellationToken);
                await CreatedAsync($"rule '{rule.Name}' of {what}");
            });
        }
    }

    /// <summary>Refuses, before anything is written, what would fail halfway through.</summary>
    private static void CheckAgainstFarm(EmulatorConfigFile config, HashSet<string> queues, HashSet<string> topics)
    {
        foreach (var queue in config.Queues.Where(q => topics.Contains(q.Name)))
        {
            throw new CliException(ExitCodes.Error, $"{queue.Path}.Name: the farm already has a topic named '{queue.Name}'; a queue cannot take its name.");
        }

        foreach (var topic in config.Topics.Where(t => queues.Contains(t.Name)))
        {
            throw new CliException(ExitCodes.Error, $"{topic.Path}.Name: the farm already has a queue named '{topic.Name}'; a topic cannot take its name.");
        }

        var known = config.Queues.Select(q => q.Name).Concat(config.Topics.Select(t => t.Name)).Concat(queues).Concat(topics).ToHashSet(StringComparer.OrdinalIgnoreCase);
        var receivers = config.Queues.Select(q => (q.Path, q.Receiver))
            .Concat(config.Topics.SelectMany(t => t.Subscriptions).Select(s => (s.Path, s.Receiver)));
        foreach (var (path, receiver) in receivers)
        {
            foreach (var (property, target) in new[] { ("ForwardTo", receiver.ForwardTo), ("ForwardDeadLetteredMessagesTo", receiver.ForwardDeadLetteredMessagesTo) })
            {
                if (target is not null && !known.Contains(target))
                {
                    throw new CliException(ExitCodes.BadInput, $"{path}.Properties.{property}: '{target}' is neither a queue or topic of the file nor one of the farm.");
                }
            }
        }
    }

    /// <summary>Runs one step; a failure names the JSON path of what failed and says what was already created.</summary>
    private async Task StepAsync(string path, Func<Task> step)
    {
        try
        {
            await step();
        }
        catch (FarmException e)
        {
            throw Failed(path, CliContext.ExitCodeOf(e.Reason), e.Message);
        }
        catch (Grpc.Core.RpcException e)
        {
            throw Failed(path, CliContext.Describe(e).ExitCode, e.Status.Detail);
        }
    }

    private CliException Failed(string path, int exitCode, string message)
    {
        var before = _created == 0 ? string.Empty : string.Create(CultureInfo.InvariantCulture, $" ({_created} created before this stay; fix the file and apply it again)");
        return new CliException(exitCode, $"{path}: {message.TrimEnd('.')}{before}.");
    }

    private async Task CreatedAsync(string what)
    {
        _created++;
        await report.WriteLineAsync($"config: created {what}");
    }

    private async Task ExistsAsync(string what)
    {
        _existing++;
        await report.WriteLineAsync($"config: {what} exists; left as it is");
    }

    private static bool HasForwarding(ReceiverConfig receiver) => receiver.ForwardTo is not null || receiver.ForwardDeadLetteredMessagesTo is not null;

    private static void SetForwarding(ReceiverEntitySettings settings, ReceiverConfig receiver)
    {
        if (receiver.ForwardTo is { } forwardTo)
        {
            settings.ForwardTo = forwardTo;
        }

        if (receiver.ForwardDeadLetteredMessagesTo is { } deadLetters)
        {
            settings.ForwardDeadLetteredMessagesTo = deadLetters;
        }
    }

    private static CreateQueueOptions ToOptions(QueueConfig queue)
    {
        var options = new CreateQueueOptions(queue.Name);
        ApplyReceiver(options, queue.Receiver);
        ApplyDuplicateDetection(queue.DuplicateDetection, v => options.RequiresDuplicateDetection = v, w => options.DuplicateDetectionHistoryTimeWindow = w);
        return options;
    }

    private static CreateTopicOptions ToOptions(TopicConfig topic)
    {
        var options = new CreateTopicOptions(topic.Name);
        if (topic.DefaultMessageTimeToLive is { } ttl)
        {
            options.DefaultMessageTimeToLive = ttl;
        }

        ApplyDuplicateDetection(topic.DuplicateDetection, v => options.RequiresDuplicateDetection = v, w => options.DuplicateDetectionHistoryTimeWindow = w);
        return options;
    }

    private static CreateSubscriptionOptions ToOptions(string topic, SubscriptionConfig subscription)
    {
        var options = new CreateSubscriptionOptions(topic, subscription.Name);
        ApplyReceiver(options, subscription.Receiver);
        return options;
    }

    internal static CreateRuleOptions ToOptions(RuleConfig rule)
    {
        RuleFilter filter = rule.SqlFilter is { } sql ? new SqlRuleFilter(sql) : ToFilter(rule.Correlation!);
        return new CreateRuleOptions(rule.Name, filter) { Action = rule.Action is { } action ? new SqlRuleAction(action) : null };
    }

    private static CorrelationRuleFilter ToFilter(CorrelationConfig correlation)
    {
        var filter = new CorrelationRuleFilter
        {
            ContentType = correlation.ContentType,
            CorrelationId = correlation.CorrelationId,
            Subject = correlation.Subject,
            MessageId = correlation.MessageId,
            ReplyTo = correlation.ReplyTo,
            ReplyToSessionId = correlation.ReplyToSessionId,
            SessionId = correlation.SessionId,
            To = correlation.To,
        };
        foreach (var (name, value) in correlation.Properties)
        {
            filter.ApplicationProperties[name] = value;
        }

        return filter;
    }

    /// <summary>Only what the file gives is assigned; the rest takes the farm's defaults. Forwarding is set afterwards.</summary>
    private static void ApplyReceiver(ReceiverEntitySettings settings, ReceiverConfig receiver)
    {
        if (receiver.LockDuration is { } lockDuration)
        {
            settings.LockDuration = lockDuration;
        }

        if (receiver.MaxDeliveryCount is { } maxDeliveryCount)
        {
            settings.MaxDeliveryCount = maxDeliveryCount;
        }

        if (receiver.DefaultMessageTimeToLive is { } ttl)
        {
            settings.DefaultMessageTimeToLive = ttl;
        }

        if (receiver.DeadLetteringOnMessageExpiration is { } deadLetterOnExpiration)
        {
            settings.DeadLetteringOnMessageExpiration = deadLetterOnExpiration;
        }
    }

    private static void ApplyDuplicateDetection(DuplicateDetectionConfig config, Action<bool> requires, Action<TimeSpan> window)
    {
        if (config.RequiresDuplicateDetection is { } value)
        {
            requires(value);
        }

        if (config.HistoryTimeWindow is { } timeWindow)
        {
            window(timeWindow);
        }
    }
}
