using System.CommandLine;
using System.Globalization;
using Farm.Client;

namespace Farm.Cli.Messaging;

/// <summary>`farm dead-letter resubmit ENTITY [--count N | --sequence-number S ...]`: dead letters back to their queue or subscription.</summary>
internal static class DeadLetterCommands
{
    public static Command Create() => new("dead-letter", "Work with an entity's dead-letter queue (peek it with: farm peek ENTITY --dead-letter-queue)")
    {
        Resubmit(),
    };

    private static Command Resubmit()
    {
        var entity = new Argument<string>("ENTITY") { Description = "The queue, or subscription (TOPIC/Subscriptions/NAME), whose dead letters go back to it" };
        var count = new Option<int?>("--count") { Description = "Resubmit at most this many, lowest sequence number first (default: all)", HelpName = "N" };
        var sequenceNumbers = new Option<long[]>("--sequence-number")
        {
            Description = "Resubmit exactly this dead letter (repeat the option for several: all or none go)",
            HelpName = "S",
            AllowMultipleArgumentsPerToken = false,
        };

        var command = new Command("resubmit", "Move dead-lettered messages back to their queue (as new messages: same body and properties, a fresh delivery count and time to live) or subscription (in place, with a fresh delivery count); each leaves the dead-letter queue in the same transaction")
        {
            entity, count, sequenceNumbers,
        };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var max = parseResult.GetValue(count);
            var named = parseResult.GetValue(sequenceNumbers) ?? [];
            if (max is < 1)
            {
                throw new CliException(ExitCodes.BadInput, $"--count must be at least 1, not {max}.");
            }
            if (max is not null && named.Length > 0)
            {
                throw new CliException(ExitCodes.BadInput, "Give --count or --sequence-number, not both.");
            }
            if (named.Any(s => s < 1))
            {
                throw new CliException(ExitCodes.BadInput, "Sequence numbers start at 1.");
            }
            await using var client = new FarmClient(CliContext.ResolveConnectionString(parseResult));
            await using var receiver = client.CreateReceiver(parseResult.GetValue(entity)!);
            var resubmitted = await receiver.ResubmitDeadLetteredMessagesAsync(max, named, cancellationToken);
            var queue = receiver.EntityPath.Replace("/$DeadLetterQueue", "", StringComparison.OrdinalIgnoreCase);
            await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"Resubmitted {resubmitted} message(s) to {queue}"));
            return ExitCodes.Ok;
        });
        return command;
    }
}
