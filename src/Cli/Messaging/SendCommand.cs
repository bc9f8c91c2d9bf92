using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json.Nodes;
using Farm.Cli.Entities;
using Farm.Client;

namespace Farm.Cli.Messaging;

/// <summary>`farm send ENTITY [--count N] [--size BYTES | --body TEXT] [--property k=v]... [--batch N] [--message-id ID] [--correlation-id ID] [--subject TEXT] [--ttl D] [--schedule-in D]`.</summary>
internal static class SendCommand
{
    public static Command Create()
    {
        var entity = new Argument<string>("ENTITY") { Description = "Queue or topic to send to (a topic hands each message to the subscriptions whose rules select it)" };
        var count = new Option<int>("--count") { Description = "How many messages to send", DefaultValueFactory = _ => 1, HelpName = "N" };
        var size = new Option<int?>("--size") { Description = "Body of this many bytes (printable filler)", HelpName = "BYTES" };
        var body = new Option<string?>("--body") { Description = "Body text (UTF-8)", HelpName = "TEXT" };
        var property = new Option<string[]>("--property")
        {
            Description = "Application property key=value (repeatable); values read as integer, number, true/false, else text",
            HelpName = "KEY=VALUE",
            AllowMultipleArgumentsPerToken = false,
        };
        var batch = new Option<int>("--batch") { Description = "Messages per send call (each call is one atomic batch)", DefaultValueFactory = _ => 1, HelpName = "N" };
        var messageId = new Option<string?>("--message-id") { Description = "MessageId for every message (default: a new GUID each)", HelpName = "ID" };
        var correlationId = new Option<string?>("--correlation-id") { Description = "CorrelationId for every message", HelpName = "ID" };
        var subject = new Option<string?>("--subject") { Description = "Subject (Label) for every message", HelpName = "TEXT" };
        var ttl = new Option<string?>("--ttl") { Description = "Time to live, e.g. 30s, 5m", HelpName = "DURATION" };
        var scheduleIn = new Option<string?>("--schedule-in") { Description = "Schedule the messages to appear after this delay, e.g. 1m", HelpName = "DURATION" };
        var json = new Option<bool>("--json") { Description = "Print a JSON summary with the sequence numbers" };

        var command = new Command("send", "Send messages to a queue or a topic") { entity, count, size, body, property, batch, messageId, correlationId, subject, ttl, scheduleIn, json };
        command.SetAction(async (parseResult, cancellationToken) =>
        {
            var n = parseResult.GetValue(count);
            var perBatch = parseResult.GetValue(batch);
            if (n < 1)
            {
                throw new CliException(ExitCodes.BadInput, $"--count must be at least 1, not {n}.");
            }

            if (perBatch < 1)
            {
                throw new CliException(ExitCodes.BadInput, $"--batch must be at least 1, not {perBatch}.");
            }

            var bodyText = parseResult.GetValue(body);
            var bodySize = parseResult.GetValue(size);
            if (bodyText is not null && bodySize is not null)
            {
                throw new CliException(ExitCodes.BadInput, "Give either --size or --body, not both.");
            }

            if (bodySize is < 0 or > FarmMessageLimits.MaxMessageSizeInBytes)
            {
                throw new CliException(ExitCodes.BadInput, $"--size must be between 0 and {FarmMessageLimits.MaxMessageSizeInBytes} bytes, not {bodySize}.");
            }

            var properties = ParseProperties(parseResult.GetValue(property) ?? []);
            var timeToLive = parseResult.GetValue(ttl) is { } ttlText ? CliValues.ParseDuration("--ttl", ttlText) : (TimeSpan?)null;
            var delay = parseResult.GetValue(scheduleIn) is { } delayText ? CliValues.ParseDuration("--schedule-in", delayText) : (TimeSpan?)null;
            var fixedBody = bodySize is { } bytes ? BinaryData.FromBytes(Filler(bytes)) : bodyText is not null ? BinaryData.FromString(bodyText) : null;
            var id = parseResult.GetValue(messageId);
            var correlation = parseResult.GetValue(correlationId);
            var subjectText = parseResult.GetValue(subject);
            var entityPath = parseResult.GetValue(entity)!;

            FarmMessage Build(int index)
            {
                var message = new FarmMessage(fixedBody ?? BinaryData.FromString($"message {index + 1}"))
                {
                    MessageId = id ?? Guid.NewGuid().ToString("N"),
                    CorrelationId = correlation,
                    Subject = subjectText,
                    TimeToLive = timeToLive,
                    ScheduledEnqueueTime = delay is { } d ? DateTimeOffset.UtcNow + d : null,
                };
                foreach (var (key, value) in properties)
                {
                    message.ApplicationProperties[key] = value;
                }

                return message;
            }

            await using var client = new FarmClient(CliContext.ResolveConnectionString(parseResult));
            await using var sender = client.CreateSender(entityPath);
            var sequenceNumbers = new List<long>(n);
            var stopwatch = Stopwatch.StartNew();
            for (var start = 0; start < n; start += perBatch)
            {
                var chunk = Enumerable.Range(start, Math.Min(perBatch, n - start)).Select(Build).ToList();
                if (chunk.Count == 1)
                {
                    sequenceNumbers.Add(await sender.SendMessageAsync(chunk[0], cancellationToken));
                }
                else
                {
                    sequenceNumbers.AddRange(await sender.SendMessagesAsync(chunk, cancellationToken));
                }
            }

            stopwatch.Stop();
            var seconds = Math.Max(stopwatch.Elapsed.TotalSeconds, 1e-6);
            var rate = n / seconds;
            if (parseResult.GetValue(json))
            {
                var summary = new JsonObject
                {
                    ["entity"] = entityPath,
                    ["sent"] = n,
                    ["elapsed_seconds"] = Math.Round(stopwatch.Elapsed.TotalSeconds, 3),
                    ["messages_per_second"] = Math.Round(rate, 1),
                    ["sequence_numbers"] = new JsonArray([.. sequenceNumbers.Select(s => (JsonNode)JsonValue.Create(s))]),
                };
                await Console.Out.WriteLineAsync(CliValues.ToJsonLine(summary));
            }
            else
            {
                var scheduled = delay is { } d ? $", scheduled in {CliValues.FormatDuration(d)}" : string.Empty;
                await Console.Out.WriteLineAsync(string.Create(
                    CultureInfo.InvariantCulture,
                    $"Sent {n} message{(n == 1 ? string.Empty : "s")} to '{entityPath}' in {stopwatch.Elapsed.TotalSeconds:0.###} s ({rate:0.#} msg/s){scheduled}."));
            }

            return ExitCodes.Ok;
        });
        return command;
    }

    /// <summary>"k=v" pairs; the value is typed: integer (int or long), number, true/false, else text.</summary>
    internal static List<KeyValuePair<string, object?>> ParseProperties(IEnumerable<string> pairs)
    {
        var result = new List<KeyValuePair<string, object?>>();
        foreach (var pair in pairs)
        {
            var eq = pair.IndexOf('=');
            if (eq <= 0)
            {
                throw new CliException(ExitCodes.BadInput, $"--property '{pair}' must be key=value.");
            }

            var key = pair[..eq].Trim();
            var text = pair[(eq + 1)..];
            object value = text switch
            {
                _ when int.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var i) => i,
                _ when long.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var l) => l,
                _ when double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out var d) && double.IsFinite(d) => d,
                _ when bool.TryParse(text, out var b) => b,
                _ => text,
            };
            result.Add(new(key, value));
        }

        return result;
    }

    private static byte[] Filler(int size)
    {
        const string Pattern = "abcdefghijklmnopqrstuvwxyz0123456789";
        var bytes = new byte[size];
        for (var i = 0; i < size; i++)
        {
            bytes[i] = (byte)Pattern[i % Pattern.Length];
        }

        return bytes;
    }
}
