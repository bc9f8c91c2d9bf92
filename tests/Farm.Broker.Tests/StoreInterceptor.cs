using System.Reflection;
using System.Runtime.ExceptionServices;
using Farm.ContainerStore;
using Farm.ContainerStore.Containers;
using Farm.ContainerStore.FarmDatabase;

namespace Farm.Broker.Tests;

/// <summary>
/// Wraps a real store interface and lets a test step into chosen calls: hold one until the test
/// lets it go, fail it, or count it. Everything else goes straight to the real SQLite store.
/// </summary>
public class StoreInterceptor<T> : DispatchProxy where T : class
{
    private T _inner = null!;
    private Func<string, object?[], Func<object?>, object?> _hook = null!;

    /// <param name="hook">Gets the method name, its arguments and "proceed" (calls the real store); returns the result.</param>
    public static T Wrap(T inner, Func<string, object?[], Func<object?>, object?> hook)
    {
        var proxy = Create<T, StoreInterceptor<T>>();
        var interceptor = (StoreInterceptor<T>)(object)proxy;
        interceptor._inner = inner;
        interceptor._hook = hook;
        return proxy;
    }

    protected override object? Invoke(MethodInfo? targetMethod, object?[]? args)
    {
        args ??= [];
        return _hook(targetMethod!.Name, args, Proceed);

        object? Proceed()
        {
            try
            {
                return targetMethod.Invoke(_inner, args);
            }
            catch (TargetInvocationException e)
            {
                ExceptionDispatchInfo.Throw(e.InnerException!);
                throw;
            }
        }
    }
}

/// <summary>A real provider whose farm store and container databases pass through test hooks, and which records what it is asked to prepare.</summary>
internal sealed class InterceptedStoreProvider(
    IStoreProvider inner,
    Func<string, object?[], Func<object?>, object?>? farmHook = null,
    Func<string, object?[], Func<object?>, object?>? containerHook = null) : IStoreProvider
{
    private int _openContainers;

    public string Name => inner.Name;

    /// <summary>Container databases opened through this provider and not disposed yet.</summary>
    public int OpenContainers => Volatile.Read(ref _openContainers);

    public async Task<IFarmStore> OpenFarmStoreAsync(string connectionString, CancellationToken cancellationToken = default)
    {
        var farm = await inner.OpenFarmStoreAsync(connectionString, cancellationToken);
        return farmHook is null ? farm : StoreInterceptor<IFarmStore>.Wrap(farm, farmHook);
    }

    public async Task<IContainerDatabase> OpenContainerAsync(string connectionString, CancellationToken cancellationToken = default)
    {
        var database = await inner.OpenContainerAsync(connectionString, cancellationToken);
        Interlocked.Increment(ref _openContainers);
        return StoreInterceptor<IContainerDatabase>.Wrap(database, (name, args, proceed) =>
        {
            if (name == nameof(IAsyncDisposable.DisposeAsync))
            {
                Interlocked.Decrement(ref _openContainers);
            }
            return containerHook is null ? proceed() : containerHook(name, args, proceed);
        });
    }

    public string NewContainerConnectionString(string farmConnectionString, long containerId) =>
        inner.NewContainerConnectionString(farmConnectionString, containerId);

    public string NewContainerConnectionString(string farmConnectionString, long containerId, string serverConnectionString) =>
        inner.NewContainerConnectionString(farmConnectionString, containerId, serverConnectionString);

    public Task CheckServerAsync(string serverConnectionString, CancellationToken cancellationToken = default) =>
        inner.CheckServerAsync(serverConnectionString, cancellationToken);

    /// <summary>The containers the node asked this store to prepare for a take, in order (the inner store prepares them too).</summary>
    public System.Collections.Concurrent.ConcurrentQueue<string> Prepared { get; } = new();

    public void PrepareContainer(string connectionString)
    {
        Prepared.Enqueue(connectionString);
        inner.PrepareContainer(connectionString);
    }
}
