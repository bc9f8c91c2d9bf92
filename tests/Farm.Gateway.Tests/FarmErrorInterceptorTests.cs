using Farm.Broker;
using Farm.ContainerStore.Containers;
using Farm.Contracts;
using Farm.Contracts.V1;
using Farm.Gateway.Grpc;
using Grpc.Core;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Farm.Gateway.Tests;

public sealed class FarmErrorInterceptorTests
{
    private readonly FarmErrorInterceptor _interceptor = new(NullLogger<FarmErrorInterceptor>.Instance);

    private Task<string> Call(Func<string> handler, ServerCallContext? context = null) =>
        _interceptor.UnaryServerHandler<string, string>("request", context ?? new TestCallContext(), (_, _) => Task.FromResult(handler()));

    [Theory]
    [InlineData(FarmErrorCode.InvalidArgument, StatusCode.InvalidArgument)]
    [InlineData(FarmErrorCode.MessageSizeExceeded, StatusCode.InvalidArgument)]
    [InlineData(FarmErrorCode.MessagingEntityNotFound, StatusCode.NotFound)]
    [InlineData(FarmErrorCode.MessageNotFound, StatusCode.NotFound)]
    [InlineData(FarmErrorCode.ContainerNotFound, StatusCode.NotFound)]
    [InlineData(FarmErrorCode.MessagingEntityAlreadyExists, StatusCode.AlreadyExists)]
    [InlineData(FarmErrorCode.MessageLockLost, StatusCode.FailedPrecondition)]
    [InlineData(FarmErrorCode.NotSupported, StatusCode.FailedPrecondition)]
    [InlineData(FarmErrorCode.QuotaExceeded, StatusCode.ResourceExhausted)]
    [InlineData(FarmErrorCode.NotOwner, StatusCode.Unavailable)]
    [InlineData(FarmErrorCode.StaleEpoch, StatusCode.Unavailable)]
    [InlineData(FarmErrorCode.ServiceBusy, StatusCode.Unavailable)]
    [InlineData(FarmErrorCode.StoreUnavailable, StatusCode.Unavailable)]
    public async Task ABrokerFailure_EndsTheCall_WithItsStatus_AndTheFarmErrorTrailer(FarmErrorCode code, StatusCode status)
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw FarmErrors.Create(code, "what went wrong")));

        Assert.Equal(status, error.StatusCode);
        Assert.Equal("what went wrong", error.Status.Detail);
        Assert.Equal(FarmErrorNames.Of(code), error.FarmError());
        Assert.True(FarmErrorNames.TryParse(error.FarmError(), out var parsed));
        Assert.Equal(code, parsed);
    }

    /// <summary>An overloaded node's SERVICE_BUSY travels as RESOURCE_EXHAUSTED (gRPC's "slow down"), with the same trailer.</summary>
    [Fact]
    public async Task AnOverloadedNodesServiceBusy_IsResourceExhausted_WithTheServiceBusyTrailer()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw FarmErrors.Overloaded("behind its work")));

        Assert.Equal(StatusCode.ResourceExhausted, error.StatusCode);
        Assert.Equal("SERVICE_BUSY", error.FarmError());
        Assert.Equal("behind its work", error.Status.Detail);
    }

    [Fact]
    public async Task NotOwner_NamesTheOwner_InTheFarmOwnerTrailer()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw FarmErrors.NotOwner("orders", "http://10.0.0.2:5480")));

        Assert.Equal("NOT_OWNER", error.FarmError());
        Assert.Equal("http://10.0.0.2:5480", error.FarmOwner());
    }

    [Fact]
    public async Task AForwardedCallsStatus_PassesThroughUnchanged()
    {
        var forwarded = new RpcException(new Status(StatusCode.NotFound, "gone"), new Metadata { { FarmMetadata.ErrorTrailer, "MESSAGING_ENTITY_NOT_FOUND" } });

        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw forwarded));

        Assert.Same(forwarded, error);
    }

    [Fact]
    public async Task AnyOtherException_IsInternal_WithItsMessage_AndNoFarmError()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw new InvalidOperationException("a bug")));

        Assert.Equal(StatusCode.Internal, error.StatusCode);
        Assert.Equal("a bug", error.Status.Detail);
        Assert.Null(error.FarmError());
    }

    [Fact]
    public async Task ACallCutOffUnderItsHandler_IsUnavailable_SoACallerStillThereTriesAgain()
    {
        using var stopping = new CancellationTokenSource();
        await stopping.CancelAsync();

        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw new ObjectDisposedException("services"), new TestCallContext(cancellationToken: stopping.Token)));

        Assert.Equal(StatusCode.Unavailable, error.StatusCode);
        Assert.Null(error.FarmError());
    }

    [Fact]
    public async Task AContainerDatabaseClosedUnderTheCall_IsNotOwner_SoTheCallerLooksTheOwnerUpAgain()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw new ContainerDatabaseClosedException(new object())));

        Assert.Equal(StatusCode.Unavailable, error.StatusCode);
        Assert.Equal("NOT_OWNER", error.FarmError());
    }

    [Fact]
    public async Task AnyOtherObjectDisposed_WhileTheCallLives_IsInternal()
    {
        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw new ObjectDisposedException("something else")));

        Assert.Equal(StatusCode.Internal, error.StatusCode);
    }

    [Fact]
    public async Task ACancellationPastTheCallersDeadline_IsDeadlineExceeded()
    {
        using var expired = new CancellationTokenSource();
        await expired.CancelAsync();
        var context = new TestCallContext(cancellationToken: expired.Token, deadline: DateTime.UtcNow.AddSeconds(-1));

        var error = await Assert.ThrowsAsync<RpcException>(() => Call(() => throw new OperationCanceledException(expired.Token), context));

        Assert.Equal(StatusCode.DeadlineExceeded, error.StatusCode);
    }

    /// <summary>
    /// A client that resets its stream (or whose connection goes) breaks the call's reads and writes
    /// with an IOException: nothing is logged as an error (an overloaded node whose clients gave up
    /// logged a stack trace per call for it); the status stays INTERNAL. Any other failure, a
    /// cancellation the call did not ask for included, is INTERNAL and logged.
    /// </summary>
    [Fact]
    public async Task AStreamThatBrokeUnderTheCall_IsNotLoggedAsAnError_AndKeepsItsStatus()
    {
        var logger = new RecordingLogger();
        var interceptor = new FarmErrorInterceptor(logger);
        var broken = new IOException("The client reset the request stream.");

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            interceptor.UnaryServerHandler<string, string>("request", new TestCallContext(), (_, _) => throw broken));

        // The status a client could read is unchanged (INTERNAL, not retried as a transient one).
        Assert.Equal(StatusCode.Internal, error.StatusCode);
        Assert.DoesNotContain(logger.Levels, level => level >= LogLevel.Warning);
    }

    [Fact]
    public async Task AnUnknownFailure_IsInternal_AndLoggedAsAnError()
    {
        var logger = new RecordingLogger();
        var interceptor = new FarmErrorInterceptor(logger);

        var error = await Assert.ThrowsAsync<RpcException>(() =>
            interceptor.UnaryServerHandler<string, string>("request", new TestCallContext(), (_, _) => throw new InvalidOperationException("a bug")));

        Assert.Equal(StatusCode.Internal, error.StatusCode);
        Assert.Contains(LogLevel.Error, logger.Levels);
    }

    private sealed class RecordingLogger : ILogger<FarmErrorInterceptor>
    {
        public List<LogLevel> Levels { get; } = [];

        public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => true;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter) =>
            Levels.Add(logLevel);
    }
}
