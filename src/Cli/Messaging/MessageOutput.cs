using System.Globalization;
using System.Text;
using System.Text.Json.Nodes;
using Farm.Cli.Entities;
using Farm.Client;

namespace Farm.Cli.Messaging;

/// <summary>How received and peeked messages are printed: one JSON object per line, or one readable line.</summary>
internal static class MessageOutput
{
    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);

    /// <summary>The JSON shape of a message; its names are a contract for scripts (every key always present).</summary>
    public static JsonObject ToJson(FarmReceivedMessage message)
    {
        var (body, encoding) = Body(message.Body);
        var properties = new JsonObject();
        foreach (var (key, value) in message.ApplicationProperties.OrderBy(p => p.Key, StringComparer.Ordinal))
        {
            properties[key] = PropertyJson(value);
        }

        return new JsonObject
        {
            ["sequence_number"] = message.SequenceNumber,
            ["message_id"] = message.MessageId,
            ["correlation_id"] = message.CorrelationId,
            ["session_id"] = message.SessionId,
            ["subject"] = message.Subject,
            ["content_type"] = message.ContentType,
            ["delivery_count"] = message.DeliveryCount,
            ["state"] = message.State.ToString().ToLowerInvariant(),
            ["enqueued_time"] = CliValues.TimestampJson(message.EnqueuedTime),
            ["expires_at"] = CliValues.TimestampJson(message.ExpiresAt),
            ["locked_until"] = CliValues.TimestampJson(message.LockedUntil),
            ["body"] = body,
            ["body_encoding"] = encoding,
            ["body_size"] = message.Body.Length,
            ["properties"] = properties,
            ["dead_letter_reason"] = message.DeadLetterReason,
            ["dead_letter_error_description"] = message.DeadLetterErrorDescription,
            ["dead_letter_source"] = message.DeadLetterSource,
        };
    }

    /// <summary>One line for people: sequence number, id, delivery count and a preview of the body.</summary>
    public static string ToText(FarmReceivedMessage message)
    {
        var (body, encoding) = Body(message.Body);
        var preview = body.Length > 80 ? body[..77] + "..." : body;
        preview = preview.ReplaceLineEndings(" ");
        var text = new StringBuilder();
        text.Append(CultureInfo.InvariantCulture, $"#{message.SequenceNumber} id={message.MessageId ?? "-"} delivery={message.DeliveryCount} size={message.Body.Length}");
        if (message.ApplicationProperties.Count > 0)
        {
            text.Append(" props={");
            text.AppendJoin(", ", message.ApplicationProperties.OrderBy(p => p.Key, StringComparer.Ordinal).Select(p => $"{p.Key}={PropertyText(p.Value)}"));
            text.Append('}');
        }

        if (message.DeadLetterReason is { } reason)
        {
            text.Append(CultureInfo.InvariantCulture, $" dead_letter_reason=\"{reason}\"");
        }

        text.Append(encoding == "base64" ? $" body(base64)={preview}" : $" body={preview}");
        return text.ToString();
    }

    /// <summary>UTF-8 text when the bytes are valid UTF-8, else base64.</summary>
    public static (string Body, string Encoding) Body(BinaryData body)
    {
        try
        {
            return (StrictUtf8.GetString(body.ToMemory().Span), "utf8");
        }
        catch (DecoderFallbackException)
        {
            return (Convert.ToBase64String(body.ToMemory().Span), "base64");
        }
    }

    internal static JsonNode? PropertyJson(object? value) => value switch
    {
        null => null,
        string s => s,
        int i => i,
        long l => l,
        double d when double.IsFinite(d) => d,
        double d => d.ToString(CultureInfo.InvariantCulture),
        bool b => b,
        byte[] bytes => Convert.ToBase64String(bytes),
        DateTimeOffset dto => CliValues.TimestampJson(dto),
        TimeSpan ts => ts.ToString("c", CultureInfo.InvariantCulture),
        Guid g => g.ToString("D"),
        _ => Convert.ToString(value, CultureInfo.InvariantCulture),
    };

    private static string PropertyText(object? value) => PropertyJson(value)?.ToJsonString() ?? "null";
}
