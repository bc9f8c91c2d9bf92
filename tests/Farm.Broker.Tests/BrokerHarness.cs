using Farm.Testing;
using Microsoft.Extensions.Time.Testing;
using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.Broker.Topics;
using Farm.ContainerStore;
using Farm.ContainerStore.FarmDatabase;
using Farm.ContainerStore.Sqlite;
using Farm.Contracts.V1;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Broker.Tests;

/// <summary>
/// A real broker node on real SQLite files in a temp directory, driven by a manual clock.
/// <see cref="RestartAsync"/> drops the node without a graceful hand-over and starts a new one
/// on the same files, as a crash and restart would.
/// </summary>
internal sealed class BrokerHarness : IAsyncDisposable
{
    private readonly string _directory = Path.Combine(Path.GetTempPath(), "farm-broker-tests", Guid.NewGuid().ToString("N"));

    private BrokerHarness()
    {
    }

    public FakeTimeProvider Time { get; } = TestClock.Create();

    public BrokerNode Node { get; private set; } = null!;

    /// <summary>
    /// Load shedding off: every test node in this process shares one thread pool, and a busy test
    /// run must not make an unrelated test's send SERVICE_BUSY. The shedding tests turn it on.
    /// </summary>
    public BrokerOptions Options { get; } = new() { ShedSendsAfter = TimeSpan.Zero };

    /// <summary>How far behind its work the next node started is (load shedding); the process's real thread-pool lag when null.</summary>
    public Func<TimeSpan>? Lag { get; set; }

    /// <summary>
    /// Waits until <paramref name="condition"/> holds, moving the clock on one sweep at a time for
    /// at most <paramref name="maxSweeps"/> sweeps: a test that bounds how many sweeps some work may
    /// take (the condition may assert invariants on each look).
    /// </summary>
    public Task SweepUntilAsync(Func<bool> condition, string what, int maxSweeps = 200)
    {
        var sweeps = 0;
        return Eventually.UntilAsync(() =>
        {
            if (sweeps++ < maxSweeps)
            {
                Time.Advance(Options.SweepInterval);
            }
            return condition();
        }, TimeSpan.FromSeconds(30), what);
    }

    /// <summary>The store the next node started (or restarted) uses: a test may step into it.</summary>
    public IStoreProvider Provider { get; set; } = new SqliteStoreProvider();

    public string DataDirectory => _directory;

    /// <summary>The store itself, not <see cref="Provider"/> (which a test may step into), for reads beside the node.</summary>
    private IStoreProvider DirectProvider() => PostgresFarm is null ? new SqliteStoreProvider() : new Farm.ContainerStore.Postgres.PostgresStoreProvider();

    /// <summary>A PostgreSQL farm database for the next node (its containers' databases on the same server); null: SQLite files.</summary>
    public string? PostgresFarm { get; set; }

    public static async Task<BrokerHarness> StartAsync(Action<BrokerHarness>? configure = null)
    {
        var harness = new BrokerHarness();
        configure?.Invoke(harness);
        harness.Node = await harness.StartNodeAsync();
        return harness;
    }

    private async Task<BrokerNode> StartNodeAsync()
    {
        var options = PostgresFarm is null
            ? new NodeOptions { NodeId = 1, DataDirectory = _directory }
            : new NodeOptions { NodeId = 1, DataDirectory = _directory, Store = "postgres", FarmConnectionString = PostgresFarm };
        var node = new BrokerNode(Provider, options, Options, Time, NullLogger<BrokerNode>.Instance, lag: Lag);
        await node.StartAsync("http://test", CancellationToken.None);
        return node;
    }

    public async Task<QueueEntity> CreateQueueAsync(string name, QueueSettings? settings = null)
    {
        var record = await Node.Farm.CreateEntityAsync(name, EntityKinds.Queue, 1, (settings ?? new QueueSettings()).ToJson());
        return await Node.LoadAsync(record, CancellationToken.None);
    }

    public async Task<TopicEntity> CreateTopicAsync(string name, TopicSettings? settings = null)
    {
        var record = await Node.Farm.CreateEntityAsync(name, EntityKinds.Topic, 1, (settings ?? new TopicSettings()).ToJson());
        return await Node.LoadTopicAsync(record, CancellationToken.None);
    }

    /// <summary>
    /// Creates a subscription as the management API does: its record and first rule (the first of
    /// <paramref name="rules"/>, or $Default), then any further rules, then tells the node.
    /// </summary>
    public async Task<QueueEntity> CreateSubscriptionAsync(string topic, string name, SubscriptionSettings? settings = null, params RuleProperties[] rules)
    {
        var topicRecord = await Node.Farm.GetEntityAsync(topic) ?? throw new InvalidOperationException("no topic");
        var first = rules.Length > 0 ? rules[0] : RuleDefinitions.DefaultRule;
        var record = await Node.Farm.CreateChildEntityAsync(topicRecord.Id, EntityNames.SubscriptionPath(topic, name), EntityKinds.Subscription,
            (settings ?? new SubscriptionSettings()).ToJson(), first.Name, RuleDefinitions.ToJson(first));
        foreach (var rule in rules.Skip(1))
        {
            await Node.Farm.CreateRuleAsync(record.Id, rule.Name, RuleDefinitions.ToJson(rule));
        }
        await Node.AddSubscriptionAsync(record, CancellationToken.None);
        return await Node.ResolveQueueAsync(record.Name, CancellationToken.None);
    }

    public Task<QueueEntity> SubscriptionAsync(string topic, string name) =>
        Node.ResolveQueueAsync(EntityNames.SubscriptionPath(topic, name), CancellationToken.None).AsTask();

    public Task<TopicEntity> TopicAsync(string name) => Node.ResolveTopicAsync(name, CancellationToken.None);

    public static RuleProperties SqlRule(string name, string filter, string? action = null) =>
        new() { Name = name, SqlFilter = new Contracts.V1.SqlFilter { Expression = filter }, SqlAction = action ?? "" };

    /// <summary>Reads what a container database holds for an entity, bypassing every broker.</summary>
    public async Task<Farm.ContainerStore.Containers.EntityLoad> ReadContainerDirectlyAsync(long containerId, long entityId)
    {
        var provider = DirectProvider();
        var record = await Node.Farm.GetContainerAsync(containerId) ?? throw new InvalidOperationException("no container");
        await using var database = await provider.OpenContainerAsync(record.ConnectionString);
        return await database.LoadEntityAsync(entityId, Time.GetUtcNow().ToUnixTimeMilliseconds());
    }

    /// <summary>A subscription's head as a takeover reads it, its implicit messages (the copies naming it) among its rows.</summary>
    public async Task<Farm.ContainerStore.Containers.EntityLoad> ReadSubscriptionHeadDirectlyAsync(long containerId, long subscriptionId, long topicId)
    {
        var provider = DirectProvider();
        var record = await Node.Farm.GetContainerAsync(containerId) ?? throw new InvalidOperationException("no container");
        await using var database = await provider.OpenContainerAsync(record.ConnectionString);
        return await database.LoadEntityHeadAsync(subscriptionId, Time.GetUtcNow().ToUnixTimeMilliseconds(), long.MaxValue, copiesOf: topicId);
    }

    public Task<QueueEntity> QueueAsync(string name) => Node.ResolveQueueAsync(name, CancellationToken.None).AsTask();

    private readonly List<BrokerNode> _abandoned = [];

    /// <summary>The nodes a crash restart left behind (disposed with the harness).</summary>
    public IReadOnlyList<BrokerNode> Abandoned => _abandoned;

    /// <summary>
    /// Starts a new node on the same files. With <paramref name="crash"/> the old node is not shut
    /// down (no lease hand-over, no drain): it is abandoned as a killed process would be, and the
    /// new node fences it off by raising the containers' epochs.
    /// </summary>
    public async Task RestartAsync(bool crash = true)
    {
        if (crash)
        {
            await Node.StopOwnershipForTestsAsync();
            _abandoned.Add(Node);
        }
        else
        {
            await Node.DisposeAsync();
        }
        Node = await StartNodeAsync();
    }

    /// <summary>
    /// A peek-lock receive of up to <paramref name="maxMessages"/> that is waiting once this returns
    /// (its credit counts on the queue), so a send from now on stores its messages counted at send.
    /// </summary>
    public static async Task<Task<IReadOnlyList<ReceivedMessage>>> WaitingReceiveAsync(QueueEntity queue, int maxMessages, TimeSpan patience)
    {
        var receive = queue.ReceiveAsync(false, ReceiveMode.PeekLock, maxMessages, patience, default);
        await Eventually.UntilAsync(() => queue.WaitingPeekLockCredit >= maxMessages, patience, "the receiver to wait");
        return receive;
    }

    public static Message Text(string body, string? messageId = null, TimeSpan? ttl = null, DateTimeOffset? scheduledAt = null)
    {
        var message = new Message { Body = ByteString.CopyFromUtf8(body), MessageId = messageId ?? Guid.NewGuid().ToString("N") };
        if (ttl is { } t)
        {
            message.TimeToLive = Duration.FromTimeSpan(t);
        }
        if (scheduledAt is { } at)
        {
            message.ScheduledEnqueueTime = Timestamp.FromDateTimeOffset(at);
        }
        return message;
    }

    public async ValueTask DisposeAsync()
    {
        await Node.DisposeAsync();
        foreach (var node in _abandoned)
        {
            await node.DisposeAsync();
        }
        try
        {
            Directory.Delete(_directory, recursive: true);
        }
        catch (IOException)
        {
            // A file still open on a slow dispose is not worth failing a test for.
        }
    }
}
