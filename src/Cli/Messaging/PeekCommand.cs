using System.CommandLine;
using Farm.Cli.Entities;
using Farm.Client;

namespace Farm.Cli.Messaging;

/// <summary>`farm peek ENTITY [--count N] [--from SEQ] [--json]`: look at messages without locking or removing them.</summary>
internal static class PeekCommand
{
    public static Command Create()
    {
        var entity = new Argument<string>("ENTITY")
        {
            Description = "Queue or subscription to peek at: QUEUE or TOPIC/Subscriptions/SUB (append /$DeadLetterQueue for its dead letters)",
        };
        var count = new Option<int>("--count") { Description = "Most messages to show", DefaultValueFactory = _ => 10, HelpName = "N" };
        var from = new Option<long?>("--from") { Description = "Start at this sequence number (default: the first)", HelpName = "SEQ" };
        var deadLetter = new Option<bool>("--dead-letter-queue") { Description = "Peek at the entity's dead-letter queue" };
        var json = new Option<bool>("--json") { Description = "Print one JSON object per message per line (stable snake_case names)" };

        var command = new Command("peek", "Show messages without locking or removing them") { entity, count, from, deadLetter, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var n = parseResult.GetValue(count);
            if (n < 1)
            {
                throw new CliException(ExitCodes.BadInput, $"--count must be at least 1, not {n}.");
            }

            var start = parseResult.GetValue(from);
            if (start is < 0)
            {
                throw new CliException(ExitCodes.BadInput, $"--from must be a sequence number (0 or more), not {start}.");
            }

            var options = new FarmReceiverOptions { SubQueue = parseResult.GetValue(deadLetter) ? SubQueue.DeadLetter : SubQueue.None };
            await using var client = new FarmClient(CliContext.ResolveConnectionString(parseResult));
            await using var receiver = client.CreateReceiver(parseResult.GetValue(entity)!, options);
            var asJson = parseResult.GetValue(json);
            var shown = 0;
            var next = start;
            while (shown < n)
            {
                var page = await receiver.PeekMessagesAsync(Math.Min(n - shown, 250), next, cancellationToken);
                if (page.Count == 0)
                {
                    break;
                }

                foreach (var message in page.Take(n - shown))
                {
                    await Console.Out.WriteLineAsync(asJson ? CliValues.ToJsonLine(MessageOutput.ToJson(message)) : MessageOutput.ToText(message));
                    shown++;
                }

                // Later pages continue after the last peeked message.
                next = null;
            }

            if (!asJson && shown == 0)
            {
                await Console.Error.WriteLineAsync($"No messages in '{receiver.EntityPath}'.");
            }

            return ExitCodes.Ok;
        });
        return command;
    }
}
