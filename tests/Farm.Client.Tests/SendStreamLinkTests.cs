using Farm.Contracts.V1;
using Grpc.Core;
using Microsoft.Extensions.Time.Testing;

namespace Farm.Client.Tests;

/// <summary>
/// The send stream's own bookkeeping, against a SendStream the test answers by hand (a fake
/// CallInvoker; the real stream against a node is in the end-to-end SendStreamTests).
/// </summary>
public sealed class SendStreamLinkTests
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(10);

    private static HandAnsweredStreams<SendStreamRequest, SendStreamResponse> NewInvoker() => new(Patience);

    /// <summary>A send with no deadline waits for its answer however long it takes (it once timed out at once).</summary>
    [Fact]
    public async Task ASendWithoutADeadline_WaitsForItsAnswer()
    {
        var invoker = NewInvoker();
        using var link = new SendStreamLink(new Messaging.MessagingClient(invoker), null, TimeProvider.System);

        var send = link.Send(new SendRequest { Entity = "q" }, new CallOptions()).ResponseAsync;
        var call = await invoker.NextCallAsync();
        var request = await call.Requests.Reader.ReadAsync().AsTask().WaitAsync(Patience);
        var streamed = Assert.Single(request.Sends);
        Assert.Null(streamed.Timeout);
        Assert.False(send.IsCompleted);

        await call.Answers.Writer.WriteAsync(new SendStreamResponse
        {
            Results = { new StreamedSendResult { Id = streamed.Id, Response = new SendResponse { SequenceNumbers = { 42 } } } },
        });
        Assert.Equal([42L], (await send.WaitAsync(Patience)).SequenceNumbers);
    }

    /// <summary>
    /// A stream the node ends fails the sends it did not answer as UNAVAILABLE (the retry sends them
    /// again), keeps the answers it gave, and the next send opens a new stream.
    /// </summary>
    [Fact]
    public async Task AStreamThatEnds_FailsTheSendsItDidNotAnswer_AsUnavailable_AndTheNextSendOpensAnother()
    {
        var invoker = NewInvoker();
        using var link = new SendStreamLink(new Messaging.MessagingClient(invoker), null, TimeProvider.System);
        var options = new CallOptions(deadline: DateTime.UtcNow + Patience);

        var answered = link.Send(new SendRequest { Entity = "q" }, options).ResponseAsync;
        var unanswered = link.Send(new SendRequest { Entity = "q" }, options).ResponseAsync;
        var call = await invoker.NextCallAsync();
        var ids = new List<long>();
        while (ids.Count < 2)
        {
            var request = await call.Requests.Reader.ReadAsync().AsTask().WaitAsync(Patience);
            ids.AddRange(request.Sends.Select(s => s.Id));
            Assert.All(request.Sends, s => Assert.InRange(s.Timeout.ToTimeSpan(), TimeSpan.FromSeconds(1), Patience));
        }
        await call.Answers.Writer.WriteAsync(new SendStreamResponse
        {
            Results = { new StreamedSendResult { Id = ids[0], Response = new SendResponse { SequenceNumbers = { 1 } } } },
        });
        call.Answers.Writer.Complete();

        Assert.Equal([1L], (await answered.WaitAsync(Patience)).SequenceNumbers);
        var error = await Assert.ThrowsAsync<RpcException>(() => unanswered.WaitAsync(Patience));
        Assert.Equal(StatusCode.Unavailable, error.StatusCode);

        // The next send opens a new stream call and is answered there.
        var next = link.Send(new SendRequest { Entity = "q" }, options).ResponseAsync;
        var second = await invoker.NextCallAsync();
        var nextSend = Assert.Single((await second.Requests.Reader.ReadAsync().AsTask().WaitAsync(Patience)).Sends);
        await second.Answers.Writer.WriteAsync(new SendStreamResponse
        {
            Results = { new StreamedSendResult { Id = nextSend.Id, Response = new SendResponse { SequenceNumbers = { 2 } } } },
        });
        Assert.Equal([2L], (await next.WaitAsync(Patience)).SequenceNumbers);
    }

    /// <summary>
    /// A send its stream does not answer by its deadline fails as DEADLINE_EXCEEDED once the
    /// stream's deadline check sees it (no timer of its own); the answer that comes later goes
    /// nowhere, and the stream goes on serving the next send.
    /// </summary>
    [Fact]
    public async Task ASendPastItsDeadline_FailsAsDeadlineExceeded_AndItsLateAnswerGoesNowhere()
    {
        var invoker = NewInvoker();
        var time = new FakeTimeProvider(DateTimeOffset.UtcNow);
        using var link = new SendStreamLink(new Messaging.MessagingClient(invoker), null, time);

        var late = link.Send(new SendRequest { Entity = "q" }, new CallOptions(deadline: time.GetUtcNow().UtcDateTime + TimeSpan.FromSeconds(5))).ResponseAsync;
        var call = await invoker.NextCallAsync();
        var lateId = Assert.Single((await call.Requests.Reader.ReadAsync().AsTask().WaitAsync(Patience)).Sends).Id;

        time.Advance(TimeSpan.FromSeconds(4.9));
        Assert.False(late.IsCompleted);
        time.Advance(SendStreamLink.DeadlineCheckInterval + TimeSpan.FromMilliseconds(100));
        var error = await Assert.ThrowsAsync<RpcException>(() => late.WaitAsync(Patience));
        Assert.Equal(StatusCode.DeadlineExceeded, error.StatusCode);

        var next = link.Send(new SendRequest { Entity = "q" }, new CallOptions(deadline: time.GetUtcNow().UtcDateTime + TimeSpan.FromSeconds(5))).ResponseAsync;
        var nextId = Assert.Single((await call.Requests.Reader.ReadAsync().AsTask().WaitAsync(Patience)).Sends).Id;
        await call.Answers.Writer.WriteAsync(new SendStreamResponse
        {
            Results =
            {
                new StreamedSendResult { Id = lateId, Response = new SendResponse { SequenceNumbers = { 1 } } },
                new StreamedSendResult { Id = nextId, Response = new SendResponse { SequenceNumbers = { 2 } } },
            },
        });
        Assert.Equal([2L], (await next.WaitAsync(Patience)).SequenceNumbers);
        Assert.Equal(StatusCode.DeadlineExceeded, (await Assert.ThrowsAsync<RpcException>(() => late)).StatusCode);
    }

    /// <summary>A send whose token is cancelled fails as CANCELLED at once, without waiting for its stream.</summary>
    [Fact]
    public async Task ACancelledSend_FailsAsCancelled_AtOnce()
    {
        var invoker = NewInvoker();
        using var link = new SendStreamLink(new Messaging.MessagingClient(invoker), null, new FakeTimeProvider(DateTimeOffset.UtcNow));
        using var cancel = new CancellationTokenSource();

        var send = link.Send(new SendRequest { Entity = "q" }, new CallOptions(cancellationToken: cancel.Token)).ResponseAsync;
        var call = await invoker.NextCallAsync();
        Assert.Single((await call.Requests.Reader.ReadAsync().AsTask().WaitAsync(Patience)).Sends);
        Assert.False(send.IsCompleted);

        await cancel.CancelAsync();
        var error = await Assert.ThrowsAsync<RpcException>(() => send.WaitAsync(Patience));
        Assert.Equal(StatusCode.Cancelled, error.StatusCode);
    }
}
