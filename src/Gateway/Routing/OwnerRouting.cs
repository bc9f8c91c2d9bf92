using Farm.Broker;
using Farm.Broker.Entities;
using Farm.Broker.Node;
using Farm.Contracts;
using Farm.Contracts.V1;
using Grpc.Core;
using Polly;
using System.Runtime.CompilerServices;
using Polly.Retry;

namespace Farm.Gateway.Routing;

/// <summary>What a routed call is about: its name (for logs), the entity path, and how it may wait.</summary>
/// <param name="ExtraWait">Added to the forward timeout: a receive's own max wait.</param>
/// <param name="Hold">Whether to hold the call while the entity is between owners (false: fail at once, e.g. one item of a listing).</param>
internal readonly record struct RoutedCall(string Method, string EntityPath, TimeSpan ExtraWait = default, bool Hold = true);

/// <summary>
/// The gateway's one "serve here or forward" policy, for messaging and management alike: a call
/// for an entity this node serves runs here; any other goes to the owning broker, marked direct so
/// it is never forwarded again. While the entity is between owners (a failover or a planned move)
/// the call is held and tried again every <see cref="ForwardingOptions.OwnerPoll"/>, up to
/// <see cref="ForwardingOptions.OwnerWait"/> (a Polly retry on the node's <see cref="TimeProvider"/>).
/// A call marked direct is never forwarded or held: its caller follows NOT_OWNER itself.
/// </summary>
internal sealed partial class OwnerRouting
{
    private static readonly ResiliencePropertyKey<long> HeldSince = new("farm.held-since");

    private readonly IOwnerDirectory _directory;
    private readonly OwnerChannels _channels;
    private readonly ForwardingOptions _options;
    private readonly TimeProvider _time;
    private readonly ILogger<OwnerRouting> _logger;
    private readonly ResiliencePipeline _hold;

    public OwnerRouting(IOwnerDirectory directory, OwnerChannels channels, ForwardingOptions options, TimeProvider time, ILogger<OwnerRouting> logger)
    {
        _directory = directory;
        _channels = channels;
        _options = options;
        _time = time;
        _logger = logger;
        OwnerAnswersAsync = LookupAtOwnerAsync;
        _hold = new ResiliencePipelineBuilder { TimeProvider = time }
            .AddRetry(new RetryStrategyOptions
            {
                ShouldHandle = args => ValueTask.FromResult(
                    args.Outcome.Exception is { } e && CallFailures.IsBetweenOwners(e)
                    && args.Context.Properties.TryGetValue(HeldSince, out var since)
                    && _time.GetElapsedTime(since) < _options.OwnerWait),
                BackoffType = DelayBackoffType.Constant,
                Delay = options.OwnerPoll,
                UseJitter = false,
                MaxRetryAttempts = int.MaxValue,
            })
            .Build();
    }

    /// <summary>This node's own address.</summary>
    public string Address => _directory.Address;

    public static bool IsDirect(ServerCallContext context) => FarmMetadata.IsDirect(context.RequestHeaders);

    /// <summary>
    /// Runs <paramref name="here"/> when this node serves the entity (or the call came direct),
    /// otherwise <paramref name="forward"/> on the owner's clients; holds while between owners.
    /// </summary>
    public Task<TResponse> RouteAsync<TResponse>(
        RoutedCall call, ServerCallContext context,
        Func<CancellationToken, Task<TResponse>> here,
        Func<OwnerClients, CallOptions, AsyncUnaryCall<TResponse>> forward) =>
        RouteAsync(call, IsDirect(context), context.Deadline, here, forward, context.CancellationToken);

    /// <summary>
    /// The same for an operation that is not a call of its own (one send of a send stream):
    /// <paramref name="direct"/> as the stream was, <paramref name="deadline"/> for a forward (MaxValue: none).
    /// </summary>
    public async Task<TResponse> RouteAsync<TResponse>(
        RoutedCall call, bool direct, DateTime deadline,
        Func<CancellationToken, Task<TResponse>> here,
        Func<OwnerClients, CallOptions, AsyncUnaryCall<TResponse>> forward,
        CancellationToken cancellationToken)
    {
        if (direct || !EntityNames.TryParsePath(call.EntityPath, out var name, out _, out _))
        {
            // Direct: the caller routes. A malformed path: here says what is wrong with it.
            return await here(cancellationToken).ConfigureAwait(false);
        }
        // Served here, as most calls are: run it without the hold's retry pipeline around it. Only
        // if it fails as between owners (the container moved a moment ago) does the hold take over,
        // looking the owner up afresh.
        var first = await _directory.LocateAsync(name, cancellationToken).ConfigureAwait(false);
        if (first.ServedHere)
        {
            try
            {
                return await here(cancellationToken).ConfigureAwait(false);
            }
            catch (Exception e) when (call.Hold && CallFailures.IsBetweenOwners(e) && !cancellationToken.IsCancellationRequested)
            {
                // Held below, from a fresh look at who owns it.
            }
        }
        // The first attempt uses that look, unless it found the entity here and failed; every other
        // attempt asks who owns it now, not what the last ownership pass saw.
        EntityLocation? known = first.ServedHere ? null : first;
        return await HoldAsync(call.Hold, async token =>
        {
            var location = known ?? await _directory.LocateAsync(name, token, fresh: true).ConfigureAwait(false);
            known = null;
            if (location.ServedHere)
            {
                return await here(token).ConfigureAwait(false);
            }
            var owner = location.OwnerAddress ?? throw FarmErrors.NotOwner(name, null);
            return await ForwardAsync(owner, call, name, forward, deadline, token).ConfigureAwait(false);
        }, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Whether a send to <paramref name="entityPath"/> runs here at once, needing neither routing nor a deadline of its own.</summary>
    public bool IsLoadedSendTargetHere(string entityPath) => _directory.IsLoadedSendTargetHere(entityPath);

    /// <summary>
    /// Where the entity lives once it has a live owner (itself when served here); waits up to
    /// <see cref="ForwardingOptions.OwnerWait"/> while it is between owners, then NOT_OWNER.
    /// </summary>
    public Task<EntityLocation> WaitForOwnerAsync(string entityName, CancellationToken cancellationToken) =>
        WaitForOwnerAsync(entityName, attempts: new StrongBox<int>(0), cancellationToken);

    private Task<EntityLocation> WaitForOwnerAsync(string entityName, StrongBox<int> attempts, CancellationToken cancellationToken) =>
        HoldAsync(hold: true, async token =>
        {
            var location = await _directory.LocateAsync(entityName, token, fresh: attempts.Value++ > 0).ConfigureAwait(false);
            return location.ServedHere || location.OwnerAddress is not null ? location : throw FarmErrors.NotOwner(entityName, null);
        }, cancellationToken);

    private async Task<T> HoldAsync<T>(bool hold, Func<CancellationToken, Task<T>> attempt, CancellationToken cancellationToken)
    {
        if (!hold)
        {
            return await attempt(cancellationToken).ConfigureAwait(false);
        }
        var context = ResilienceContextPool.Shared.Get(cancellationToken);
        context.Properties.Set(HeldSince, _time.GetTimestamp());
        try
        {
            return await _hold.ExecuteAsync(
                static async (context, attempt) => await attempt(context.CancellationToken).ConfigureAwait(false),
                context, attempt).ConfigureAwait(false);
        }
        finally
        {
            ResilienceContextPool.Shared.Return(context);
        }
    }

    private async Task<TResponse> ForwardAsync<TResponse>(
        string owner, RoutedCall call, string name, Func<OwnerClients, CallOptions, AsyncUnaryCall<TResponse>> forward, DateTime deadline, CancellationToken cancellationToken)
    {
        using var activity = Hosting.NodeTelemetry.Source.StartActivity($"forward {call.Method}", System.Diagnostics.ActivityKind.Client);
        activity?.SetTag("messaging.system", "farm");
        activity?.SetTag("messaging.destination.name", call.EntityPath);
        activity?.SetTag("farm.owner", owner);
        // A deadline of our own: an owner that froze or was cut off may never answer. Past it the
        // call is only given up once the farm agrees the owner is gone (dead, or no longer the
        // owner): a slow owner may still commit it, and a retry would then store a second copy.
        var timeout = _options.ForwardTimeout + (call.ExtraWait > TimeSpan.Zero ? call.ExtraWait : TimeSpan.Zero);
        using var giveUp = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        // The caller's deadline goes along (MaxValue: none), so the owner stops working for a caller that gave up.
        using var pending = forward(_channels.Get(owner), new CallOptions(FarmMetadata.DirectHeaders(), deadline, giveUp.Token));
        var response = pending.ResponseAsync;
        try
        {
            RpcException? broken = null;
            try
            {
                return await response.WaitAsync(timeout, _time, cancellationToken).ConfigureAwait(false);
            }
            catch (TimeoutException)
            {
                // Late: keep waiting while the owner is alive and still the owner, as far as the farm knows.
            }
            catch (RpcException e) when (IsBroken(e))
            {
                // The connection broke with the call sent (a keep-alive ping a frozen owner never
                // answered): whether it committed is as unknown as for a late answer, so the same wait.
                broken = e;
            }
            while (await IsStillOwnerAsync(owner, name, cancellationToken).ConfigureAwait(false))
            {
                var poll = Task.Delay(_options.OwnerPoll, _time, cancellationToken);
                if (broken is not null)
                {
                    await poll.ConfigureAwait(false);
                    // The answer went with the connection, so waiting only helps while the owner is
                    // frozen or cut off. An owner that answers again (a connection that broke on a
                    // ping sent while the network was out, a proxy that dropped it) gets the call
                    // again: it may store a second copy, as a client's own retry would, but the
                    // caller is not kept waiting for an answer that can never come.
                    if (await OwnerAnswersAsync(owner, name, cancellationToken).ConfigureAwait(false))
                    {
                        LogForwardRetried(_logger, call.Method, call.EntityPath, owner, broken.Status.Detail);
                        throw new RpcException(new Status(StatusCode.Unavailable,
                            $"The connection to the broker at {owner} broke during {call.Method} for '{call.EntityPath}' ({broken.Status.Detail}); it answers again, so the call is tried again."));
                    }
                }
                else if (await Task.WhenAny(response, poll).ConfigureAwait(false) == response)
                {
                    try
                    {
                        return await response.ConfigureAwait(false);
                    }
                    catch (RpcException e) when (IsBroken(e))
                    {
                        broken = e; // broke while late: from now on, the same as a break before the timeout
                    }
                }
            }
            if (broken is not null)
            {
                LogForwardBroken(_logger, call.Method, call.EntityPath, owner, broken.Status.Detail);
                throw new RpcException(new Status(StatusCode.Unavailable,
                    $"The connection to the broker at {owner} broke during {call.Method} for '{call.EntityPath}' ({broken.Status.Detail}), and it is no longer its live owner."));
            }
            await giveUp.CancelAsync().ConfigureAwait(false);
            try
            {
                return await response.ConfigureAwait(false);
            }
            catch (RpcException e) when ((e.StatusCode == StatusCode.Cancelled || IsBroken(e)) && !cancellationToken.IsCancellationRequested)
            {
                // Unreachable as far as this call is concerned: Unavailable, so the hold waits for the next
                // owner. The connection may also have broken (a frozen owner's unanswered ping) between the
                // late answer's timeout and the check that the owner is gone: the same, not an error.
                LogForwardGivenUp(_logger, call.Method, call.EntityPath, owner, timeout.TotalSeconds);
                throw new RpcException(new Status(StatusCode.Unavailable,
                    $"The broker at {owner} did not answer {call.Method} for '{call.EntityPath}' within {timeout.TotalSeconds:0.#} s and is no longer its live owner."));
            }
        }
        catch (RpcException e) when (e.IsConnectTimeout() && !cancellationToken.IsCancellationRequested)
        {
            // No connection within the connect timeout (an owner killed in a container leaves its
            // address leading nowhere): the call never left, as with a refused connection, so it is
            // Unavailable and held for the next owner, not the Cancelled the handler reports.
            throw new RpcException(new Status(StatusCode.Unavailable, $"The broker at {owner} could not be reached for {call.Method} on '{call.EntityPath}': {e.TransportFailure()}"));
        }
        catch (RpcException e) when (CallFailures.CodeOf(e) == FarmErrorCode.MessagingEntityNotFound)
        {
            // Deleted (or re-created elsewhere) since this node cached where it lives.
            _directory.Forget(name);
            throw;
        }
    }

    private static bool IsBroken(RpcException e) => e.StatusCode == StatusCode.Internal && e.IsBrokenConnection();

    /// <summary>
    /// Whether the owner answers a cheap call (a direct Lookup of the entity, from its memory)
    /// within <see cref="OwnerProbeTimeout"/>, over a fresh connection if the last one broke. Any
    /// answer counts, an error too: the owner is running and reachable. Replaceable for tests.
    /// </summary>
    internal Func<string, string, CancellationToken, Task<bool>> OwnerAnswersAsync { get; set; }

    /// <summary>How long a probe of an owner whose connection broke waits for its answer.</summary>
    internal static readonly TimeSpan OwnerProbeTimeout = TimeSpan.FromSeconds(1);

    private async Task<bool> LookupAtOwnerAsync(string owner, string name, CancellationToken cancellationToken)
    {
        try
        {
            using var probe = _channels.Get(owner).Messaging.LookupAsync(new LookupRequest { Entity = name },
                new CallOptions(FarmMetadata.DirectHeaders(), DateTime.UtcNow + OwnerProbeTimeout, cancellationToken));
            await probe.ResponseAsync.ConfigureAwait(false);
            return true;
        }
        catch (RpcException e) when (!cancellationToken.IsCancellationRequested)
        {
            // An error the owner raised is an answer; no answer (unreachable, deadline, broken) is not.
            var noAnswer = CallFailures.IsUnreachable(e) || IsBroken(e)
                || (e.StatusCode is StatusCode.DeadlineExceeded or StatusCode.Cancelled && e.FarmError() is null);
            return !noAnswer;
        }
    }

    /// <summary>True while the farm database names <paramref name="owner"/> as the live owner of the entity's container.</summary>
    private async Task<bool> IsStillOwnerAsync(string owner, string name, CancellationToken cancellationToken)
    {
        var location = await _directory.LocateAsync(name, cancellationToken, fresh: true).ConfigureAwait(false);
        return string.Equals(location.OwnerAddress, owner, StringComparison.OrdinalIgnoreCase) && !location.ServedHere;
    }

    [LoggerMessage(Level = LogLevel.Warning, Message = "Forwarded {Method} for {Entity} to {Owner}: no answer within {Seconds} s and the owner is gone; holding it for the next owner")]
    private static partial void LogForwardGivenUp(ILogger logger, string method, string entity, string owner, double seconds);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Forwarded {Method} for {Entity} to {Owner}: the connection broke ({Detail}) and the owner answers again; trying the call again")]
    private static partial void LogForwardRetried(ILogger logger, string method, string entity, string owner, string detail);

    [LoggerMessage(Level = LogLevel.Warning, Message = "Forwarded {Method} for {Entity} to {Owner}: the connection broke ({Detail}) and the owner is gone; holding it for the next owner")]
    private static partial void LogForwardBroken(ILogger logger, string method, string entity, string owner, string detail);
}
