using System.Runtime.CompilerServices;
using Farm.Contracts;
using Grpc.Core;

namespace Farm.Client;

/// <summary>
/// The channels to the farm's endpoints and the retry policy, shared by everything a
/// <see cref="FarmClient"/> creates. Calls go to the current endpoint; when it answers Unavailable
/// the connection moves on to the next one, so the retry lands elsewhere (failover).
/// </summary>
internal sealed partial class FarmConnection : IDisposable
{
    private readonly FarmStubs?[] _channels;
    private readonly Lock _gate = new();
    private int _current;
    private bool _disposed;

    public FarmConnection(FarmConnectionString connectionString, FarmClientOptions options)
    {
        ConnectionString = connectionString;
        Options = options;
        // A lost connection moves calls to the next gateway, or in redirect mode from the owner to a gateway.
        var somewhereElse = connectionString.Endpoints.Count > 1 || connectionString.EnableRedirect;
        Retry = new FarmRetryPolicy(options.RetryOptions, options.TimeProvider, connectionString.OperationTimeout, retryAtOnceElsewhere: somewhereElse);
        _channels = new FarmStubs?[connectionString.Endpoints.Count];
    }

    public FarmConnectionString ConnectionString { get; }

    public FarmClientOptions Options { get; }

    public FarmRetryPolicy Retry { get; }

    /// <summary>
    /// Names this connection's sends, with <see cref="NextSendId"/> numbering them: every try of a
    /// send carries the same pair, so a broker that stored the send before its answer was lost
    /// answers the repeat instead of storing the messages twice.
    /// </summary>
    public string ProducerId { get; } = Guid.NewGuid().ToString("N");

    private long _lastSendId;

    public long NextSendId() => Interlocked.Increment(ref _lastSendId);

    public TimeProvider TimeProvider => Options.TimeProvider;

    public bool IsDisposed => Volatile.Read(ref _disposed);

    /// <summary>The endpoint calls go to now (index into <see cref="FarmConnectionString.Endpoints"/>).</summary>
    public int CurrentEndpointIndex
    {
        get
        {
            lock (_gate)
            {
                return _current;
            }
        }
    }

    /// <summary>The channel to the current endpoint, created on first use.</summary>
    public FarmStubs GetChannel(out int endpointIndex)
    {
        lock (_gate)
        {
            ObjectDisposedException.ThrowIf(_disposed, this);
            endpointIndex = _current;
            return _channels[endpointIndex] ??= new FarmStubs(FarmChannels.Create(ConnectionString.Endpoints[endpointIndex]), Options);
        }
    }

    /// <summary>The endpoint at <paramref name="endpointIndex"/> did not answer: move on to the next one.</summary>
    public void ReportUnavailable(int endpointIndex)
    {
        lock (_gate)
        {
            // Only the first caller to see the failure advances; others already use the next endpoint.
            if (_current == endpointIndex)
            {
                _current = (endpointIndex + 1) % _channels.Length;
            }
        }
    }

    /// <summary>One unary call with retries and failover; failures surface as <see cref="FarmException"/>.</summary>
    public async Task<TResponse> UnaryAsync<TRequest, TResponse>(FarmCall<TRequest, TResponse> call, TRequest request, string? entityPath, CancellationToken cancellationToken)
    {
        return await Retry.ExecuteAsync(
            static async (state, token) =>
            {
                var (connection, call, tries, entityPath) = state;
                var request = tries.Value!;
                var deadline = connection.TimeProvider.GetUtcNow().UtcDateTime + connection.Retry.TryTimeout;
                Route route = default;
                try
                {
                    route = await connection.RouteAsync(call.IsEntityMessaging, entityPath, token).ConfigureAwait(false);
                    using var pending = call.Invoke(route.Channel, request, new CallOptions(route.Headers, deadline, token));
                    return await pending.ResponseAsync.ConfigureAwait(false);
                }
                catch (RpcException e) when (e.StatusCode == StatusCode.Cancelled && token.IsCancellationRequested)
                {
                    throw new OperationCanceledException(token);
                }
                catch (RpcException caught)
                {
                    tries.Value = call.Repeat(request);
                    // A keep-alive ping a frozen node never answered comes as Internal: it is Unavailable.
                    var e = caught.AsUnavailableWhenBroken();
                    if (route.Channel is not null)
                    {
                        connection.ReportFailure(route, e);
                    }

                    throw FarmErrors.FromRpc(e, entityPath);
                }
                catch (OperationCanceledException e) when (!token.IsCancellationRequested)
                {
                    tries.Value = call.Repeat(request);
                    // Not our cancellation: the connection under the call broke.
                    if (route.Channel is not null)
                    {
                        connection.ReportFailure(route, new RpcException(new Status(StatusCode.Unavailable, e.Message)));
                    }
                    throw new FarmException($"{call.Name} was cut off: {e.Message} (ServiceCommunicationProblem)", FarmFailureReason.ServiceCommunicationProblem, entityPath, e);
                }
            },
            // The request of the next try: a failed try's repeat (FarmCall.AsRepeat) replaces it.
            (this, call, new StrongBox<TRequest>(request), entityPath),
            cancellationToken).ConfigureAwait(false);
    }

    public void Dispose()
    {
        FarmStubs?[] channels;
        lock (_gate)
        {
            if (_disposed)
            {
                return;
            }

            _disposed = true;
            channels = [.. _channels];
        }

        foreach (var channel in channels)
        {
            channel?.Dispose();
        }

        DisposeBrokerChannels();
    }
}
