using System.Collections;
using Farm.Broker;
using Farm.Contracts.V1;
using Farm.ContainerStore.FarmDatabase;
using Farm.Gateway.Amqp.Messages;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Encoding;

namespace Farm.Gateway.Amqp.Management;

/// <summary>
/// ENTITY/$management, the request/response operations Azure Service Bus SDKs call beside their
/// links: renew-lock, peek, schedule and cancel, receive deferred messages by sequence number,
/// settle by lock token, and a subscription's rules. Each becomes one call to the farm; the
/// answer's body and status are shaped as the SDKs read them.
/// </summary>
internal sealed partial class ManagementNode(FarmCalls calls, ILogger<ManagementNode> logger) : RequestNode(logger)
{
    public const string Suffix = "/$management";
    public static readonly AmqpSymbol SessionFilter = "com.microsoft:session-filter";

    protected override string StatusCodeProperty => "statusCode";

    protected override string StatusDescriptionProperty => "statusDescription";

    protected override async Task<AmqpMessage> HandleAsync(AmqpConnectionContext connection, string entityPath, AmqpMessage request)
    {
        var operation = OperationOf(request) ?? throw new AmqpException(AmqpErrorCode.InvalidField, "The $management request has no 'operation' application property.");
        var body = (request.BodyType & SectionFlag.AmqpValue) != 0 ? request.ValueBody.Value as AmqpMap : null;
        body ??= [];
        if (body.TryGetValue<string>(new MapKey("session-id"), out var sessionId) && sessionId is not null)
        {
            throw new AmqpException(AmqpErrorCode.NotImplemented, $"Sessions are not supported yet ({operation} with a session-id).");
        }
        switch (operation)
        {
            case "com.microsoft:renew-lock":
                Require(connection, entityPath, AccessRights.Listen);
                return await RenewLockAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:peek-message":
                Require(connection, entityPath, AccessRights.Listen);
                return await PeekAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:receive-by-sequence-number":
                Require(connection, entityPath, AccessRights.Listen);
                return await ReceiveBySequenceNumberAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:update-disposition":
                Require(connection, entityPath, AccessRights.Listen);
                return await UpdateDispositionAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:schedule-message":
                Require(connection, entityPath, AccessRights.Send);
                return await ScheduleAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:cancel-scheduled-message":
                Require(connection, entityPath, AccessRights.Send);
                return await CancelScheduledAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:add-rule":
                Require(connection, entityPath, AccessRights.Manage);
                return await AddRuleAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:remove-rule":
                Require(connection, entityPath, AccessRights.Manage);
                return await RemoveRuleAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:enumerate-rules":
                Require(connection, entityPath, AccessRights.Manage);
                return await EnumerateRulesAsync(entityPath, body).ConfigureAwait(false);
            case "com.microsoft:renew-session-lock" or "com.microsoft:get-session-state" or "com.microsoft:set-session-state" or "com.microsoft:get-message-sessions":
                throw new AmqpException(AmqpErrorCode.NotImplemented, $"Sessions are not supported yet ({operation}).");
            default:
                throw new AmqpException(AmqpErrorCode.NotImplemented, $"The $management operation '{operation}' is not supported by Farm.");
        }
    }

    private static void Require(AmqpConnectionContext connection, string entityPath, AccessRights right)
    {
        if (connection.Claims.ValidUntil(entityPath + Suffix, right) is null)
        {
            throw new AmqpException(AmqpErrorCode.UnauthorizedAccess,
                $"Unauthorized access: this operation on '{entityPath}' needs a valid token with the {right} right.");
        }
    }

    private async Task<AmqpMessage> RenewLockAsync(string entityPath, AmqpMap body)
    {
        var tokens = Guids(body, "lock-tokens");
        var response = await calls.Node.Messaging.RenewLockAsync(
            new RenewLockRequest { Entity = entityPath, LockTokens = { tokens.Select(t => t.ToString()) } }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        if (response.Results.FirstOrDefault(r => r.ErrorCode != FarmErrorCode.Unspecified) is { } failed)
        {
            throw FarmErrors.Create(failed.ErrorCode, failed.ErrorMessage);
        }
        var expirations = response.Results.Select(r => r.LockedUntil.ToDateTime()).ToArray();
        return Answer(200, "OK", new AmqpMap { [new MapKey("expirations")] = expirations });
    }

    private async Task<AmqpMessage> PeekAsync(string entityPath, AmqpMap body)
    {
        var from = Long(body, "from-sequence-number", 0);
        var count = (int)Math.Clamp(Long(body, "message-count", 1), 1, 1000);
        var response = await calls.Node.Messaging.PeekAsync(
            new PeekRequest { Entity = entityPath, FromSequenceNumber = from, MaxMessages = count }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        if (response.Messages.Count == 0)
        {
            return Answer(204, "No messages");
        }
        return Answer(200, "OK", new AmqpMap { [new MapKey("messages")] = response.Messages.Select(m => new AmqpMap { [new MapKey("message")] = Encoded(m) }).ToList() });
    }

    private async Task<AmqpMessage> ReceiveBySequenceNumberAsync(string entityPath, AmqpMap body)
    {
        var sequenceNumbers = Longs(body, "sequence-numbers");
        var settleMode = Long(body, "receiver-settle-mode", 1);
        var mode = settleMode == 0 ? ReceiveMode.ReceiveAndDelete : ReceiveMode.PeekLock;
        var response = await calls.Node.Messaging.ReceiveDeferredAsync(
            new ReceiveDeferredRequest { Entity = entityPath, SequenceNumbers = { sequenceNumbers }, Mode = mode }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        var messages = response.Messages.Select(m =>
        {
            var entry = new AmqpMap { [new MapKey("message")] = Encoded(m) };
            if (Guid.TryParse(m.LockToken, out var lockToken))
            {
                entry[new MapKey("lock-token")] = lockToken;
            }
            return entry;
        }).ToList();
        return Answer(200, "OK", new AmqpMap { [new MapKey("messages")] = messages });
    }

    private async Task<AmqpMessage> UpdateDispositionAsync(string entityPath, AmqpMap body)
    {
        body.TryGetValue<string>(new MapKey("disposition-status"), out var status);
        var disposition = status switch
        {
            "completed" => Contracts.V1.Disposition.Complete,
            "abandoned" => Contracts.V1.Disposition.Abandon,
            "defered" or "deferred" => Contracts.V1.Disposition.Defer,
            "suspended" => Contracts.V1.Disposition.DeadLetter,
            _ => throw new AmqpException(AmqpErrorCode.InvalidField, $"disposition-status '{status}' is not one of completed, abandoned, defered, suspended."),
        };
        body.TryGetValue<string>(new MapKey("deadletter-reason"), out var reason);
        body.TryGetValue<string>(new MapKey("deadletter-description"), out var description);
        var request = new SettleRequest { Entity = entityPath };
        foreach (var token in Guids(body, "lock-tokens"))
        {
            var settlement = new Settlement
            {
                LockToken = token.ToString(),
                Disposition = disposition,
                DeadLetterReason = reason ?? string.Empty,
                DeadLetterErrorDescription = description ?? string.Empty,
            };
            body.TryGetValue<AmqpMap>(new MapKey("properties-to-modify"), out var properties);
            AmqpMessageMapping.CopyProperties(properties, settlement.PropertiesToModify);
            request.Settlements.Add(settlement);
        }
        var response = await calls.Node.Messaging.SettleAsync(request, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        if (response.Results.FirstOrDefault(r => r.ErrorCode != FarmErrorCode.Unspecified) is { } failed)
        {
            throw FarmErrors.Create(failed.ErrorCode, failed.ErrorMessage);
        }
        return Answer(200, "OK");
    }

    private async Task<AmqpMessage> ScheduleAsync(string entityPath, AmqpMap body)
    {
        var send = calls.NewSend(entityPath);
        foreach (var entry in List(body, "messages"))
        {
            if (entry is not AmqpMap item || !item.TryGetValue<object>(new MapKey("message"), out var encoded) || BytesOf(encoded) is not { } bytes)
            {
                throw new AmqpException(AmqpErrorCode.InvalidField, "Each scheduled message needs 'message': the encoded message.");
            }
            using var amqp = AmqpMessageMapping.Decode(bytes);
            var message = AmqpMessageMapping.ToFarm(amqp);
            if (message.ScheduledEnqueueTime is null)
            {
                throw new AmqpException(AmqpErrorCode.InvalidField, "A scheduled message needs x-opt-scheduled-enqueue-time.");
            }
            if (message.MessageId.Length == 0 && item.TryGetValue<string>(new MapKey("message-id"), out var messageId) && messageId is not null)
            {
                message.MessageId = messageId;
            }
            send.Messages.Add(message);
        }
        if (send.Messages.Count == 0)
        {
            throw new AmqpException(AmqpErrorCode.InvalidField, "schedule-message needs at least one message.");
        }
        var response = await calls.Node.Messaging.SendAsync(send, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        return Answer(200, "OK", new AmqpMap { [new MapKey("sequence-numbers")] = response.SequenceNumbers.ToArray() });
    }

    private async Task<AmqpMessage> CancelScheduledAsync(string entityPath, AmqpMap body)
    {
        var sequenceNumbers = Longs(body, "sequence-numbers");
        await calls.Node.Messaging.CancelScheduledAsync(
            new CancelScheduledRequest { Entity = entityPath, SequenceNumbers = { sequenceNumbers } }, deadline: FarmCalls.Deadline()).ConfigureAwait(false);
        return Answer(200, "OK");
    }

    private static ArraySegment<byte> Encoded(ReceivedMessage message)
    {
        using var amqp = AmqpMessageMapping.FromFarm(message);
        return AmqpMessageMapping.Encode(amqp);
    }

    /// <summary>The items of a list (or array) the request must carry under <paramref name="key"/>; a lone value counts as one.</summary>
    private static IEnumerable<object?> Items(AmqpMap body, string key)
    {
        if (!body.TryGetValue<object>(new MapKey(key), out var value) || value is null)
        {
            throw new AmqpException(AmqpErrorCode.InvalidField, $"The request needs '{key}'.");
        }
        return value is IEnumerable enumerable and not string ? enumerable.Cast<object?>() : [value];
    }

    internal static IReadOnlyList<Guid> Guids(AmqpMap body, string key)
    {
        var guids = new List<Guid>();
        foreach (var item in Items(body, key))
        {
            guids.Add(item switch
            {
                Guid g => g,
                string s when Guid.TryParse(s, out var parsed) => parsed,
                _ => throw new AmqpException(AmqpErrorCode.InvalidField, $"'{key}' must hold lock tokens (uuids); got {item?.GetType().Name ?? "null"}."),
            });
        }
        return guids;
    }

    internal static IReadOnlyList<long> Longs(AmqpMap body, string key) => Items(body, key).Select(item => ToLong(item, key)).ToList();

    internal static long Long(AmqpMap body, string key, long fallback) =>
        body.TryGetValue<object>(new MapKey(key), out var value) && value is not null ? ToLong(value, key) : fallback;

    private static long ToLong(object? value, string key) => value switch
    {
        long l => l,
        int i => i,
        uint u => u,
        ulong u when u <= long.MaxValue => (long)u,
        short s => s,
        ushort u => u,
        byte b => b,
        sbyte s => s,
        _ => throw new AmqpException(AmqpErrorCode.InvalidField, $"'{key}' must be a whole number; got {value?.GetType().Name ?? "null"}."),
    };

    private static IEnumerable List(AmqpMap body, string key) =>
        body.TryGetValue<object>(new MapKey(key), out var value) && value is IEnumerable list and not string ? list
            : throw new AmqpException(AmqpErrorCode.InvalidField, $"The request needs the list '{key}'.");

    private static ArraySegment<byte>? BytesOf(object? value) => value switch
    {
        ArraySegment<byte> segment => segment,
        byte[] bytes => new ArraySegment<byte>(bytes),
        _ => (ArraySegment<byte>?)null,
    };
}
