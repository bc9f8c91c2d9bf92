using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using Farm.Contracts;
using Grpc.Core;
using Polly;
using Polly.Retry;

namespace Farm.Client;

/// <summary>
/// Runs an operation through a Polly pipeline that retries transient failures with jittered backoff:
/// Unavailable, a try that hit its deadline, and the farm's SERVICE_BUSY / STORE_UNAVAILABLE /
/// NOT_OWNER / STALE_EPOCH (a container moving or restarting). Everything else fails at once.
/// With <c>retryAtOnceElsewhere</c> (a connection with somewhere else to go: another gateway, or
/// the gateway instead of a dead owner), the first retry after a lost connection goes without
/// waiting: the backoff spares a struggling server, and the retry goes to one that was not tried.
/// </summary>
internal sealed class FarmRetryPolicy
{
    private readonly ResiliencePipeline _pipeline;
    private readonly bool _retryAtOnceElsewhere;

    public FarmRetryPolicy(FarmRetryOptions options, TimeProvider? timeProvider = null, TimeSpan? tryTimeoutOverride = null, bool retryAtOnceElsewhere = false)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        Options = options;
        _retryAtOnceElsewhere = retryAtOnceElsewhere;
        TryTimeout = tryTimeoutOverride ?? options.TryTimeout;

        var builder = new ResiliencePipelineBuilder();
        if (timeProvider is not null)
        {
            builder.TimeProvider = timeProvider;
        }

        if (options.MaxRetries > 0)
        {
            builder.AddRetry(new RetryStrategyOptions
            {
                ShouldHandle = args => ValueTask.FromResult(args.Outcome.Exception is { } e && IsTransient(e)),
                MaxRetryAttempts = options.MaxRetries,
                Delay = options.Delay,
                MaxDelay = options.MaxDelay,
                BackoffType = options.Mode == FarmRetryMode.Fixed ? DelayBackoffType.Constant : DelayBackoffType.Exponential,
                UseJitter = true,
                // null: the backoff above.
                DelayGenerator = args => ValueTask.FromResult<TimeSpan?>(RetriesAtOnce(args.Outcome.Exception, args.AttemptNumber) ? TimeSpan.Zero : null),
                OnRetry = args =>
                {
                    FarmTelemetry.RecordRetry(args.Outcome.Exception);
                    return ValueTask.CompletedTask;
                },
            });
        }

        _pipeline = builder.Build();
    }

    public FarmRetryOptions Options { get; }

    /// <summary>The deadline of one attempt.</summary>
    public TimeSpan TryTimeout { get; }

    /// <summary>Whether retrying the failed attempt may help.</summary>
    public static bool IsTransient(Exception exception) => ReasonOf(exception) is { } reason && FarmException.IsTransientReason(reason);

    /// <summary>Whether the retry numbered <paramref name="attemptNumber"/> (0: the first) after <paramref name="failure"/> goes without a backoff.</summary>
    public bool RetriesAtOnce(Exception? failure, int attemptNumber) => _retryAtOnceElsewhere && attemptNumber == 0 && IsLostConnection(failure);

    /// <summary>The farm could not be reached or the connection broke (plain Unavailable), as opposed to a farm that answered "busy" or "moving".</summary>
    public static bool IsLostConnection(Exception? exception) => ReasonOf(exception) == FarmFailureReason.ServiceCommunicationProblem;

    /// <summary>The failure reason of a Farm or gRPC failure (a broken connection read as Unavailable); null for anything else.</summary>
    private static FarmFailureReason? ReasonOf(Exception? exception) => exception switch
    {
        FarmException farm => farm.Reason,
        RpcException rpc => FarmErrors.ReasonOf(rpc.FarmError(), rpc.AsUnavailableWhenBroken().StatusCode),
        _ => null,
    };

    /// <summary>
    /// Runs <paramref name="operation"/>, retrying as described above. The first try runs outside
    /// the pipeline: nearly every operation succeeds at once, and the pipeline's context and state
    /// machines were a set of allocations per send and settlement (the SDK's largest after the
    /// message itself, in a profile of 15,000 queues). Only a failed first try enters the pipeline,
    /// which replays that failure as its own first attempt, so which failures are retried, the
    /// delays and the retry telemetry are exactly as before.
    /// </summary>
    public ValueTask<TResult> ExecuteAsync<TResult, TState>(Func<TState, CancellationToken, ValueTask<TResult>> operation, TState state, CancellationToken cancellationToken)
    {
        ValueTask<TResult> first;
        try
        {
            first = operation(state, cancellationToken);
        }
        catch (Exception e)
        {
            return RetryAfterAsync(ExceptionDispatchInfo.Capture(e), operation, state, cancellationToken);
        }
        return first.IsCompletedSuccessfully ? first : AwaitFirstAsync(first, operation, state, cancellationToken);
    }

    private async ValueTask<TResult> AwaitFirstAsync<TResult, TState>(
        ValueTask<TResult> first, Func<TState, CancellationToken, ValueTask<TResult>> operation, TState state, CancellationToken cancellationToken)
    {
        ExceptionDispatchInfo failure;
        try
        {
            return await first.ConfigureAwait(false);
        }
        catch (Exception e)
        {
            failure = ExceptionDispatchInfo.Capture(e);
        }
        return await RetryAfterAsync(failure, operation, state, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>The pipeline from a failed first try on: its first attempt rethrows that failure, its retries run the operation.</summary>
    private ValueTask<TResult> RetryAfterAsync<TResult, TState>(
        ExceptionDispatchInfo firstFailure, Func<TState, CancellationToken, ValueTask<TResult>> operation, TState state, CancellationToken cancellationToken)
    {
        if (Options.MaxRetries == 0 || !IsTransient(firstFailure.SourceException))
        {
            firstFailure.Throw();
        }
        var replay = new StrongBox<ExceptionDispatchInfo?>(firstFailure);
        return _pipeline.ExecuteAsync(static (context, token) =>
        {
            if (Interlocked.Exchange(ref context.replay.Value, null) is { } first)
            {
                first.Throw();
            }
            return context.operation(context.state, token);
        }, (operation, state, replay), cancellationToken);
    }
}
