using Farm.Broker.Administration;
using Farm.Broker.Node;
using Farm.Contracts.V1;
using Farm.Gateway.Routing;
using Grpc.Core;

namespace Farm.Gateway.Dashboard;

/// <summary>
/// Builds the dashboard's view of the farm: nodes and containers from the farm database, entities
/// and their counts through this node's own gRPC front door (so each count comes from the entity's
/// owner, wherever it runs), rates from the nodes' Prometheus endpoints and the ownership timeline.
/// Views are built only while someone waits for one, at most once per refresh interval (or twice the
/// time the last build took, on a farm with many entities), and shared by every page watching.
/// </summary>
internal sealed class DashboardFeed(
    BrokerNode node, NodeOptions nodeOptions, EntityAdministration admin, OwnerChannels channels,
    DashboardOptions options, NodeProcessControl processes, EntityRates rates, TimeProvider time)
{
    /// <summary>How many ownership changes the timeline shows.</summary>
    private const int TimelineLength = 50;

    private static readonly TimeSpan CallDeadline = TimeSpan.FromSeconds(5);

    private readonly SemaphoreSlim _building = new(1, 1);
    private FarmView? _latest;
    private TimeSpan _lastBuild;

    /// <summary>
    /// The first view newer than <paramref name="seenVersion"/>: the latest one when it is newer,
    /// else the next one, built when the refresh interval since the last build has passed.
    /// </summary>
    public async Task<FarmView> NextAsync(long seenVersion, CancellationToken cancellationToken)
    {
        while (true)
        {
            if (_latest is { } latest && latest.Version > seenVersion)
            {
                return latest;
            }
            await _building.WaitAsync(cancellationToken);
            try
            {
                latest = _latest;
                if (latest is not null && latest.Version > seenVersion)
                {
                    return latest;
                }
                if (latest is not null)
                {
                    var gap = options.RefreshInterval > 2 * _lastBuild ? options.RefreshInterval : 2 * _lastBuild;
                    var wait = latest.At + gap - time.GetUtcNow();
                    if (wait > TimeSpan.Zero)
                    {
                        await Task.Delay(wait, time, cancellationToken);
                    }
                }
                var started = time.GetTimestamp();
                _latest = await BuildAsync((latest?.Version ?? 0) + 1, cancellationToken);
                _lastBuild = time.GetElapsedTime(started);
            }
            finally
            {
                _building.Release();
            }
        }
    }

    /// <summary>The freshest view, built now unless one is younger than the refresh interval.</summary>
    public Task<FarmView> CurrentAsync(CancellationToken cancellationToken)
    {
        var latest = _latest;
        return latest is not null && time.GetUtcNow() - latest.At < options.RefreshInterval
            ? Task.FromResult(latest)
            : NextAsync(latest?.Version ?? 0, cancellationToken);
    }

    /// <summary>The gRPC clients of this node's own front door (it routes each call to the entity's owner).</summary>
    public OwnerClients Self => channels.Get(node.Address);

    public static CallOptions Deadline(CancellationToken cancellationToken) => new(deadline: DateTime.UtcNow + CallDeadline, cancellationToken: cancellationToken);

    private async Task<FarmView> BuildAsync(long version, CancellationToken cancellationToken)
    {
        var problems = new List<string>();
        FarmStatus status;
        IReadOnlyList<ContainerStore.FarmDatabase.OwnershipChangeRecord> changes;
        try
        {
            status = await admin.GetStatusAsync(cancellationToken);
            changes = await admin.ListOwnershipChangesAsync(TimelineLength, cancellationToken);
        }
        catch (Exception e) when (!cancellationToken.IsCancellationRequested)
        {
            // The farm database went away: say so on the page instead of ending every watcher's stream.
            problems.Add($"The farm database cannot be read from node {node.NodeId}: {e.Message}");
            return new FarmView(version, time.GetUtcNow(), node.NodeId, Controls(forCaller: null), [], [], [], [], [], problems);
        }

        var liveNodes = status.Nodes.Where(n => IsLive(n)).ToList();
        var ratesTask = rates.ScrapeAsync(liveNodes.Select(n => (n.Id, n.MetricsUrl)), cancellationToken);
        var queuesTask = ListQueuesAsync(problems, cancellationToken);
        var topicsTask = ListTopicsAsync(problems, cancellationToken);
        var measured = await ratesTask;
        var queues = await queuesTask;
        var topics = await topicsTask;

        var nodes = status.Nodes.OrderBy(n => n.Id).Select(n => new NodeView(
            n.Id, n.State, IsLive(n), n.Address, DashboardUrlOf(n.MetricsUrl), n.HeartbeatAge?.ToTimeSpan().TotalSeconds ?? 0,
            n.ProcessId, NodeProcessControl.StateOf(n.ProcessId, n.Address, node.Address),
            [.. status.Containers.Where(c => c.OwnerNode == n.Id).Select(c => c.Id).Order()],
            string.IsNullOrEmpty(n.AmqpAddress) ? null : n.AmqpAddress)).ToList();
        var containers = status.Containers.OrderBy(c => c.Id).Select(c => new ContainerView(
            c.Id, c.OwnerNode, c.Epoch, c.EntityCount, c.OwnedSince?.ToDateTimeOffset(), string.IsNullOrEmpty(c.Server) ? null : c.Server)).ToList();
        var timeline = changes.Select(c => new OwnershipChangeView(
            c.ContainerId, c.Epoch, c.FromNode, c.ToNode, c.Kind, c.Unowned?.TotalSeconds, new DateTimeOffset(c.At, TimeSpan.Zero))).ToList();

        return new FarmView(
            version, time.GetUtcNow(), node.NodeId, Controls(forCaller: null), nodes, containers, timeline,
            [.. queues.Select(q => q with
            {
                SendRate = measured.Send.GetValueOrDefault(q.Name),
                ReceiveRate = measured.Receive.GetValueOrDefault(q.Name),
            })],
            [.. topics.Select(t => t with
            {
                SendRate = measured.Send.GetValueOrDefault(t.Name),
                Subscriptions = [.. t.Subscriptions.Select(s => s with { ReceiveRate = measured.Receive.GetValueOrDefault(s.Path) })],
            })],
            problems);
    }

    /// <summary>The controls part of a view: the same for every caller except whether they may use them.</summary>
    public ControlsView Controls(bool? forCaller) => new(
        forCaller ?? true,
        options.RemoteControl
            ? "Controls are open to every caller (this node was started with --dashboard-remote-control)."
            : "Controls answer only callers on this machine (loopback); start a node with --dashboard-remote-control to open them.",
        processes.Available,
        processes.Note);

    private bool IsLive(NodeInfo n) =>
        (n.HeartbeatAge?.ToTimeSpan() ?? TimeSpan.MaxValue) < nodeOptions.NodeTimeout && n.State is not (ContainerStore.FarmDatabase.NodeStates.Stopped or ContainerStore.FarmDatabase.NodeStates.Crashed);

    /// <summary>The dashboard lives at the root of the node's HTTP/1.1 listener, beside /metrics.</summary>
    public static string DashboardUrlOf(string metricsUrl) =>
        metricsUrl.EndsWith("/metrics", StringComparison.Ordinal) ? metricsUrl[..^"metrics".Length] : metricsUrl;

    private async Task<List<QueueView>> ListQueuesAsync(List<string> problems, CancellationToken cancellationToken)
    {
        try
        {
            var response = await Self.Management.ListQueuesAsync(new ListQueuesRequest(), Deadline(cancellationToken));
            return [.. response.Queues.OrderBy(q => q.Name, StringComparer.Ordinal).Select(q => new QueueView(q.Name, q.ContainerId, CountsOf(q.Counts), 0, 0, null))];
        }
        catch (RpcException e)
        {
            problems.Add($"Queues could not be listed: {e.Status.Detail}");
            return [];
        }
    }

    private async Task<List<TopicView>> ListTopicsAsync(List<string> problems, CancellationToken cancellationToken)
    {
        List<TopicInfo> topics;
        try
        {
            topics = [.. (await Self.Management.ListTopicsAsync(new ListTopicsRequest(), Deadline(cancellationToken))).Topics.OrderBy(t => t.Name, StringComparer.Ordinal)];
        }
        catch (RpcException e)
        {
            problems.Add($"Topics could not be listed: {e.Status.Detail}");
            return [];
        }
        var views = new List<TopicView>();
        foreach (var topic in topics)
        {
            IReadOnlyList<SubscriptionView> subscriptions = [];
            string? problem = null;
            try
            {
                var listed = await Self.Management.ListSubscriptionsAsync(new ListSubscriptionsRequest { Topic = topic.Name }, Deadline(cancellationToken));
                subscriptions = [.. listed.Subscriptions.OrderBy(s => s.Name, StringComparer.Ordinal).Select(s => new SubscriptionView(s.Name, s.Path, CountsOf(s.Counts), 0))];
            }
            catch (RpcException e)
            {
                problem = e.Status.Detail;
            }
            views.Add(new TopicView(topic.Name, topic.ContainerId, topic.Properties?.SupportOrdering ?? false, topic.MessageCount, 0, subscriptions, problem));
        }
        return views;
    }

    private static CountsView? CountsOf(MessageCounts? counts) => counts is null ? null
        : new CountsView(counts.Active, counts.Scheduled, counts.Deferred, counts.DeadLetter, counts.Locked, counts.Total);
}
