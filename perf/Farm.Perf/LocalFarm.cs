namespace Farm.Perf;

/// <summary>
/// A farm of <c>N</c> node processes sharing one temporary data directory (the SQLite farm
/// database and the container databases, or a PostgreSQL farm database given), each on its own port. Node 1 starts first (it creates
/// the farm database), then the others together. A node can be SIGKILLed and started again with
/// the same id, port and data directory. Disposing the farm kills every node and deletes the
/// directory.
/// </summary>
internal sealed class LocalFarm : IAsyncDisposable
{
    private readonly string _dataDirectory;
    private readonly Dictionary<long, string> _addresses = [];
    private readonly Dictionary<long, NodeProcess> _nodes = [];
    private readonly Lock _gate = new();

    /// <summary>More arguments for every node (a PostgreSQL farm's --store and --farm-connection).</summary>
    private readonly IReadOnlyList<string> _nodeArguments;

    private LocalFarm(string dataDirectory, IReadOnlyList<string> nodeArguments)
    {
        _dataDirectory = dataDirectory;
        _nodeArguments = nodeArguments;
    }

    public string DataDirectory => _dataDirectory;

    /// <summary>Node ids, 1..N.</summary>
    public IReadOnlyList<long> NodeIds
    {
        get
        {
            lock (_gate)
            {
                return [.. _addresses.Keys.Order()];
            }
        }
    }

    /// <param name="farmConnection">A PostgreSQL farm database (existing, empty) to run the farm on; null: SQLite in the data directory.</param>
    public static async Task<LocalFarm> StartAsync(int nodes, CancellationToken cancellationToken, string? farmConnection = null)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(nodes, 1);
        string[] nodeArguments = farmConnection is null ? [] : ["--store", "postgres", "--farm-connection", farmConnection];
        var farm = new LocalFarm(Directory.CreateTempSubdirectory("farm-perf-").FullName, nodeArguments);
        try
        {
            await farm.StartNodeAsync(1, port: 0, cancellationToken).ConfigureAwait(false);
            await Task.WhenAll(Enumerable.Range(2, nodes - 1).Select(id => farm.StartNodeAsync(id, port: 0, cancellationToken))).ConfigureAwait(false);
            return farm;
        }
        catch
        {
            await farm.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>The running process of a node; throws when it is not running.</summary>
    public NodeProcess Node(long nodeId)
    {
        lock (_gate)
        {
            return _nodes.TryGetValue(nodeId, out var node) ? node : throw new InvalidOperationException($"node {nodeId} is not running");
        }
    }

    /// <summary>The gateway address of a node (http://127.0.0.1:port), running or not: it keeps its port across restarts.</summary>
    public string AddressOf(long nodeId)
    {
        lock (_gate)
        {
            return _addresses[nodeId];
        }
    }

    /// <summary>Every node's gateway, in node order: the client fails over between them.</summary>
    public string ConnectionString(bool redirect, IEnumerable<long>? only = null)
    {
        var ids = only?.ToList() ?? [.. NodeIds];
        var endpoints = string.Join(',', ids.Select(AddressOf));
        return $"Endpoint={endpoints}" + (redirect ? ";EnableRedirect=true" : string.Empty);
    }

    /// <summary>SIGKILLs a node; returns once its process is gone.</summary>
    public void Kill(long nodeId)
    {
        NodeProcess node;
        lock (_gate)
        {
            if (!_nodes.Remove(nodeId, out node!))
            {
                throw new InvalidOperationException($"node {nodeId} is not running");
            }
        }

        node.Dispose();
    }

    /// <summary>Starts a node that was killed again, with the same id, port and data directory.</summary>
    public Task RestartAsync(long nodeId, CancellationToken cancellationToken)
    {
        int port;
        lock (_gate)
        {
            if (_nodes.ContainsKey(nodeId))
            {
                throw new InvalidOperationException($"node {nodeId} is running");
            }

            port = new Uri(_addresses[nodeId]).Port;
        }

        return StartNodeAsync(nodeId, port, cancellationToken);
    }

    public async ValueTask DisposeAsync()
    {
        List<NodeProcess> nodes;
        lock (_gate)
        {
            nodes = [.. _nodes.Values];
            _nodes.Clear();
        }

        foreach (var node in nodes)
        {
            node.Dispose();
        }

        // SQLite files may still be closing for a moment after the kill.
        for (var attempt = 0; attempt < 5; attempt++)
        {
            try
            {
                Directory.Delete(_dataDirectory, recursive: true);
                return;
            }
            catch (DirectoryNotFoundException)
            {
                return;
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                await Task.Delay(200, CancellationToken.None).ConfigureAwait(false);
            }
        }
    }

    private async Task StartNodeAsync(long nodeId, int port, CancellationToken cancellationToken)
    {
        var node = await NodeProcess.StartAsync(nodeId, _dataDirectory, port, cancellationToken, _nodeArguments).ConfigureAwait(false);
        lock (_gate)
        {
            _nodes[nodeId] = node;
            _addresses[nodeId] = node.Address.TrimEnd('/');
        }
    }
}
