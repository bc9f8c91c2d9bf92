using BenchmarkDotNet.Attributes;
using Farm.Client;
using Polly;
using Polly.Retry;

namespace Farm.Benchmarks;

/// <summary>
/// The SDK runs every send and settlement through its retry policy. Nearly all succeed on the first
/// try: what does that try cost? A Polly pipeline with the SDK's retry strategy run for every call
/// (the SDK before session 24) against <see cref="FarmRetryPolicy"/>, which runs the first try
/// outside the pipeline. The operation completes asynchronously, as a call to the farm does.
/// </summary>
[MemoryDiagnoser]
public class RetryPolicyBenchmarks
{
    private static readonly Func<int, CancellationToken, ValueTask<int>> Operation = static async (value, _) =>
    {
        await Task.Yield();
        return value;
    };

    private readonly FarmRetryPolicy _policy = new(new FarmRetryOptions());

    private readonly ResiliencePipeline _pipeline = new ResiliencePipelineBuilder()
        .AddRetry(new RetryStrategyOptions
        {
            ShouldHandle = args => ValueTask.FromResult(args.Outcome.Exception is { } e && FarmRetryPolicy.IsTransient(e)),
            MaxRetryAttempts = 3,
            Delay = TimeSpan.FromSeconds(0.8),
            BackoffType = DelayBackoffType.Exponential,
            UseJitter = true,
        })
        .Build();

    [Benchmark(Baseline = true)]
    public ValueTask<int> EveryTryThroughThePipeline() =>
        _pipeline.ExecuteAsync(static (context, token) => context.Operation(context.Value, token), (Operation, Value: 1), CancellationToken.None);

    [Benchmark]
    public ValueTask<int> FirstTryOutsideThePipeline() => _policy.ExecuteAsync(Operation, 1, CancellationToken.None);
}
