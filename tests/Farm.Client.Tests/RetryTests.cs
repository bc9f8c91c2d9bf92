using Grpc.Core;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Client.Tests;

public class RetryTests
{
    private static readonly FarmRetryOptions NoDelay = new() { MaxRetries = 3, Delay = TimeSpan.Zero, MaxDelay = TimeSpan.Zero };

    [Theory]
    [InlineData(StatusCode.Unavailable, null, true)]
    [InlineData(StatusCode.DeadlineExceeded, null, true)]
    [InlineData(StatusCode.Unavailable, "SERVICE_BUSY", true)]
    // An overloaded node shedding sends: gRPC's "slow down" with the farm's SERVICE_BUSY.
    [InlineData(StatusCode.ResourceExhausted, "SERVICE_BUSY", true)]
    [InlineData(StatusCode.ResourceExhausted, "QUOTA_EXCEEDED", false)]
    [InlineData(StatusCode.Unavailable, "STORE_UNAVAILABLE", true)]
    [InlineData(StatusCode.FailedPrecondition, "NOT_OWNER", true)]
    [InlineData(StatusCode.Aborted, "STALE_EPOCH", true)]
    [InlineData(StatusCode.NotFound, "MESSAGING_ENTITY_NOT_FOUND", false)]
    [InlineData(StatusCode.FailedPrecondition, "MESSAGE_LOCK_LOST", false)]
    [InlineData(StatusCode.InvalidArgument, "INVALID_ARGUMENT", false)]
    [InlineData(StatusCode.Internal, null, false)]
    [InlineData(StatusCode.Cancelled, null, false)]
    public void Classification(StatusCode status, string? farmError, bool transient)
    {
        var rpc = new RpcException(new Status(status, "x"), farmError is null ? [] : new Metadata { { "farm-error", farmError } });

        Assert.Equal(transient, FarmRetryPolicy.IsTransient(rpc));
        Assert.Equal(transient, FarmRetryPolicy.IsTransient(FarmErrors.FromRpc(rpc, "q")));
    }

    /// <summary>Grpc.Net.Client reports a keep-alive ping a frozen node never answered as Internal: a broken connection, retried.</summary>
    [Fact]
    public void AnUnansweredKeepAlivePing_IsABrokenConnection_AndRetried()
    {
        var cause = new HttpRequestException(HttpRequestError.HttpProtocolError, "The HTTP/2 server didn't respond to a ping request",
            new HttpProtocolException(1, "The HTTP/2 server didn't respond to a ping request", null));
        var rpc = new RpcException(new Status(StatusCode.Internal, "Error starting gRPC call. " + cause.Message, cause));

        Assert.True(FarmRetryPolicy.IsTransient(rpc));
        var error = FarmErrors.FromRpc(rpc, "q");
        Assert.Equal(FarmFailureReason.ServiceCommunicationProblem, error.Reason);
        Assert.True(FarmRetryPolicy.IsTransient(error));
    }

    [Fact]
    public void OtherExceptions_AreNotRetried()
    {
        Assert.False(FarmRetryPolicy.IsTransient(new InvalidOperationException()));
        Assert.False(FarmRetryPolicy.IsTransient(new OperationCanceledException()));
    }

    [Fact]
    public async Task TransientFailures_AreRetriedUntilSuccess()
    {
        var policy = new FarmRetryPolicy(NoDelay);
        var calls = 0;

        var result = await policy.ExecuteAsync(
            (_, _) =>
            {
                calls++;
                return calls < 3
                    ? throw new FarmException("busy", FarmFailureReason.ServiceBusy)
                    : ValueTask.FromResult(42);
            },
            0,
            CancellationToken.None);

        Assert.Equal(42, result);
        Assert.Equal(3, calls);
    }

    [Fact]
    public async Task PermanentFailure_IsNotRetried()
    {
        var policy = new FarmRetryPolicy(NoDelay);
        var calls = 0;

        await Assert.ThrowsAsync<FarmException>(async () => await policy.ExecuteAsync<int, int>(
            (_, _) =>
            {
                calls++;
                throw new FarmException("gone", FarmFailureReason.MessagingEntityNotFound);
            },
            0,
            CancellationToken.None));

        Assert.Equal(1, calls);
    }

    [Fact]
    public async Task TransientFailure_GivesUpAfterMaxRetries()
    {
        var policy = new FarmRetryPolicy(NoDelay with { MaxRetries = 2 });
        var calls = 0;

        var error = await Assert.ThrowsAsync<FarmException>(async () => await policy.ExecuteAsync<int, int>(
            (_, _) =>
            {
                calls++;
                throw new FarmException("down", FarmFailureReason.ServiceCommunicationProblem);
            },
            0,
            CancellationToken.None));

        Assert.Equal(3, calls);
        Assert.True(error.IsTransient);
    }

    [Fact]
    public async Task ZeroRetries_TriesOnce()
    {
        var policy = new FarmRetryPolicy(NoDelay with { MaxRetries = 0 });
        var calls = 0;

        await Assert.ThrowsAsync<FarmException>(async () => await policy.ExecuteAsync<int, int>(
            (_, _) =>
            {
                calls++;
                throw new FarmException("down", FarmFailureReason.ServiceCommunicationProblem);
            },
            0,
            CancellationToken.None));

        Assert.Equal(1, calls);
    }

    private static readonly FarmRetryOptions TenSecondBackoff = new() { MaxRetries = 3, Delay = TimeSpan.FromSeconds(10), MaxDelay = TimeSpan.FromSeconds(60) };

    /// <summary>
    /// Runs the policy over an operation that fails with <paramref name="failure"/> the first
    /// <paramref name="failures"/> times; returns the task and the calls made so far.
    /// </summary>
    private static (Task<int> Result, Func<int> Calls) FailThenSucceed(FarmRetryPolicy policy, int failures, Func<Exception> failure)
    {
        var calls = 0;
        var result = policy.ExecuteAsync<int, int>(
            (_, _) => ++calls <= failures ? throw failure() : ValueTask.FromResult(calls),
            0,
            CancellationToken.None).AsTask();
        return (result, () => Volatile.Read(ref calls));
    }

    [Fact]
    public async Task ALostConnection_IsTriedAgainAtOnce_WhenThereIsSomewhereElseToGo_ThenBacksOff()
    {
        var time = new FakeTimeProvider();
        var policy = new FarmRetryPolicy(TenSecondBackoff, time, retryAtOnceElsewhere: true);

        // One lost connection: the retry runs without the clock moving.
        var (once, _) = FailThenSucceed(policy, 1, () => new RpcException(new Status(StatusCode.Unavailable, "connection refused")));
        Assert.True(once.IsCompleted);
        Assert.Equal(2, await once);

        // Two in a row: the second retry waits for the backoff.
        var (twice, calls) = FailThenSucceed(policy, 2, () => new FarmException("cut off", FarmFailureReason.ServiceCommunicationProblem));
        Assert.Equal(2, calls());
        Assert.False(twice.IsCompleted);
        time.Advance(TimeSpan.FromSeconds(60));
        Assert.Equal(3, await twice.WaitAsync(TimeSpan.FromSeconds(10)));
    }

    [Theory]
    [InlineData(true, "SERVICE_BUSY")]
    [InlineData(true, "STORE_UNAVAILABLE")]
    [InlineData(false, null)]
    public async Task AFarmThatAnswered_OrNowhereElseToGo_WaitsForTheBackoff(bool somewhereElse, string? farmError)
    {
        var time = new FakeTimeProvider();
        var policy = new FarmRetryPolicy(TenSecondBackoff, time, retryAtOnceElsewhere: somewhereElse);

        var (result, calls) = FailThenSucceed(policy, 1,
            () => new RpcException(new Status(StatusCode.Unavailable, "x"), farmError is null ? [] : new Metadata { { "farm-error", farmError } }));
        // The operation fails synchronously and a retry without delay would run before ExecuteAsync
        // returns (as the test above shows): one call and an unfinished task mean it waits on the clock.
        Assert.Equal(1, calls());
        Assert.False(result.IsCompleted);
        time.Advance(TimeSpan.FromSeconds(60));
        Assert.Equal(2, await result.WaitAsync(TimeSpan.FromSeconds(10)));
    }

    [Fact]
    public void Defaults_MatchAzure()
    {
        var options = new FarmRetryOptions();

        Assert.Equal(FarmRetryMode.Exponential, options.Mode);
        Assert.Equal(3, options.MaxRetries);
        Assert.Equal(TimeSpan.FromSeconds(0.8), options.Delay);
        Assert.Equal(TimeSpan.FromSeconds(60), options.MaxDelay);
        Assert.Equal(TimeSpan.FromSeconds(60), options.TryTimeout);
    }

    [Fact]
    public void InvalidOptions_AreRejected()
        => Assert.Throws<ArgumentOutOfRangeException>(() => new FarmRetryPolicy(new FarmRetryOptions { MaxRetries = -1 }));

    [Fact]
    public void OperationTimeout_FromConnectionString_OverridesTryTimeout()
    {
        using var connection = new FarmConnection(FarmConnectionString.Parse("Endpoint=http://a:1;OperationTimeout=00:00:05"), new FarmClientOptions());

        Assert.Equal(TimeSpan.FromSeconds(5), connection.Retry.TryTimeout);
    }

    [Fact]
    public void Unavailable_MovesToTheNextEndpoint_OnceAndWrapsAround()
    {
        using var connection = new FarmConnection(FarmConnectionString.Parse("Endpoint=http://a:1,http://b:2,http://c:3"), new FarmClientOptions());

        connection.ReportUnavailable(0);
        connection.ReportUnavailable(0); // a second caller that saw the same failure changes nothing
        Assert.Equal(1, connection.CurrentEndpointIndex);

        connection.ReportUnavailable(1);
        connection.ReportUnavailable(2);
        Assert.Equal(0, connection.CurrentEndpointIndex);
    }
}
