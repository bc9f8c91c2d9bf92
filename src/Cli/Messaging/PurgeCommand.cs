using System.CommandLine;
using System.Globalization;
using Farm.Client;

namespace Farm.Cli.Messaging;

/// <summary>`farm queue purge ENTITY [--dead-letter-queue]`: delete what a receiver could take now.</summary>
internal static class PurgeCommand
{
    public static Command Create()
    {
        var entity = new Argument<string>("ENTITY")
        {
            Description = "Queue or subscription to purge: QUEUE or TOPIC/Subscriptions/SUB (append /$DeadLetterQueue for its dead letters)",
        };
        var deadLetter = new Option<bool>("--dead-letter-queue") { Description = "Purge the entity's dead-letter queue" };

        var command = new Command("purge", "Delete every message a receiver could take now; locked, deferred and scheduled messages stay, and so do messages sent meanwhile")
        {
            entity, deadLetter,
        };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var options = new FarmReceiverOptions { SubQueue = parseResult.GetValue(deadLetter) ? SubQueue.DeadLetter : SubQueue.None };
            await using var client = new FarmClient(CliContext.ResolveConnectionString(parseResult));
            await using var receiver = client.CreateReceiver(parseResult.GetValue(entity)!, options);
            var purged = await receiver.PurgeMessagesAsync(cancellationToken);
            await Console.Out.WriteLineAsync(string.Create(CultureInfo.InvariantCulture, $"Purged {purged} message(s) from {receiver.EntityPath}"));
            return ExitCodes.Ok;
        });
        return command;
    }
}
