using System.CommandLine;
using Farm.Cli.Entities;
using Farm.Client;

namespace Farm.Cli.Messaging;

/// <summary>
/// `farm receive ENTITY [--count N] [--mode peek-lock|receive-and-delete] [--settle complete|abandon|dead-letter|defer] [--wait D] [--json]`.
/// Stops after --count messages, or when --wait passes with nothing to receive.
/// </summary>
internal static class ReceiveCommand
{
    private const int MaxPerCall = 100;

    public static Command Create()
    {
        var entity = new Argument<string>("ENTITY")
        {
            Description = "Queue or subscription to receive from: QUEUE or TOPIC/Subscriptions/SUB (append /$DeadLetterQueue for its dead letters)",
        };
        var count = new Option<int>("--count") { Description = "Most messages to receive", DefaultValueFactory = _ => 1, HelpName = "N" };
        var mode = new Option<string>("--mode") { Description = "peek-lock (lock, then settle) or receive-and-delete", DefaultValueFactory = _ => "peek-lock" };
        mode.AcceptOnlyFromAmong("peek-lock", "receive-and-delete");
        var settle = new Option<string?>("--settle") { Description = "What to do with each peek-locked message (default complete)" };
        settle.AcceptOnlyFromAmong("complete", "abandon", "dead-letter", "defer");
        var wait = new Option<string>("--wait") { Description = "How long to wait for a message before stopping, e.g. 5s", DefaultValueFactory = _ => "5s", HelpName = "DURATION" };
        var deadLetter = new Option<bool>("--dead-letter-queue") { Description = "Receive from the entity's dead-letter queue" };
        var json = new Option<bool>("--json") { Description = "Print one JSON object per message per line (stable snake_case names)" };

        var command = new Command("receive", "Receive messages from a queue or a subscription and settle them") { entity, count, mode, settle, wait, deadLetter, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var n = parseResult.GetValue(count);
            if (n < 1)
            {
                throw new CliException(ExitCodes.BadInput, $"--count must be at least 1, not {n}.");
            }

            var receiveMode = parseResult.GetValue(mode) == "receive-and-delete" ? FarmReceiveMode.ReceiveAndDelete : FarmReceiveMode.PeekLock;
            var settlement = parseResult.GetValue(settle);
            if (settlement is not null && receiveMode == FarmReceiveMode.ReceiveAndDelete)
            {
                throw new CliException(ExitCodes.BadInput, "--settle applies to --mode peek-lock only; receive-and-delete messages are settled when received.");
            }

            settlement ??= "complete";
            var maxWait = CliValues.ParseDuration("--wait", parseResult.GetValue(wait)!);
            var asJson = parseResult.GetValue(json);
            var options = new FarmReceiverOptions
            {
                ReceiveMode = receiveMode,
                SubQueue = parseResult.GetValue(deadLetter) ? SubQueue.DeadLetter : SubQueue.None,
            };

            await using var client = new FarmClient(CliContext.ResolveConnectionString(parseResult));
            await using var receiver = client.CreateReceiver(parseResult.GetValue(entity)!, options);
            var received = 0;
            while (received < n)
            {
                var batch = await receiver.ReceiveMessagesAsync(Math.Min(n - received, MaxPerCall), maxWait, cancellationToken);
                if (batch.Count == 0)
                {
                    break;
                }

                foreach (var message in batch)
                {
                    if (receiveMode == FarmReceiveMode.PeekLock)
                    {
                        await SettleAsync(receiver, message, settlement, cancellationToken);
                    }

                    await Console.Out.WriteLineAsync(asJson ? CliValues.ToJsonLine(MessageOutput.ToJson(message)) : MessageOutput.ToText(message));
                    received++;
                }
            }

            if (!asJson)
            {
                var what = receiveMode == FarmReceiveMode.PeekLock ? $", {Past(settlement)}" : string.Empty;
                await Console.Error.WriteLineAsync($"Received {received} message{(received == 1 ? string.Empty : "s")} from '{receiver.EntityPath}'{what}.");
            }

            return ExitCodes.Ok;
        });
        return command;
    }

    private static Task SettleAsync(FarmReceiver receiver, FarmReceivedMessage message, string settlement, CancellationToken cancellationToken) => settlement switch
    {
        "abandon" => receiver.AbandonMessageAsync(message, cancellationToken: cancellationToken),
        "dead-letter" => receiver.DeadLetterMessageAsync(message, "ManualDeadLetter", "Dead-lettered by 'farm receive --settle dead-letter'", cancellationToken: cancellationToken),
        "defer" => receiver.DeferMessageAsync(message, cancellationToken: cancellationToken),
        _ => receiver.CompleteMessageAsync(message, cancellationToken),
    };

    private static string Past(string settlement) => settlement switch
    {
        "abandon" => "abandoned",
        "dead-letter" => "dead-lettered",
        "defer" => "deferred",
        _ => "completed",
    };
}
