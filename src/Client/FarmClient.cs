using System.Collections.Concurrent;

namespace Farm.Client;

/// <summary>
/// The entry point, like Azure's ServiceBusClient: one connection to the farm (its endpoints and
/// retry policy), shared by the senders, receivers and processors it creates. Thread-safe.
/// Disposing it closes everything it created.
/// </summary>
public sealed class FarmClient : IAsyncDisposable
{
    private readonly FarmConnection _connection;
    private readonly ConcurrentDictionary<IAsyncDisposable, byte> _children = new();
    private int _closed;

    public FarmClient(string connectionString, FarmClientOptions? options = null)
        : this(FarmConnectionString.Parse(connectionString), options)
    {
    }

    public FarmClient(FarmConnectionString connectionString, FarmClientOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(connectionString);
        options ??= new FarmClientOptions();
        _connection = new FarmConnection(connectionString, options);
        Identifier = options.Identifier ?? $"farm-client-{Guid.NewGuid():N}";
    }

    public FarmConnectionString ConnectionString => _connection.ConnectionString;

    /// <summary>The first endpoint, like Azure's FullyQualifiedNamespace.</summary>
    public string FullyQualifiedNamespace => _connection.ConnectionString.Endpoints[0].Authority;

    public string Identifier { get; }

    public bool IsClosed => Volatile.Read(ref _closed) != 0;

    /// <summary>A sender to a queue or a topic.</summary>
    public FarmSender CreateSender(string entityPath)
    {
        ThrowIfClosed();
        return Track(new FarmSender(_connection, ValidatePath(entityPath), Untrack));
    }

    /// <summary>A receiver on a queue, or on any entity path ("topic/Subscriptions/sub", "queue/$DeadLetterQueue").</summary>
    public FarmReceiver CreateReceiver(string entityPath, FarmReceiverOptions? options = null)
    {
        ThrowIfClosed();
        return Track(new FarmReceiver(_connection, ValidatePath(entityPath), options ?? new FarmReceiverOptions(), Untrack));
    }

    /// <summary>A receiver on a topic's subscription ("topic/Subscriptions/sub"; its dead-letter queue with <see cref="SubQueue.DeadLetter"/>).</summary>
    public FarmReceiver CreateReceiver(string topicName, string subscriptionName, FarmReceiverOptions? options = null)
        => CreateReceiver(FarmEntityPath.FormatSubscriptionPath(topicName, subscriptionName), options);

    /// <summary>A processor on a queue, or on any entity path ("topic/Subscriptions/sub", "queue/$DeadLetterQueue").</summary>
    public FarmProcessor CreateProcessor(string entityPath, FarmProcessorOptions? options = null)
    {
        ThrowIfClosed();
        return Track(new FarmProcessor(_connection, ValidatePath(entityPath), options ?? new FarmProcessorOptions(), Untrack));
    }

    /// <summary>A processor on a topic's subscription ("topic/Subscriptions/sub"; its dead-letter queue with <see cref="SubQueue.DeadLetter"/>).</summary>
    public FarmProcessor CreateProcessor(string topicName, string subscriptionName, FarmProcessorOptions? options = null)
        => CreateProcessor(FarmEntityPath.FormatSubscriptionPath(topicName, subscriptionName), options);

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _closed, 1) != 0)
        {
            return;
        }

        foreach (var child in _children.Keys)
        {
            await child.DisposeAsync().ConfigureAwait(false);
        }

        _connection.Dispose();
    }

    internal static string ValidatePath(string entityPath)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(entityPath);
        return entityPath.Trim().Trim('/');
    }

    private T Track<T>(T child)
        where T : IAsyncDisposable
    {
        _children.TryAdd(child, 0);
        return child;
    }

    private void Untrack(IAsyncDisposable child) => _children.TryRemove(child, out _);

    private void ThrowIfClosed() => ObjectDisposedException.ThrowIf(IsClosed, this);
}
