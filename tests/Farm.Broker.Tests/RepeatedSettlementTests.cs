using Farm.Broker.Entities;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// A settlement sent again as a repeat (SettleRequest.repeat: its first answer was lost with the
/// stream or connection that carried it) with the same lock token and disposition gets the first
/// one's answer, not MessageLockLost (also on a node that never saw the lock, or after the entity
/// forgot it, while the lock would hold and its message is where the settlement put it: gone, in the
/// dead-letter queue, deferred, or back to be received); another disposition, a token the entity never settled,
/// one past the time it is kept, or a second settlement that does not say it is a repeat (an
/// application completing twice, which Azure Service Bus refuses) still loses its lock.
/// </summary>
public sealed class RepeatedSettlementTests
{
    private static Settlement Settle(ReceivedMessage message, Disposition disposition) =>
        new() { LockToken = message.LockToken, Disposition = disposition };

    private static async Task<ReceivedMessage> ReceiveOneAsync(QueueEntity queue) =>
        Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));

    [Theory]
    [InlineData(Disposition.Complete)]
    [InlineData(Disposition.DeadLetter)]
    [InlineData(Disposition.Defer)]
    [InlineData(Disposition.Abandon)]
    public async Task TheSameSettlementSentAgain_GetsTheSameAnswer_AndChangesNothingMore(Disposition disposition)
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("again");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1")]);
        var message = await ReceiveOneAsync(queue);

        var first = Assert.Single(await queue.SettleAsync(false, [Settle(message, disposition)]));
        var again = Assert.Single(await queue.SettleAsync(false, [Settle(message, disposition)], repeat: true));

        Assert.Equal(FarmErrorCode.Unspecified, first.ErrorCode);
        Assert.Equal(FarmErrorCode.Unspecified, again.ErrorCode);
        var counts = queue.GetCounts();
        Assert.Equal(disposition == Disposition.DeadLetter ? 1 : 0, counts.DeadLetter);
        Assert.Equal(disposition == Disposition.Defer ? 1 : 0, counts.Deferred);
        Assert.Equal(disposition == Disposition.Abandon ? 1 : 0, counts.Active);
        if (disposition == Disposition.Abandon)
        {
            // Abandoned once, not twice: it comes back with one delivery counted.
            Assert.Equal(2, (await ReceiveOneAsync(queue)).DeliveryCount);
        }
    }

    [Fact]
    public async Task ARepeat_ThatComesWhileTheFirstCommits_WaitsForItsOutcome()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("in-flight");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1")]);
        var message = await ReceiveOneAsync(queue);

        // Both in one go: the second finds the first's commit still running.
        var first = queue.SettleAsync(false, [Settle(message, Disposition.Complete)]);
        var again = queue.SettleAsync(false, [Settle(message, Disposition.Complete)], repeat: true);

        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await first).ErrorCode);
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await again).ErrorCode);
        Assert.Equal(0, queue.GetCounts().Active);
    }

    [Fact]
    public async Task ASecondSettlementNotMarkedRepeat_OrAnotherDisposition_OrAnUnknownToken_OrOnePastItsTime_StillLosesTheLock()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("not-again");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1"), BrokerHarness.Text("two", "m-2")]);
        var first = await ReceiveOneAsync(queue);
        var second = await ReceiveOneAsync(queue);

        await queue.SettleAsync(false, [Settle(first, Disposition.Complete)]);
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await queue.SettleAsync(false, [Settle(first, Disposition.Complete)])).ErrorCode);
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await queue.SettleAsync(false, [Settle(first, Disposition.Abandon)], repeat: true)).ErrorCode);
        var unknown = new Settlement { LockToken = Guid.NewGuid().ToString(), Disposition = Disposition.Complete };
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await queue.SettleAsync(false, [unknown], repeat: true)).ErrorCode);

        // Past the retention the entity no longer remembers the settlements; while their locks would
        // hold, the tokens answer (the Complete's message is gone, the deferral's deferred: the token
        // says which, ACompleteSentAgainToANewOwner... and ADeadLetterDeferOrAbandonSentAgain...), and
        // they lose the lock after that.
        await queue.SettleAsync(false, [Settle(second, Disposition.Defer)]);
        await TestClock.AdvanceAndSettleAsync(farm.Time, SettledLocks.Retention + TimeSpan.FromSeconds(1));
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await queue.SettleAsync(false, [Settle(second, Disposition.Defer)], repeat: true)).ErrorCode);
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await queue.SettleAsync(false, [Settle(first, Disposition.Complete)], repeat: true)).ErrorCode);
        farm.Time.Advance(new QueueSettings().LockDuration);
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await queue.SettleAsync(false, [Settle(second, Disposition.Defer)], repeat: true)).ErrorCode);
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await queue.SettleAsync(false, [Settle(first, Disposition.Complete)], repeat: true)).ErrorCode);
    }

    /// <summary>The first owner's answer was lost with it: a new node (as after a failover) serves the container.</summary>
    [Fact]
    public async Task ACompleteSentAgainToANewOwner_IsAnsweredDone_WhenItsMessageIsGone_AndLockLostWhenItIsNot()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("moved");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1"), BrokerHarness.Text("two", "m-2"), BrokerHarness.Text("three", "m-3")]);
        var completed = await ReceiveOneAsync(queue);
        var notCompleted = await ReceiveOneAsync(queue);
        var abandoned = await ReceiveOneAsync(queue);
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await queue.SettleAsync(false, [Settle(completed, Disposition.Complete)])).ErrorCode);
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await queue.SettleAsync(false, [Settle(abandoned, Disposition.Abandon)])).ErrorCode);

        await farm.RestartAsync(crash: true);
        var moved = await farm.QueueAsync("moved");

        // Its Complete was committed before the crash: done. The other's never was: its message is
        // there again (without a lock), and the repeat is told so.
        var results = await moved.SettleAsync(false, [Settle(completed, Disposition.Complete), Settle(notCompleted, Disposition.Complete)], repeat: true);
        Assert.Equal([FarmErrorCode.Unspecified, FarmErrorCode.MessageLockLost], results.Select(r => r.ErrorCode));
        // Not a repeat (an application completing twice), or not a Complete: the lock is lost, as before.
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await moved.SettleAsync(false, [Settle(completed, Disposition.Complete)])).ErrorCode);
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await moved.SettleAsync(false, [Settle(completed, Disposition.DeadLetter)], repeat: true)).ErrorCode);
        Assert.Equal(2, moved.GetCounts().Active);

        // Once its lock would have run out, a repeat is not answered from the token any more.
        farm.Time.Advance(TimeSpan.FromMinutes(1) + TimeSpan.FromSeconds(2));
        Assert.Equal(FarmErrorCode.MessageLockLost, Assert.Single(await moved.SettleAsync(false, [Settle(completed, Disposition.Complete)], repeat: true)).ErrorCode);
    }

    [Fact]
    public async Task ADeadLetterDeferOrAbandonSentAgainToANewOwner_IsAnsweredDone_WhereItsMessageIsWhereItPutIt()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("moved");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1"), BrokerHarness.Text("two", "m-2"), BrokerHarness.Text("three", "m-3"), BrokerHarness.Text("four", "m-4")]);
        var deadLettered = await ReceiveOneAsync(queue);
        var deferred = await ReceiveOneAsync(queue);
        var abandoned = await ReceiveOneAsync(queue);
        var unsettled = await ReceiveOneAsync(queue);
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await queue.SettleAsync(false, [Settle(deadLettered, Disposition.DeadLetter)])).ErrorCode);
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await queue.SettleAsync(false, [Settle(deferred, Disposition.Defer)])).ErrorCode);
        Assert.Equal(FarmErrorCode.Unspecified, Assert.Single(await queue.SettleAsync(false, [Settle(abandoned, Disposition.Abandon)])).ErrorCode);

        await farm.RestartAsync(crash: true);
        var moved = await farm.QueueAsync("moved");

        // Each settlement committed before the crash: its message is where it put it, so the repeat is done.
        var results = await moved.SettleAsync(false,
            [Settle(deadLettered, Disposition.DeadLetter), Settle(deferred, Disposition.Defer), Settle(abandoned, Disposition.Abandon)], repeat: true);
        Assert.Equal([FarmErrorCode.Unspecified, FarmErrorCode.Unspecified, FarmErrorCode.Unspecified], results.Select(r => r.ErrorCode));
        // A message somewhere else than the settlement would have put it: not known, the lock is lost.
        results = await moved.SettleAsync(false,
            [Settle(unsettled, Disposition.DeadLetter), Settle(unsettled, Disposition.Defer), Settle(deadLettered, Disposition.Abandon), Settle(deferred, Disposition.DeadLetter)], repeat: true);
        Assert.All(results, r => Assert.Equal(FarmErrorCode.MessageLockLost, r.ErrorCode));
        // Nothing moved: one dead letter, one deferred, two active (the abandoned one and the one never settled).
        var counts = moved.GetCounts();
        Assert.Equal(1, counts.DeadLetter);
        Assert.Equal(1, counts.Deferred);
        Assert.Equal(2, counts.Active);
    }

    [Fact]
    public void ASettlementAwaitingItsCommit_IsAnsweredWithItsCallsOutcome_UntilTheCommitEnds()
    {
        var settled = new SettledLocks();
        var written = Guid.NewGuid();
        var unwritten = Guid.NewGuid();
        var otherCalls = Guid.NewGuid();
        var callsOwn = new TaskCompletionSource<BrokerException?>().Task;
        var otherCallsOwn = new TaskCompletionSource<BrokerException?>().Task;
        // One call: a settlement that wrote, one that did not (nothing to commit), then another call's.
        var first = settled.Add(written, Disposition.Complete, awaitsCommit: true, lockedUntilMs: 60_000, now: 0);
        settled.Add(unwritten, Disposition.Abandon, awaitsCommit: false, lockedUntilMs: 60_000, now: 0);
        settled.AwaitCommit(first, first, callsOwn);
        var other = settled.Add(otherCalls, Disposition.Complete, awaitsCommit: true, lockedUntilMs: 60_000, now: 0);
        settled.AwaitCommit(other, other, otherCallsOwn);

        Assert.Same(callsOwn, settled.Find(written)!.Value.Outcome);
        Assert.Same(SettledLocks.Done, settled.Find(unwritten)!.Value.Outcome);
        Assert.Same(otherCallsOwn, settled.Find(otherCalls)!.Value.Outcome);

        settled.Committed(first);

        // Done once committed; the other call's settlement still waits for its own commit.
        Assert.Same(SettledLocks.Done, settled.Find(written)!.Value.Outcome);
        Assert.Equal(Disposition.Complete, settled.Find(written)!.Value.Disposition);
        Assert.Same(otherCallsOwn, settled.Find(otherCalls)!.Value.Outcome);
    }

    [Fact]
    public void ACallWhoseCommitFailed_IsForgotten_ButNotWhatItDidWithoutWriting()
    {
        var settled = new SettledLocks();
        var callsOwn = new TaskCompletionSource<BrokerException?>().Task;
        var before = Guid.NewGuid();
        settled.Add(before, Disposition.Complete, awaitsCommit: false, lockedUntilMs: 60_000, now: 0);
        var written = Guid.NewGuid();
        var unwritten = Guid.NewGuid();
        var writtenToo = Guid.NewGuid();
        var first = settled.Add(written, Disposition.Complete, awaitsCommit: true, lockedUntilMs: 60_000, now: 0);
        settled.Add(unwritten, Disposition.Abandon, awaitsCommit: false, lockedUntilMs: 60_000, now: 0);
        var last = settled.Add(writtenToo, Disposition.DeadLetter, awaitsCommit: true, lockedUntilMs: 60_000, now: 0);
        settled.AwaitCommit(first, last, callsOwn);

        settled.Failed(first);

        Assert.Null(settled.Find(written));
        Assert.Null(settled.Find(writtenToo));
        Assert.Same(SettledLocks.Done, settled.Find(unwritten)!.Value.Outcome);
        Assert.NotNull(settled.Find(before));
    }

    [Fact]
    public async Task ARepeatAfterTheCommit_IsAnsweredFromTheSharedOutcome()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("shared-outcome");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1"), BrokerHarness.Text("two", "m-2")]);
        var messages = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 2, TimeSpan.Zero, default);

        var first = await queue.SettleAsync(false, [.. messages.Select(m => Settle(m, Disposition.Complete))]);
        var again = await queue.SettleAsync(false, [.. messages.Select(m => Settle(m, Disposition.Complete))], repeat: true);

        Assert.All(first, r => Assert.Equal(FarmErrorCode.Unspecified, r.ErrorCode));
        Assert.All(again, r => Assert.Equal(FarmErrorCode.Unspecified, r.ErrorCode));
        Assert.Equal(0, queue.GetCounts().Active);
    }

    [Fact]
    public void TheTokensKept_AreBoundedPerEntity_OldestFirst()
    {
        var settled = new SettledLocks();
        var tokens = Enumerable.Range(0, SettledLocks.Capacity + 10).Select(_ => Guid.NewGuid()).ToList();
        foreach (var token in tokens)
        {
            settled.Add(token, Disposition.Complete, awaitsCommit: false, lockedUntilMs: 60_000, now: 0);
        }

        Assert.Equal(SettledLocks.Capacity, settled.Count);
        Assert.Null(settled.Find(tokens[0]));
        Assert.Null(settled.Find(tokens[9]));
        Assert.NotNull(settled.Find(tokens[10]));
        Assert.NotNull(settled.Find(tokens[^1]));
        settled.Prune(now: (long)SettledLocks.Retention.TotalMilliseconds);
        Assert.Equal(0, settled.Count);
        Assert.Null(settled.Find(tokens[^1]));
    }

    [Fact]
    public void ACommitEndingAfterItsStampsWerePushedOut_LeavesTheSettlementsNowInTheirPlaceAlone()
    {
        var settled = new SettledLocks();
        var callsOwn = new TaskCompletionSource<BrokerException?>().Task;
        var laterCallsOwn = new TaskCompletionSource<BrokerException?>().Task;
        var first = settled.Add(Guid.NewGuid(), Disposition.Complete, awaitsCommit: true, lockedUntilMs: 60_000, now: 0);
        settled.AwaitCommit(first, first, callsOwn);

        // A full ring pushes the call's settlement out; the latest one takes its place in the ring.
        var later = Enumerable.Range(0, SettledLocks.Capacity).Select(_ => Guid.NewGuid()).ToList();
        var laterFirst = settled.Add(later[0], Disposition.Complete, awaitsCommit: true, lockedUntilMs: 60_000, now: 0);
        foreach (var token in later.Skip(1))
        {
            settled.Add(token, Disposition.Complete, awaitsCommit: true, lockedUntilMs: 60_000, now: 0);
        }
        settled.AwaitCommit(laterFirst, laterFirst + later.Count - 1, laterCallsOwn);
        settled.Failed(first);

        Assert.Equal(SettledLocks.Capacity, settled.Count);
        Assert.Same(laterCallsOwn, settled.Find(later[^1])!.Value.Outcome);
        Assert.Same(laterCallsOwn, settled.Find(later[0])!.Value.Outcome);
    }

    [Fact]
    public void APruneBeforeTheOldestIsDue_KeepsEverything_AndOnceDue_ForgetsInTheOrderTheyCame()
    {
        var settled = new SettledLocks();
        var shortLock = Guid.NewGuid();
        var longLock = Guid.NewGuid();
        var shorterAfter = Guid.NewGuid();
        settled.Add(shortLock, Disposition.Complete, awaitsCommit: false, lockedUntilMs: 2_000, now: 0);
        settled.Add(longLock, Disposition.Complete, awaitsCommit: false, lockedUntilMs: 60_000, now: 0);
        settled.Add(shorterAfter, Disposition.Complete, awaitsCommit: false, lockedUntilMs: 1_000, now: 0);

        settled.Prune(now: 1_999);
        Assert.Equal(3, settled.Count);

        // The oldest goes at its time; the one behind it is kept until its own (the retention), and
        // the later one with a shorter lock with it.
        settled.Prune(now: 2_000);
        Assert.Null(settled.Find(shortLock));
        Assert.Equal(2, settled.Count);
        settled.Prune(now: (long)SettledLocks.Retention.TotalMilliseconds - 1);
        Assert.NotNull(settled.Find(longLock));
        Assert.NotNull(settled.Find(shorterAfter));
        settled.Prune(now: (long)SettledLocks.Retention.TotalMilliseconds);
        Assert.Equal(0, settled.Count);
    }
}
