using Farm.Contracts.V1;

namespace Farm.Client.Tests;

public sealed class SettleBatcherTests
{
    private static Settlement Token(int n) => new() { LockToken = $"t{n}" };

    private static SettleResponse Ok(SettleRequest request) => new()
    {
        Results = { request.Settlements.Select(s => new SettleResult { LockToken = s.LockToken, ErrorCode = FarmErrorCode.Unspecified }) },
    };

    [Fact]
    public async Task SettlementsMadeWhileACallIsInFlight_GoOutTogether_InTheNextCall()
    {
        var calls = new List<SettleRequest>();
        var firstCallHeld = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var releaseFirst = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var batcher = new SettleBatcher("q", async request =>
        {
            lock (calls)
            {
                calls.Add(request);
            }
            if (calls.Count == 1)
            {
                firstCallHeld.SetResult();
                await releaseFirst.Task;
            }
            return Ok(request);
        });

        var first = batcher.SettleAsync(Token(0), default);
        await firstCallHeld.Task.WaitAsync(TimeSpan.FromSeconds(10));
        var rest = Enumerable.Range(1, 10).Select(n => batcher.SettleAsync(Token(n), default)).ToList();
        releaseFirst.SetResult();
        var results = await Task.WhenAll(rest.Prepend(first)).WaitAsync(TimeSpan.FromSeconds(10));

        Assert.Equal(2, calls.Count);
        Assert.Equal(["t0"], calls[0].Settlements.Select(s => s.LockToken));
        Assert.Equal(Enumerable.Range(1, 10).Select(n => $"t{n}"), calls[1].Settlements.Select(s => s.LockToken));
        Assert.Equal(Enumerable.Range(0, 11).Select(n => $"t{n}"), results.Select(r => r.LockToken));
    }

    [Fact]
    public async Task EachSettlement_GetsItsOwnResult()
    {
        var batcher = new SettleBatcher("q", request => Task.FromResult(new SettleResponse
        {
            Results =
            {
                request.Settlements.Select(s => new SettleResult
                {
                    LockToken = s.LockToken,
                    ErrorCode = s.LockToken == "t1" ? FarmErrorCode.MessageLockLost : FarmErrorCode.Unspecified,
                }),
            },
        }));

        var results = await Task.WhenAll(batcher.SettleAsync(Token(0), default), batcher.SettleAsync(Token(1), default));

        Assert.Equal(FarmErrorCode.Unspecified, results[0].ErrorCode);
        Assert.Equal(FarmErrorCode.MessageLockLost, results[1].ErrorCode);
    }

    [Fact]
    public async Task AFailedCall_FailsEverySettlementInIt_AndTheNextCallStillGoesOut()
    {
        var attempt = 0;
        var batcher = new SettleBatcher("q", request =>
            Interlocked.Increment(ref attempt) == 1
                ? Task.FromException<SettleResponse>(new FarmException("down", FarmFailureReason.ServiceCommunicationProblem, "q"))
                : Task.FromResult(Ok(request)));

        var failed = await Assert.ThrowsAsync<FarmException>(() => batcher.SettleAsync(Token(0), default));
        var later = await batcher.SettleAsync(Token(1), default);

        Assert.Equal(FarmFailureReason.ServiceCommunicationProblem, failed.Reason);
        Assert.Equal(FarmErrorCode.Unspecified, later.ErrorCode);
    }
}
