using Farm.Contracts;
using Grpc.Core;
using Polly;
using Polly.Retry;

namespace Farm.Client;

/// <summary>
/// Runs an operation through a Polly pipeline that retries transient failures with jittered backoff:
/// Unavailable, a try that hit its deadline, and the farm's SERVICE_BUSY / STORE_UNAVAILABLE /
/// NOT_OWNER / STALE_EPOCH (a container moving or restarting). Everything else fails at once.
/// </summary>
internal sealed class FarmRetryPolicy
{
    private readonly ResiliencePipeline _pipeline;

    public FarmRetryPolicy(FarmRetryOptions options, TimeProvider? timeProvider = null, TimeSpan? tryTimeoutOverride = null)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        Options = options;
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
    public static bool IsTransient(Exception exception) => exception switch
    {
        FarmException farm => farm.IsTransient,
        RpcException rpc => FarmException.IsTransientReason(FarmErrors.ReasonOf(rpc.FarmError(), rpc.AsUnavailableWhenBroken().StatusCode)),
        _ => false,
    };

    public ValueTask<TResult> ExecuteAsync<TResult, TState>(Func<TState, CancellationToken, ValueTask<TResult>> operation, TState state, CancellationToken cancellationToken)
        => _pipeline.ExecuteAsync(static (context, token) => context.operation(context.state, token), (operation, state), cancellationToken);
}
