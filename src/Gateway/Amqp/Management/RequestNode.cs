using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Encoding;
using Microsoft.Azure.Amqp.Framing;

namespace Farm.Gateway.Amqp.Management;

/// <summary>
/// An AMQP request/response node ($cbs, ENTITY/$management): the client sends requests on one link
/// and names, as reply-to, the link it receives answers on; each answer carries the request's
/// message-id as its correlation-id and a status code in its application properties.
/// </summary>
internal abstract partial class RequestNode(ILogger logger)
{
    /// <summary>Requests a client may have outstanding on one request link.</summary>
    private const uint RequestCredit = 100;

    /// <summary>The application property names of the status (the $cbs node uses "status-code", $management "statusCode").</summary>
    protected abstract string StatusCodeProperty { get; }

    protected abstract string StatusDescriptionProperty { get; }

    /// <summary>The client's request link (the node receives on it).</summary>
    public void AttachRequestLink(ReceivingAmqpLink link, AmqpConnectionContext connection, string entityPath)
    {
        link.RegisterMessageListener(request => _ = AnswerAsync(link, connection, entityPath, request));
        Links.LinkCredit.GrantOnOpen(link, RequestCredit);
    }

    /// <summary>The client's answer link (the node sends on it).</summary>
    public static void AttachReplyLink(SendingAmqpLink link, AmqpConnectionContext connection) => connection.AddReplyLink(link);

    protected abstract Task<AmqpMessage> HandleAsync(AmqpConnectionContext connection, string entityPath, AmqpMessage request);

    private async Task AnswerAsync(ReceivingAmqpLink link, AmqpConnectionContext connection, string entityPath, AmqpMessage request)
    {
        using var _ = request;
        AmqpMessage response;
        try
        {
            response = await HandleAsync(connection, entityPath, request).ConfigureAwait(false);
        }
        catch (Exception e)
        {
            var (condition, description) = AmqpErrors.Classify(e);
            LogRequestFailed(logger, entityPath, OperationOf(request) ?? "(none)", condition.Value, description);
            response = Answer(AmqpErrors.StatusCodeOf(condition), description);
            response.ApplicationProperties.Map["error-condition"] = condition;
        }
        var correlation = request.Properties?.MessageId ?? request.Properties?.CorrelationId;
        if (correlation is not null)
        {
            response.Properties.CorrelationId = correlation;
        }
        try
        {
            link.AcceptMessage(request, settled: true, batchable: false);
        }
        catch (Exception e) when (e is InvalidOperationException or ObjectDisposedException or AmqpException)
        {
            // The request link closed; the answer may still reach its reply link.
        }
        var replyTo = request.Properties?.ReplyTo?.ToString();
        var reply = connection.ReplyLink(replyTo);
        if (reply is null)
        {
            LogNoReplyLink(logger, entityPath, replyTo ?? "(none)");
            response.Dispose();
            return;
        }
        try
        {
            reply.SendMessageNoWait(response, new ArraySegment<byte>(Guid.NewGuid().ToByteArray()), AmqpConstants.NullBinary);
        }
        catch (Exception e) when (e is InvalidOperationException or ObjectDisposedException or AmqpException)
        {
            response.Dispose();
        }
    }

    /// <summary>An answer with a status and no body (or the body the caller adds).</summary>
    protected AmqpMessage Answer(int statusCode, string description, AmqpMap? body = null)
    {
        var response = body is null ? AmqpMessage.Create() : AmqpMessage.Create(new AmqpValue { Value = body });
        response.ApplicationProperties.Map[StatusCodeProperty] = statusCode;
        response.ApplicationProperties.Map[StatusDescriptionProperty] = description;
        return response;
    }

    protected static string? OperationOf(AmqpMessage request) =>
        request.ApplicationProperties?.Map is { } map && map.TryGetValue<string>("operation", out var operation) ? operation : null;

    [LoggerMessage(Level = LogLevel.Debug, Message = "AMQP request to {Node} ({Operation}) failed: {Condition}: {Description}")]
    private static partial void LogRequestFailed(ILogger logger, string node, string operation, string condition, string description);

    [LoggerMessage(Level = LogLevel.Debug, Message = "AMQP request to {Node}: no reply link named '{ReplyTo}'; the answer is dropped")]
    private static partial void LogNoReplyLink(ILogger logger, string node, string replyTo);
}
