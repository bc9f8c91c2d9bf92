using System.Runtime.CompilerServices;
using Farm.Contracts.V1;

namespace Farm.Client;

/// <summary>
/// Manages queues, topics, subscriptions, rules and containers and reports the farm's status, like
/// Azure's ServiceBusAdministrationClient. Calls go to any gateway, with the client's retries and
/// failover. Topics, subscriptions and rules are in FarmAdministrationClient.Topics.cs.
/// </summary>
public sealed partial class FarmAdministrationClient : IDisposable
{
    private readonly FarmConnection _connection;

    public FarmAdministrationClient(string connectionString, FarmClientOptions? options = null)
        : this(FarmConnectionString.Parse(connectionString), options)
    {
    }

    public FarmAdministrationClient(FarmConnectionString connectionString, FarmClientOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(connectionString);
        _connection = new FarmConnection(connectionString, options ?? new FarmClientOptions());
    }

    public FarmConnectionString ConnectionString => _connection.ConnectionString;

    public Task<QueueProperties> CreateQueueAsync(string name, CancellationToken cancellationToken = default)
        => CreateQueueAsync(new CreateQueueOptions(name), cancellationToken);

    /// <summary>Creates a queue; only the properties assigned on <paramref name="options"/> are sent, the rest take the farm's defaults.</summary>
    public async Task<QueueProperties> CreateQueueAsync(CreateQueueOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        var request = new CreateQueueRequest
        {
            Name = options.Name,
            Properties = QueueMapper.ToProto(options, onlyAssigned: true),
            ContainerId = options.ContainerId ?? 0,
        };
        var info = await CallAsync(FarmCalls.CreateQueue, request, options.Name, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromInfo(info);
    }

    public async Task<QueueProperties> GetQueueAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        var info = await CallAsync(FarmCalls.GetQueue, new GetQueueRequest { Name = name }, name, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromInfo(info);
    }

    public async Task<QueueRuntimeProperties> GetQueueRuntimePropertiesAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        var info = await CallAsync(FarmCalls.GetQueue, new GetQueueRequest { Name = name }, name, cancellationToken).ConfigureAwait(false);
        return QueueMapper.RuntimeFromInfo(info);
    }

    /// <summary>Updates the properties assigned on <paramref name="queue"/> since it was fetched (or created); returns the result.</summary>
    public async Task<QueueProperties> UpdateQueueAsync(QueueProperties queue, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(queue);
        var request = new UpdateQueueRequest { Name = queue.Name, Properties = QueueMapper.ToProto(queue, onlyAssigned: true) };
        var info = await CallAsync(FarmCalls.UpdateQueue, request, queue.Name, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromInfo(info);
    }

    public async Task DeleteQueueAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        await CallAsync(FarmCalls.DeleteQueue, new DeleteQueueRequest { Name = name }, name, cancellationToken).ConfigureAwait(false);
    }

    public async Task<bool> QueueExistsAsync(string name, CancellationToken cancellationToken = default)
    {
        try
        {
            await GetQueueAsync(name, cancellationToken).ConfigureAwait(false);
            return true;
        }
        catch (FarmException e) when (e.Reason == FarmFailureReason.MessagingEntityNotFound)
        {
            return false;
        }
    }

    public async Task<IReadOnlyList<QueueProperties>> ListQueuesAsync(CancellationToken cancellationToken = default)
    {
        var response = await ListQueueInfosAsync(cancellationToken).ConfigureAwait(false);
        return response.Queues.Select(QueueMapper.FromInfo).ToList();
    }

    /// <summary>Every queue with its message counts, in one call.</summary>
    public async Task<IReadOnlyList<(QueueProperties Properties, QueueRuntimeProperties Runtime)>> ListQueuesWithRuntimePropertiesAsync(CancellationToken cancellationToken = default)
    {
        var response = await ListQueueInfosAsync(cancellationToken).ConfigureAwait(false);
        return response.Queues.Select(q => (QueueMapper.FromInfo(q), QueueMapper.RuntimeFromInfo(q))).ToList();
    }

    /// <summary>Azure-style enumeration of every queue.</summary>
    public async IAsyncEnumerable<QueueProperties> GetQueuesAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        foreach (var queue in await ListQueuesAsync(cancellationToken).ConfigureAwait(false))
        {
            yield return queue;
        }
    }

    public async IAsyncEnumerable<QueueRuntimeProperties> GetQueuesRuntimePropertiesAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        var response = await ListQueueInfosAsync(cancellationToken).ConfigureAwait(false);
        foreach (var queue in response.Queues)
        {
            yield return QueueMapper.RuntimeFromInfo(queue);
        }
    }

    public Task<ContainerProperties> CreateContainerAsync(CancellationToken cancellationToken = default) =>
        CreateContainerAsync(server: null, cancellationToken);

    /// <summary>A new container whose database is on the named database server (null: beside the farm database).</summary>
    public async Task<ContainerProperties> CreateContainerAsync(string? server, CancellationToken cancellationToken = default)
    {
        var info = await CallAsync(FarmCalls.CreateContainer, new CreateContainerRequest { Server = server ?? "" }, null, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromProto(info);
    }

    /// <summary>
    /// Registers a PostgreSQL server containers may be placed on (Npgsql connection string; the login
    /// needs CREATEDB). The farm checks it can log in first.
    /// </summary>
    public async Task<DatabaseServerProperties> AddServerAsync(string name, string connectionString, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        ArgumentException.ThrowIfNullOrWhiteSpace(connectionString);
        var info = await CallAsync(FarmCalls.AddServer, new AddServerRequest { Name = name, ConnectionString = connectionString }, null, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromProto(info);
    }

    public async Task<IReadOnlyList<DatabaseServerProperties>> GetServersAsync(CancellationToken cancellationToken = default)
    {
        var response = await CallAsync(FarmCalls.ListServers, new ListServersRequest(), null, cancellationToken).ConfigureAwait(false);
        return response.Servers.Select(QueueMapper.FromProto).ToList();
    }

    /// <summary>Forgets a server no container is on.</summary>
    public async Task RemoveServerAsync(string name, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(name);
        await CallAsync(FarmCalls.RemoveServer, new RemoveServerRequest { Name = name }, null, cancellationToken).ConfigureAwait(false);
    }

    public async Task<IReadOnlyList<ContainerProperties>> GetContainersAsync(CancellationToken cancellationToken = default)
    {
        var response = await CallAsync(FarmCalls.ListContainers, new ListContainersRequest(), null, cancellationToken).ConfigureAwait(false);
        return response.Containers.Select(QueueMapper.FromProto).ToList();
    }

    /// <summary>
    /// Moves a container to another node, as a planned move: its owner drains it and hands it
    /// over. Operations on its entities pause briefly and are retried by the client.
    /// </summary>
    public async Task<ContainerProperties> MoveContainerAsync(long containerId, long toNode, CancellationToken cancellationToken = default)
    {
        var info = await CallAsync(FarmCalls.MoveContainer, new MoveContainerRequest { ContainerId = containerId, ToNode = toNode }, null, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromProto(info);
    }

    /// <summary>Asks a node to hand its containers to the other nodes one at a time, then stop.</summary>
    public async Task<FarmNodeProperties> DrainNodeAsync(long nodeId, CancellationToken cancellationToken = default)
    {
        var node = await CallAsync(FarmCalls.DrainNode, new DrainNodeRequest { NodeId = nodeId }, null, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromProto(node);
    }

    /// <summary>Nodes, containers and entity count of the farm.</summary>
    public async Task<FarmStatusProperties> GetFarmStatusAsync(CancellationToken cancellationToken = default)
    {
        var status = await CallAsync(FarmCalls.GetStatus, new GetStatusRequest(), null, cancellationToken).ConfigureAwait(false);
        return QueueMapper.FromProto(status);
    }

    public void Dispose() => _connection.Dispose();

    private Task<ListQueuesResponse> ListQueueInfosAsync(CancellationToken cancellationToken)
        => CallAsync(FarmCalls.ListQueues, new ListQueuesRequest(), null, cancellationToken);

    private Task<TResponse> CallAsync<TRequest, TResponse>(FarmCall<TRequest, TResponse> call, TRequest request, string? entityPath, CancellationToken cancellationToken)
        => _connection.UnaryAsync(call, request, entityPath, cancellationToken);
}
