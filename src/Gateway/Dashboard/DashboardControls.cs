using System.Globalization;
using System.Net;
using Farm.Broker.Administration;
using Farm.Broker.Entities;
using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Gateway.Dashboard;

/// <summary>
/// What the dashboard's buttons do. Farm operations go through this node's own gRPC front door,
/// exactly as the CLI and the SDK call them (routed to the owner, checked the same way); node
/// processes through <see cref="NodeProcessControl"/>. Every answer is one line for the page.
/// </summary>
internal sealed class DashboardControls(DashboardFeed feed, NodeProcessControl processes, EntityAdministration admin)
{
    /// <summary>Most messages one peek shows.</summary>
    private const int MaxPeek = 100;

    private static readonly TimeSpan ControlDeadline = TimeSpan.FromSeconds(60);

    private static global::Grpc.Core.CallOptions Deadline(CancellationToken ct) => new(deadline: DateTime.UtcNow + ControlDeadline, cancellationToken: ct);

    private static object Done(string message) => new { message };

    public async Task<object> NodeAsync(long nodeId, string action, CancellationToken ct)
    {
        // An unknown node is refused before anything runs.
        await admin.RequireNodeAsync(nodeId, ct);
        if (action == "drain")
        {
            await feed.Self.NodeControl.DrainNodeAsync(new DrainNodeRequest { NodeId = nodeId }, Deadline(ct));
            return Done($"node {nodeId} is draining: its containers move to the other nodes one at a time, then it stops");
        }
        return Done(await processes.RunAsync(action, nodeId, ct));
    }

    public async Task<object> MoveAsync(long containerId, MoveBody body, CancellationToken ct)
    {
        if (body.ToNode <= 0)
        {
            throw new DashboardException(HttpStatusCode.BadRequest, "Name the node to move the container to (toNode 1 or more).");
        }
        await admin.RequireNodeAsync(body.ToNode, ct);
        var moved = await feed.Self.NodeControl.MoveContainerAsync(new MoveContainerRequest { ContainerId = containerId, ToNode = body.ToNode }, Deadline(ct));
        return Done($"container {containerId} moved to node {moved.OwnerNode} (epoch {moved.Epoch})");
    }

    public async Task<object> OrderingAsync(OrderingBody body, CancellationToken ct)
    {
        var topic = await feed.Self.Management.UpdateTopicAsync(new UpdateTopicRequest
        {
            Name = Required(body.Topic, "topic"),
            Properties = new TopicProperties { SupportOrdering = body.SupportOrdering },
        }, Deadline(ct));
        return Done($"topic {topic.Name}: SupportOrdering is {(topic.Properties.SupportOrdering ? "on" : "off")}");
    }

    public async Task<object> CreateAsync(EntityBody body, CancellationToken ct)
    {
        var name = Required(body.Name, "name");
        switch (body.Kind)
        {
            case "queue":
                await feed.Self.Management.CreateQueueAsync(new CreateQueueRequest { Name = name }, Deadline(ct));
                return Done($"queue {name} created");
            case "topic":
                await feed.Self.Management.CreateTopicAsync(new CreateTopicRequest
                {
                    Name = name,
                    Properties = new TopicProperties { SupportOrdering = body.SupportOrdering ?? false },
                }, Deadline(ct));
                return Done($"topic {name} created");
            case "subscription":
                var topic = Required(body.Topic, "topic");
                await feed.Self.Management.CreateSubscriptionAsync(new CreateSubscriptionRequest { Topic = topic, Name = name }, Deadline(ct));
                return Done($"subscription {topic}/Subscriptions/{name} created");
            default:
                throw UnknownKind(body.Kind);
        }
    }

    public async Task<object> DeleteAsync(EntityBody body, CancellationToken ct)
    {
        var name = Required(body.Name, "name");
        switch (body.Kind)
        {
            case "queue":
                await feed.Self.Management.DeleteQueueAsync(new DeleteQueueRequest { Name = name }, Deadline(ct));
                return Done($"queue {name} deleted");
            case "topic":
                await feed.Self.Management.DeleteTopicAsync(new DeleteTopicRequest { Name = name }, Deadline(ct));
                return Done($"topic {name} deleted");
            case "subscription":
                var topic = Required(body.Topic, "topic");
                await feed.Self.Management.DeleteSubscriptionAsync(new DeleteSubscriptionRequest { Topic = topic, Name = name }, Deadline(ct));
                return Done($"subscription {topic}/Subscriptions/{name} deleted");
            default:
                throw UnknownKind(body.Kind);
        }
    }

    public async Task<object> PeekAsync(string entity, bool deadLetter, string maxText, CancellationToken ct)
    {
        var max = 20;
        if (!string.IsNullOrEmpty(maxText) && (!int.TryParse(maxText, NumberStyles.None, CultureInfo.InvariantCulture, out max) || max < 1 || max > MaxPeek))
        {
            throw new DashboardException(HttpStatusCode.BadRequest, $"max must be a whole number from 1 to {MaxPeek}; got '{maxText}'.");
        }
        var path = PathOf(Required(entity, "entity"), deadLetter);
        var peeked = await feed.Self.Messaging.PeekAsync(new PeekRequest { Entity = path, MaxMessages = max }, Deadline(ct));
        return new { entity = path, messages = peeked.Messages.Select(Describe).ToList() };
    }

    public async Task<object> ResubmitAsync(ResubmitBody body, CancellationToken ct)
    {
        var entity = Required(body.Entity, "entity");
        if (body.SequenceNumbers is { Length: > 0 } numbers)
        {
            var one = await feed.Self.Messaging.ResubmitDeadLettersAsync(new ResubmitDeadLettersRequest { Entity = entity, SequenceNumbers = { numbers } }, Deadline(ct));
            return Done($"{one.ResubmittedCount} dead-lettered message(s) of {entity} resubmitted");
        }
        var total = 0;
        ResubmitDeadLettersResponse response;
        do
        {
            response = await feed.Self.Messaging.ResubmitDeadLettersAsync(new ResubmitDeadLettersRequest { Entity = entity }, Deadline(ct));
            total += response.ResubmittedCount;
        }
        while (response.More && response.ResubmittedCount > 0);
        if (total == 0)
        {
            throw new DashboardException(HttpStatusCode.Conflict, $"{entity} has no dead-lettered messages to resubmit.");
        }
        return Done($"{total} dead-lettered message(s) of {entity} resubmitted");
    }

    public async Task<object> PurgeAsync(PurgeBody body, CancellationToken ct)
    {
        var path = PathOf(Required(body.Entity, "entity"), body.DeadLetter);
        long through = 0;
        var total = 0;
        DeleteMessagesResponse response;
        do
        {
            response = await feed.Self.Messaging.DeleteMessagesAsync(new DeleteMessagesRequest { Entity = path, ThroughSequenceNumber = through }, Deadline(ct));
            through = response.ThroughSequenceNumber;
            total += response.DeletedCount;
        }
        while (response.More && response.DeletedCount > 0);
        return Done($"{total} message(s) purged from {path}");
    }

    private static string PathOf(string entity, bool deadLetter) =>
        deadLetter && !entity.EndsWith(EntityNames.DeadLetterQueueSuffix, StringComparison.Ordinal) ? entity + EntityNames.DeadLetterQueueSuffix : entity;

    private static string Required(string? value, string what) =>
        string.IsNullOrWhiteSpace(value) ? throw new DashboardException(HttpStatusCode.BadRequest, $"The request must name the {what}.") : value.Trim();

    private static DashboardException UnknownKind(string? kind) =>
        new(HttpStatusCode.BadRequest, $"'{kind}' is not an entity kind; use queue, topic or subscription.");

    private static PeekedMessageView Describe(ReceivedMessage m)
    {
        var body = m.Message?.Body ?? ByteString.Empty;
        var text = TryUtf8(body);
        return new PeekedMessageView(
            m.SequenceNumber, m.State.ToString().Replace("MessageState", "", StringComparison.Ordinal).ToLowerInvariant(), m.DeliveryCount,
            m.EnqueuedTime?.ToDateTimeOffset(), m.ExpiresAt?.ToDateTimeOffset(),
            m.Message?.MessageId ?? "", m.Message?.Subject ?? "", m.Message?.ContentType ?? "",
            text ?? body.ToBase64(), text is null,
            m.Message?.ApplicationProperties.ToDictionary(p => p.Key, p => ValueText(p.Value)) ?? [],
            m.DeadLetterReason, m.DeadLetterErrorDescription, m.DeadLetterSource);
    }

    private static string? TryUtf8(ByteString body)
    {
        try
        {
            return new System.Text.UTF8Encoding(false, throwOnInvalidBytes: true).GetString(body.Span);
        }
        catch (System.Text.DecoderFallbackException)
        {
            return null;
        }
    }

    private static string ValueText(PropertyValue value) => value.KindCase switch
    {
        PropertyValue.KindOneofCase.StringValue => value.StringValue,
        PropertyValue.KindOneofCase.LongValue => value.LongValue.ToString(CultureInfo.InvariantCulture),
        PropertyValue.KindOneofCase.IntValue => value.IntValue.ToString(CultureInfo.InvariantCulture),
        PropertyValue.KindOneofCase.DoubleValue => value.DoubleValue.ToString(CultureInfo.InvariantCulture),
        PropertyValue.KindOneofCase.BoolValue => value.BoolValue ? "true" : "false",
        PropertyValue.KindOneofCase.BytesValue => value.BytesValue.ToBase64(),
        PropertyValue.KindOneofCase.TimestampValue => value.TimestampValue.ToDateTimeOffset().ToString("O", CultureInfo.InvariantCulture),
        PropertyValue.KindOneofCase.DurationValue => value.DurationValue.ToTimeSpan().ToString("c", CultureInfo.InvariantCulture),
        PropertyValue.KindOneofCase.GuidValue => value.GuidValue,
        _ => "",
    };
}
