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

    public ValueTask<TResult> ExecuteAsync<TResult, TState>(Func<TState, CancellationToken, ValueTask<TResult>> operation, TState state, CancellationToken cancellationToken)
        => _pipeline.ExecuteAsync(static (context, token) => context.operation(context.state, token), (operation, state), cancellationToken);
}
