namespace Farm.Perf;

/// <summary>
/// A single-node farm on a fresh temporary data directory, started as the real node process
/// (<c>dotnet Farm.Gateway.dll --node-id 1 --data DIR --port 0</c>, as `farm up` does) so the
/// measured broker runs in its own process, not in the load generator's. Disposing it kills the
/// node and deletes the directory.
/// </summary>
internal sealed class LocalNode : IAsyncDisposable
{
    private readonly LocalFarm _farm;

    private LocalNode(LocalFarm farm) => _farm = farm;

    public string Address => _farm.Node(1).Address;

    public string ConnectionString => _farm.ConnectionString(redirect: false);

    public int ProcessId => _farm.Node(1).ProcessId;

    public static async Task<LocalNode> StartAsync(CancellationToken cancellationToken)
        => new(await LocalFarm.StartAsync(1, cancellationToken).ConfigureAwait(false));

    public ValueTask DisposeAsync() => _farm.DisposeAsync();
}
