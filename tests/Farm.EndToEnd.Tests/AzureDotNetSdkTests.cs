using System.Globalization;
using System.Text.Json;
using Azure.Messaging.ServiceBus;
using Azure.Messaging.ServiceBus.Administration;
using CorrelationRuleFilter = Azure.Messaging.ServiceBus.Administration.CorrelationRuleFilter;
using CreateRuleOptions = Azure.Messaging.ServiceBus.Administration.CreateRuleOptions;
using RuleProperties = Azure.Messaging.ServiceBus.Administration.RuleProperties;
using SqlRuleAction = Azure.Messaging.ServiceBus.Administration.SqlRuleAction;
using SqlRuleFilter = Azure.Messaging.ServiceBus.Administration.SqlRuleFilter;
using SubQueue = Azure.Messaging.ServiceBus.SubQueue;
using Farm.Testing;
using Microsoft.Azure.Amqp;
using Microsoft.Azure.Amqp.Framing;
using Microsoft.Azure.Amqp.Sasl;
using Microsoft.Azure.Amqp.Transport;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// The official .NET SDK for Azure Service Bus (Azure.Messaging.ServiceBus, unchanged) against a
/// real farm over AMQP, connected to a node that does not own the entities, so every link is
/// forwarded; and the front door's token rules seen from a raw AMQP client.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class AzureDotNetSdkTests
{
    private static readonly ServiceBusClientOptions FastRetries = new()
    {
        RetryOptions = new ServiceBusRetryOptions { MaxRetries = 2, Delay = TimeSpan.FromMilliseconds(200), TryTimeout = TimeSpan.FromSeconds(20) },
    };

    [Fact]
    public async Task OfficialDotNetSdk_SendsReceivesAndSettles_ThroughANodeThatDoesNotOwnTheQueue()
    {
        await using var farm = await LocalFarm.StartAsync(nodes: 3);
        await Succeeds(farm, "container", "create", "--count", "5");
        await Succeeds(farm, "queue", "create", "orders", "--max-delivery-count", "5");
        var owner = await OwnerNodeOfAsync(farm, "orders");
        var other = owner == 1 ? 2 : 1;
        var connection = (await Succeeds(farm, "connection-string", "--amqp", "--node", other.ToString(CultureInfo.InvariantCulture))).Trim();

        await using var client = new ServiceBusClient(connection, FastRetries);
        var sender = client.CreateSender("orders");
        await sender.SendMessageAsync(new ServiceBusMessage("first")
        {
            MessageId = "m-1",
            CorrelationId = "c-1",
            Subject = "rush",
            ContentType = "text/plain",
            ApplicationProperties = { ["quantity"] = 12, ["price"] = 2.5, ["vip"] = true, ["wait"] = TimeSpan.FromSeconds(3) },
        });
        using (var batch = await sender.CreateMessageBatchAsync())
        {
            Assert.True(batch.TryAddMessage(new ServiceBusMessage("second") { MessageId = "m-2" }));
            Assert.True(batch.TryAddMessage(new ServiceBusMessage("third") { MessageId = "m-3" }));
            await sender.SendMessagesAsync(batch);
        }

        var receiver = client.CreateReceiver("orders");
        var received = await ReceiveAsync(receiver, 3);
        Assert.Equal(["m-1", "m-2", "m-3"], received.Select(m => m.MessageId));
        Assert.Equal(["first", "second", "third"], received.Select(m => m.Body.ToString()));
        Assert.All(received, m => Assert.Equal(1, m.DeliveryCount));
        var first = received[0];
        Assert.Equal(("c-1", "rush", "text/plain"), (first.CorrelationId, first.Subject, first.ContentType));
        Assert.Equal(12, first.ApplicationProperties["quantity"]);
        Assert.Equal(2.5, first.ApplicationProperties["price"]);
        Assert.Equal(true, first.ApplicationProperties["vip"]);
        Assert.Equal(TimeSpan.FromSeconds(3), first.ApplicationProperties["wait"]);
        Assert.True(first.SequenceNumber > 0);

        var lockedUntil = first.LockedUntil;
        await receiver.RenewMessageLockAsync(first);
        Assert.True(first.LockedUntil >= lockedUntil, $"renewed lock {first.LockedUntil:O} is before {lockedUntil:O}");
        await receiver.CompleteMessageAsync(first);
        await receiver.AbandonMessageAsync(received[1], new Dictionary<string, object> { ["tries"] = 1 });
        await receiver.DeferMessageAsync(received[2]);

        // The abandoned message comes again, counted, with its modified property.
        var again = Assert.Single(await ReceiveAsync(receiver, 1));
        Assert.Equal(("m-2", 2, 1), (again.MessageId, again.DeliveryCount, (int)again.ApplicationProperties["tries"]));
        await receiver.DeadLetterMessageAsync(again, "Invalid", "no such product");

        var deferred = await receiver.ReceiveDeferredMessageAsync(received[2].SequenceNumber);
        Assert.Equal("m-3", deferred.MessageId);
        await receiver.CompleteMessageAsync(deferred);

        var deadLetters = client.CreateReceiver("orders", new ServiceBusReceiverOptions { SubQueue = SubQueue.DeadLetter });
        var deadLetter = Assert.Single(await ReceiveAsync(deadLetters, 1));
        Assert.Equal(("m-2", "Invalid", "no such product"), (deadLetter.MessageId, deadLetter.DeadLetterReason, deadLetter.DeadLetterErrorDescription));
        await deadLetters.CompleteMessageAsync(deadLetter);

        // Completing the same lock twice: the SDK's MessageLockLost.
        var lost = await Assert.ThrowsAsync<ServiceBusException>(() => receiver.CompleteMessageAsync(first));
        Assert.Equal(ServiceBusFailureReason.MessageLockLost, lost.Reason);

        var scheduled = await sender.ScheduleMessageAsync(new ServiceBusMessage("later") { MessageId = "s-1" }, DateTimeOffset.UtcNow.AddHours(1));
        var peeked = Assert.Single(await receiver.PeekMessagesAsync(10));
        Assert.Equal((scheduled, ServiceBusMessageState.Scheduled), (peeked.SequenceNumber, peeked.State));
        await sender.CancelScheduledMessageAsync(scheduled);
        Assert.Empty(await receiver.PeekMessagesAsync(10));

        var missing = await Assert.ThrowsAsync<ServiceBusException>(() => client.CreateSender("no-such-queue").SendMessageAsync(new ServiceBusMessage("x")));
        Assert.Equal(ServiceBusFailureReason.MessagingEntityNotFound, missing.Reason);

        var counts = await farm.GetQueueCountsAsync("orders");
        Assert.Equal(0, counts.TotalMessageCount);
    }

    [Fact]
    public async Task MessagesCrossBetweenTheAzureSdkAndFarmsOwnSdk_WithTheirProperties()
    {
        await using var farm = await LocalFarm.StartAsync();
        await Succeeds(farm, "queue", "create", "bridge");
        var connection = (await Succeeds(farm, "connection-string", "--amqp")).Trim();
        await using var azure = new ServiceBusClient(connection, FastRetries);
        await using var native = new Farm.Client.FarmClient(farm.ConnectionString);

        await azure.CreateSender("bridge").SendMessageAsync(new ServiceBusMessage(BinaryData.FromBytes([1, 2, 3]))
        {
            MessageId = "from-azure",
            SessionId = null,
            ApplicationProperties = { ["n"] = 7L, ["s"] = "text" },
        });
        var nativeReceiver = native.CreateReceiver("bridge");
        var fromAzure = Assert.Single(await nativeReceiver.ReceiveMessagesAsync(1, TimeSpan.FromSeconds(10)));
        Assert.Equal("from-azure", fromAzure.MessageId);
        Assert.Equal([1, 2, 3], fromAzure.Body.ToArray());
        Assert.Equal(7L, fromAzure.ApplicationProperties["n"]);
        Assert.Equal("text", fromAzure.ApplicationProperties["s"]);
        await nativeReceiver.CompleteMessageAsync(fromAzure);

        await native.CreateSender("bridge").SendMessageAsync(new Farm.Client.FarmMessage(BinaryData.FromString("from farm"))
        {
            MessageId = "from-farm",
            Subject = "hello",
            ApplicationProperties = { ["when"] = new DateTimeOffset(2030, 1, 2, 3, 4, 5, TimeSpan.Zero) },
        });
        var azureReceiver = azure.CreateReceiver("bridge", new ServiceBusReceiverOptions { ReceiveMode = ServiceBusReceiveMode.ReceiveAndDelete });
        var fromFarm = Assert.Single(await ReceiveAsync(azureReceiver, 1));
        Assert.Equal(("from-farm", "hello", "from farm"), (fromFarm.MessageId, fromFarm.Subject, fromFarm.Body.ToString()));
        Assert.Equal(new DateTime(2030, 1, 2, 3, 4, 5, DateTimeKind.Utc), Assert.IsType<DateTime>(fromFarm.ApplicationProperties["when"]).ToUniversalTime());
        Assert.Equal(0, (await farm.GetQueueCountsAsync("bridge")).TotalMessageCount);
    }

    [Fact]
    public async Task OfficialDotNetSdk_ManagesRules_AndASubscriptionGetsOnlyWhatItsRulesSelect()
    {
        await using var farm = await LocalFarm.StartAsync();
        await Succeeds(farm, "topic", "create", "events");
        await Succeeds(farm, "subscription", "create", "events", "red");
        var connection = (await Succeeds(farm, "connection-string", "--amqp")).Trim();
        await using var client = new ServiceBusClient(connection, FastRetries);

        await using (var rules = client.CreateRuleManager("events", "red"))
        {
            await rules.DeleteRuleAsync(RuleProperties.DefaultRuleName);
            await rules.CreateRuleAsync("sql", new SqlRuleFilter("color = 'red'"));
            await rules.CreateRuleAsync(new CreateRuleOptions("by-correlation", new CorrelationRuleFilter { CorrelationId = "order-7" }) { Action = new SqlRuleAction("SET routed = 'yes'") });
            var listed = new List<RuleProperties>();
            await foreach (var rule in rules.GetRulesAsync())
            {
                listed.Add(rule);
            }
            Assert.Equal(["by-correlation", "sql"], listed.Select(r => r.Name).Order(StringComparer.Ordinal));
            Assert.Equal("color = 'red'", Assert.IsType<SqlRuleFilter>(listed.Single(r => r.Name == "sql").Filter).SqlExpression);
            var correlation = listed.Single(r => r.Name == "by-correlation");
            Assert.Equal("order-7", Assert.IsType<CorrelationRuleFilter>(correlation.Filter).CorrelationId);
            Assert.Equal("SET routed = 'yes'", Assert.IsType<SqlRuleAction>(correlation.Action).SqlExpression);
        }

        var sender = client.CreateSender("events");
        await sender.SendMessageAsync(new ServiceBusMessage("blue") { MessageId = "blue", ApplicationProperties = { ["color"] = "blue" } });
        await sender.SendMessageAsync(new ServiceBusMessage("red") { MessageId = "red", ApplicationProperties = { ["color"] = "red" } });
        await sender.SendMessageAsync(new ServiceBusMessage("order") { MessageId = "order", CorrelationId = "order-7" });

        var receiver = client.CreateReceiver("events", "red");
        var received = await ReceiveAsync(receiver, 2);
        Assert.Equal(["order", "red"], received.Select(m => m.MessageId).Order(StringComparer.Ordinal));
        Assert.Equal("yes", received.Single(m => m.MessageId == "order").ApplicationProperties["routed"]);
        foreach (var message in received)
        {
            await receiver.CompleteMessageAsync(message);
        }
        Assert.Empty(await receiver.ReceiveMessagesAsync(10, TimeSpan.FromSeconds(1)));
    }

    [Fact]
    public async Task ALink_IsRefusedWithoutAToken_AndEndsWithUnauthorizedAccessWhenItsTokenExpires()
    {
        await using var farm = await LocalFarm.StartAsync();
        await Succeeds(farm, "queue", "create", "guarded");
        var connection = (await Succeeds(farm, "connection-string", "--amqp")).Trim();
        var parts = connection.Split(';', StringSplitOptions.RemoveEmptyEntries).Select(p => p.Split('=', 2)).ToDictionary(p => p[0], p => p[1]);
        var endpoint = new Uri(parts["Endpoint"]);

        await using var amqp = await RawAmqpClient.ConnectAsync(endpoint);

        // No token: the attach is refused.
        var refused = await Assert.ThrowsAsync<AmqpException>(() => amqp.OpenReceiverAsync("guarded"));
        Assert.Equal(AmqpErrorCode.UnauthorizedAccess, refused.Error.Condition);

        // A token that lives a few seconds: the link opens, then ends when the token expires.
        var audience = $"sb://{endpoint.Host}:{endpoint.Port}/guarded";
        var expiresAt = DateTimeOffset.UtcNow.AddSeconds(4);
        await amqp.PutTokenAsync(audience, Sign(parts["SharedAccessKeyName"], parts["SharedAccessKey"], audience, expiresAt), expiresAt);
        var link = await amqp.OpenReceiverAsync("guarded");
        Assert.Equal(AmqpObjectState.Opened, link.State);
        await Eventually.UntilAsync(() => Task.FromResult(link.State is AmqpObjectState.End or AmqpObjectState.Faulted or AmqpObjectState.CloseReceived or AmqpObjectState.CloseSent),
            TimeSpan.FromSeconds(20), "the link to end once its token expired");
        var ended = Assert.IsType<AmqpException>(link.TerminalException);
        Assert.Equal(AmqpErrorCode.UnauthorizedAccess, ended.Error.Condition);
        Assert.Contains("expired", ended.Error.Description, StringComparison.Ordinal);

        // A wrong key is answered 401 on $cbs and grants nothing.
        var wrong = await Assert.ThrowsAnyAsync<Exception>(() => amqp.PutTokenAsync(audience, Sign(parts["SharedAccessKeyName"], "d3Jvbmcga2V5", audience, DateTimeOffset.UtcNow.AddHours(1)), DateTimeOffset.UtcNow.AddHours(1)));
        Assert.Contains("signature", wrong.Message, StringComparison.OrdinalIgnoreCase);
    }

    /// <summary>A SharedAccessSignature as the SDKs make one: HMAC-SHA256 of the URL-encoded audience and expiry with the key.</summary>
    private static string Sign(string keyName, string key, string audience, DateTimeOffset expiresAt)
    {
        var encoded = Uri.EscapeDataString(audience);
        var expiry = expiresAt.ToUnixTimeSeconds().ToString(CultureInfo.InvariantCulture);
        var signature = Convert.ToBase64String(System.Security.Cryptography.HMACSHA256.HashData(
            System.Text.Encoding.UTF8.GetBytes(key), System.Text.Encoding.UTF8.GetBytes(encoded + "\n" + expiry)));
        return $"SharedAccessSignature sr={encoded}&sig={Uri.EscapeDataString(signature)}&se={expiry}&skn={keyName}";
    }

    private static async Task<List<ServiceBusReceivedMessage>> ReceiveAsync(ServiceBusReceiver receiver, int count)
    {
        var received = new List<ServiceBusReceivedMessage>();
        await Eventually.UntilAsync(async () =>
        {
            received.AddRange(await receiver.ReceiveMessagesAsync(count - received.Count, TimeSpan.FromSeconds(2)));
            return received.Count >= count;
        }, TimeSpan.FromSeconds(60), $"{count} messages from {receiver.EntityPath}");
        return received;
    }

    private static async Task<string> Succeeds(LocalFarm farm, params string[] arguments)
    {
        var result = await farm.RunAsync(arguments);
        Assert.True(result.ExitCode == 0, $"farm {string.Join(' ', arguments)} failed: {result}");
        return result.Stdout;
    }

    /// <summary>The node that owns the queue's container, once every container has an owner.</summary>
    private static async Task<long> OwnerNodeOfAsync(LocalFarm farm, string queue)
    {
        using var shown = JsonDocument.Parse(await Succeeds(farm, "queue", "show", queue, "--json"));
        var container = shown.RootElement.GetProperty("container_id").GetInt64();
        long? owner = null;
        await Eventually.UntilAsync(async () =>
        {
            using var status = await farm.StatusJsonAsync();
            var entry = status.RootElement.GetProperty("containers").EnumerateArray().FirstOrDefault(c => c.GetProperty("id").GetInt64() == container);
            owner = entry.ValueKind == JsonValueKind.Object && entry.TryGetProperty("owner_node", out var node) && node.ValueKind == JsonValueKind.Number ? node.GetInt64() : null;
            return owner is not null;
        }, TimeSpan.FromSeconds(60), $"container {container} of '{queue}' to have an owner");
        return owner!.Value;
    }

    /// <summary>A bare AMQP client (Microsoft.Azure.Amqp): SASL ANONYMOUS, $cbs put-token, receiver links.</summary>
    private sealed class RawAmqpClient : IAsyncDisposable
    {
        private readonly AmqpConnection _connection;
        private readonly AmqpSession _session;
        private readonly AmqpCbsLink _cbs;

        private RawAmqpClient(AmqpConnection connection, AmqpSession session) => (_connection, _session, _cbs) = (connection, session, new AmqpCbsLink(connection));

        public static async Task<RawAmqpClient> ConnectAsync(Uri endpoint)
        {
            var settings = new AmqpSettings();
            var sasl = new SaslTransportProvider();
            sasl.Versions.Add(new AmqpVersion(1, 0, 0));
            sasl.AddHandler(new SaslAnonymousHandler());
            settings.TransportProviders.Add(sasl);
            var amqp = new AmqpTransportProvider();
            amqp.Versions.Add(new AmqpVersion(1, 0, 0));
            settings.TransportProviders.Add(amqp);
            var transport = await new AmqpTransportInitiator(settings, new TcpTransportSettings { Host = endpoint.Host, Port = endpoint.Port }).ConnectTaskAsync(TimeSpan.FromSeconds(10));
            var connection = new AmqpConnection(transport, settings, new AmqpConnectionSettings { ContainerId = "farm-test", HostName = endpoint.Host });
            await connection.OpenAsync(TimeSpan.FromSeconds(10));
            var session = connection.CreateSession(new AmqpSessionSettings());
            await session.OpenAsync(TimeSpan.FromSeconds(10));
            return new RawAmqpClient(connection, session);
        }

        public async Task PutTokenAsync(string audience, string token, DateTimeOffset expiresAt)
        {
            await _cbs.SendTokenAsync(new FixedToken(token, expiresAt), new Uri(audience), audience, audience, ["Listen"], TimeSpan.FromSeconds(10));
        }

        public async Task<ReceivingAmqpLink> OpenReceiverAsync(string entity)
        {
            var name = "receiver-" + Guid.NewGuid().ToString("N");
            var link = new ReceivingAmqpLink(new AmqpLinkSettings
            {
                LinkName = name,
                Role = true,
                Source = new Source { Address = entity },
                Target = new Target { Address = name },
                SettleType = SettleMode.SettleOnDispose,
                TotalLinkCredit = 0,
            });
            link.AttachTo(_session);
            await link.OpenAsync(TimeSpan.FromSeconds(20));
            return link;
        }

        public async ValueTask DisposeAsync() => await _connection.CloseAsync(TimeSpan.FromSeconds(5));

        private sealed class FixedToken(string token, DateTimeOffset expiresAt) : ICbsTokenProvider
        {
            public Task<CbsToken> GetTokenAsync(Uri namespaceAddress, string appliesTo, string[] requiredClaims) =>
                Task.FromResult(new CbsToken(token, "servicebus.windows.net:sastoken", expiresAt.UtcDateTime));
        }
    }
}
