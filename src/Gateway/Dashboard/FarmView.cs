namespace Farm.Gateway.Dashboard;

// What the dashboard page draws, as JSON (camelCase). One snapshot holds the whole farm as this
// node sees it; the page replaces its view with each one.

internal sealed record FarmView(
    long Version,
    DateTimeOffset At,
    long ServedBy,
    ControlsView Controls,
    IReadOnlyList<NodeView> Nodes,
    IReadOnlyList<ContainerView> Containers,
    IReadOnlyList<OwnershipChangeView> Changes,
    IReadOnlyList<QueueView> Queues,
    IReadOnlyList<TopicView> Topics,
    IReadOnlyList<string> Problems);

/// <summary>Whether this caller may use the controls, and whether node processes can be reached from here.</summary>
internal sealed record ControlsView(bool Allowed, string Note, bool Processes, string ProcessNote);

/// <summary>
/// A node: <c>Live</c> while its heartbeat is younger than the node timeout; <c>Process</c> is
/// running, paused or exited where this node can see the process (same machine), else unknown.
/// </summary>
internal sealed record NodeView(
    long Id, string State, bool Live, string Address, string DashboardUrl, double HeartbeatAgeSeconds,
    int ProcessId, string Process, IReadOnlyList<long> Containers, string? AmqpAddress = null);

/// <summary>A container; <c>Server</c> names the database server it is on (null: the farm database's).</summary>
internal sealed record ContainerView(long Id, long Owner, long Epoch, long Entities, DateTimeOffset? OwnedSince, string? Server);

/// <summary>One change of a container's owner: failover, planned, first or restart, and how long it had no owner.</summary>
internal sealed record OwnershipChangeView(long Container, long Epoch, long From, long To, string Kind, double? UnownedSeconds, DateTimeOffset At);

internal sealed record CountsView(long Active, long Scheduled, long Deferred, long DeadLetter, long Locked, long Total);

/// <summary>A queue with its counts and its rates (messages per second, over the last refresh).</summary>
internal sealed record QueueView(string Name, long Container, CountsView? Counts, double SendRate, double ReceiveRate, string? Problem);

internal sealed record SubscriptionView(string Name, string Path, CountsView? Counts, double ReceiveRate);

internal sealed record TopicView(
    string Name, long Container, bool SupportOrdering, long Messages, double SendRate,
    IReadOnlyList<SubscriptionView> Subscriptions, string? Problem);

/// <summary>A peeked message: body as text (UTF-8, or base64 when it is not text) and its properties.</summary>
internal sealed record PeekedMessageView(
    long SequenceNumber, string State, int DeliveryCount, DateTimeOffset? EnqueuedTime, DateTimeOffset? ExpiresAt,
    string MessageId, string Subject, string ContentType, string Body, bool BodyIsBase64,
    IReadOnlyDictionary<string, string> Properties, string DeadLetterReason, string DeadLetterDescription, string DeadLetterSource);
