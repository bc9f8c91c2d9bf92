using Farm.ContainerStore.Sqlite;
using Farm.ContainerStore.Containers;
using Farm.Testing;
using Farm.Broker.Entities;
using Farm.Contracts.V1;
using static Farm.Broker.Tests.NumberedMessages;

namespace Farm.Broker.Tests;

/// <summary>
/// A queue whose message cache holds a few messages while thousands are queued (issue "Bounded
/// memory"): the rest stay in the container database and are read back in order as the head
/// drains. Every message is delivered exactly once in sequence order through the paths that touch
/// the cache: peek-lock and complete, abandon, lock expiry, defer, TTL with dead-lettering, the
/// dead-letter queue, peek, a crash in the middle.
/// </summary>
public sealed class DeepQueueTests : IAsyncLifetime
{
    private const int Queued = 2000;
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync()
    {
        _farm = await BrokerHarness.StartAsync();
        NumberedMessages.UseCacheOfFive(_farm);
    }

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    /// <summary>The cache's bound, with room for what a receive holds locked and what arrives above the frontier while it is read back.</summary>
    private const int MostCached = 5 + 20 + 7;



    private async Task<QueueEntity> FillAsync(QueueSettings? settings = null, int count = Queued, Func<int, Message>? numbered = null)
    {
        var queue = await _farm.CreateQueueAsync("deep", settings);
        for (var i = 0; i < count; i += 100)
        {
            await queue.SendAsync([.. Enumerable.Range(i + 1, Math.Min(100, count - i)).Select(n => numbered?.Invoke(n) ?? Numbered(n))]);
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        }
        return queue;
    }

    /// <summary>One receive that waits (on arrivals, not the fake clock) until a read-back brings messages.</summary>
    private static async Task<IReadOnlyList<ReceivedMessage>> ReceiveAsync(QueueEntity queue, int max, bool deadLetter = false)
    {
        using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        return await queue.ReceiveAsync(deadLetter, ReceiveMode.PeekLock, max, TimeSpan.FromMinutes(10), deadline.Token);
    }

    private static Task CompleteAsync(QueueEntity queue, IEnumerable<ReceivedMessage> messages, bool deadLetter = false) =>
        queue.SettleAsync(deadLetter, [.. messages.Select(m => new Settlement { LockToken = m.LockToken, Disposition = Disposition.Complete })]);

    /// <summary>Receives and completes until <paramref name="count"/> messages came; returns their numbers in delivery order.</summary>
    private static async Task<List<int>> DrainAsync(QueueEntity queue, int count, bool deadLetter = false)
    {
        var numbers = new List<int>();
        while (numbers.Count < count)
        {
            var batch = await ReceiveAsync(queue, 20, deadLetter);
            numbers.AddRange(batch.Select(NumberOf));
            await CompleteAsync(queue, batch, deadLetter);
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        }
        return numbers;
    }

    [Fact]
    public async Task DeepQueue_KeepsAFewInMemory_CountsAll_AndDeliversEachOnceInOrder()
    {
        var queue = await FillAsync();

        var counts = queue.GetCounts();
        Assert.Equal(Queued, counts.Active);
        Assert.Equal(Queued, counts.Total);
        Assert.True(counts.SizeInBytes > Queued * BodyBytes, $"{counts.SizeInBytes} bytes counted");

        Assert.Equal(Enumerable.Range(1, Queued), await DrainAsync(queue, Queued));
        Assert.Equal(0, queue.GetCounts().Total);
        Assert.Equal(0, queue.GetCounts().SizeInBytes);
    }

    [Fact]
    public async Task DeepQueue_AfterACrash_LoadsOnlyTheHead_AndDeliversTheRestOnceInOrder()
    {
        var queue = await FillAsync();
        var first = await DrainAsync(queue, 700);
        var locked = await ReceiveAsync(queue, 3); // held when the node dies: delivered again

        await _farm.RestartAsync(crash: true);
        queue = await _farm.QueueAsync("deep");

        Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        // The stored tail is counted while the queue already serves.
        await Eventually.UntilAsync(() => queue.GetCounts().Active == Queued - first.Count, TimeSpan.FromSeconds(10), "the tail counted");
        var rest = await DrainAsync(queue, Queued - first.Count);
        Assert.Equal(Enumerable.Range(1, Queued), first.Concat(rest));
        Assert.Equal(locked.Select(NumberOf), rest.Take(3));
    }

    /// <summary>
    /// Purging a deep queue (DeleteMessages, an explorer's purge) deletes, in calls of bounded work,
    /// every message a receiver could take among those it held when the purge began, read back from
    /// the database as it goes; locked, deferred and scheduled messages stay, and so does a message
    /// sent after the purge began.
    /// </summary>
    [Fact]
    public async Task DeleteMessages_PurgesADeepQueue_InBoundedCalls_AndLeavesLockedDeferredScheduledAndLaterMessages()
    {
        var queue = await FillAsync(new QueueSettings { LockDuration = QueueSettings.MaxLockDuration });
        var locked = await ReceiveAsync(queue, 3);
        var deferred = Assert.Single(await ReceiveAsync(queue, 1));
        await queue.SettleAsync(false, [new Settlement { LockToken = deferred.LockToken, Disposition = Disposition.Defer }]);
        await queue.SendAsync([Numbered(Queued + 1, scheduledAt: _farm.Time.GetUtcNow().AddHours(1))]);

        var first = await queue.DeleteMessagesAsync(false, 500, 0, CancellationToken.None);
        Assert.Equal((500, Queued + 1L, true), first);
        await queue.SendAsync([Numbered(Queued + 2)]);
        var deleted = first.Deleted;
        for (var more = first.More; more;)
        {
            var next = await queue.DeleteMessagesAsync(false, 500, first.Through, CancellationToken.None);
            Assert.InRange(next.Deleted, 0, 500);
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
            deleted += next.Deleted;
            more = next.More;
        }

        Assert.Equal(Queued - 4, deleted);
        var counts = queue.GetCounts();
        Assert.Equal((3 + 1L, 1L, 1L), (counts.Active, counts.Deferred, counts.Scheduled));
        await CompleteAsync(queue, locked);
        Assert.Equal([Queued + 2], (await ReceiveAsync(queue, 10)).Select(NumberOf));
        Assert.Equal(NumberOf(deferred), NumberOf(Assert.Single(await queue.ReceiveDeferredAsync([deferred.SequenceNumber], ReceiveMode.ReceiveAndDelete))));
    }

    /// <summary>
    /// A takeover reads only a first part of the head (TakeoverLoadBytes) before the queue serves;
    /// the rest of the cache fills by read-back while it serves, with no receiver asking. The tail
    /// count is held until the first part is seen: a finished count starts a read-back of its own,
    /// which on a fast thread filled the cache before the test looked (CI saw 7 cached).
    /// </summary>
    [Fact]
    public async Task ATakeover_ReadsAFirstPartOfTheHead_AndFillsTheCacheWhileItServes()
    {
        _farm.Options.TakeoverLoadBytes = 2 * MessageBytes;
        await FillAsync(count: 300);
        using var countMayRun = new ManualResetEventSlim();
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
        {
            if (name == nameof(IContainerDatabase.CountActiveAsync))
            {
                countMayRun.Wait(TimeSpan.FromSeconds(30));
            }
            return proceed();
        });

        await _farm.RestartAsync(crash: true);
        var queue = await _farm.QueueAsync("deep");

        Assert.InRange(queue.CachedMessageCount, 1, 3);
        countMayRun.Set();
        await _farm.SweepUntilAsync(() => queue.CachedMessageCount >= 5, "the cache filled up to its budget");
        Assert.InRange(queue.CachedMessageCount, 5, MostCached);
        Assert.Equal(Enumerable.Range(1, 300), await DrainAsync(queue, 300));
    }

    /// <summary>
    /// A taken-over queue hands out its first message without waiting for its stored tail to be
    /// counted, and what arrives and is read back meanwhile adds up with the count once it lands.
    /// </summary>
    [Fact]
    public async Task DeepQueue_ServesBeforeItsTailIsCounted_AndTheCountAddsUpWithWhatHappenedMeanwhile()
    {
        var queue = await FillAsync();
        await _farm.RestartAsync(crash: true);
        queue = await _farm.QueueAsync("deep");

        var head = await ReceiveAsync(queue, 20);
        await CompleteAsync(queue, head);
        await queue.SendAsync([Numbered(Queued + 1), Numbered(Queued + 2)]);

        await Eventually.UntilAsync(() => queue.GetCounts().Active == Queued - head.Count + 2, TimeSpan.FromSeconds(10), "the count to add up");
        var rest = await DrainAsync(queue, Queued - head.Count + 2);
        Assert.Equal(Enumerable.Range(1, Queued + 2), head.Select(NumberOf).Concat(rest));
        Assert.Equal(0, queue.GetCounts().Total);
    }

    /// <summary>
    /// The taken-over tail is counted a few sequence numbers at a time while receivers drain the
    /// queue through read-backs and complete what they got: every message comes once, in order, and
    /// the counts end at zero. (Counted in one go beside the commits, a message read back and
    /// completed before the count looked was taken off the count and not found by it, and the
    /// queue stopped reading back with messages still stored.)
    /// </summary>
    [Fact]
    public async Task ATailCountedInStepsWhileTheQueueDrains_AddsUp_AndDeliversEveryMessageOnce()
    {
        _farm.Options.TakeoverLoadBytes = 2 * MessageBytes;
        _farm.Options.TailCountStep = 7;
        await FillAsync();
        await _farm.RestartAsync(crash: true);
        var queue = await _farm.QueueAsync("deep");

        Assert.Equal(Enumerable.Range(1, Queued), await DrainAsync(queue, Queued));
        await Eventually.UntilAsync(() => queue.GetCounts() is { Total: 0, SizeInBytes: 0 }, TimeSpan.FromSeconds(10), "the counts to end at zero");
        Assert.Empty(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, CancellationToken.None));
    }

    /// <summary>
    /// SQLite's reads run synchronously on their caller's thread, and counting a deep tail takes
    /// seconds: the load must not run it on its own thread (it did, under the entity's lock, which
    /// made a 10,000,000-message queue's first message wait for the count). Here the count blocks
    /// its thread until the test lets it go: the takeover finishes and the queue is loaded while
    /// the count is still held. (Receives commit between two count steps, TailCountStep sequence
    /// numbers each, so a receive is not asserted while the test holds a step open: whether it came
    /// before the step or waited behind it was a race.)
    /// </summary>
    [Fact]
    public async Task ATakeover_IsLoaded_WhileACountThatBlocksItsThreadRuns()
    {
        await FillAsync();
        using var release = new ManualResetEventSlim();
        var countStarted = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var blockedTheLoad = false;
        _farm.Provider = new InterceptedStoreProvider(new SqliteStoreProvider(), containerHook: (name, args, proceed) =>
        {
            if (name == nameof(IContainerDatabase.CountActiveAsync))
            {
                countStarted.TrySetResult();
                if (!release.Wait(TimeSpan.FromSeconds(10)))
                {
                    blockedTheLoad = true;
                }
            }
            return proceed();
        });
        await _farm.RestartAsync(crash: true);

        var queue = await _farm.QueueAsync("deep");
        await countStarted.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.InRange(queue.CachedMessageCount, 1, MostCached);
        Assert.False(blockedTheLoad, "the load waited for the count");
        release.Set();

        var head = await ReceiveAsync(queue, 5);
        Assert.False(blockedTheLoad, "the load waited for the count");
        Assert.Equal([1, 2, 3, 4, 5], head.Select(NumberOf));
        await CompleteAsync(queue, head);
        await Eventually.UntilAsync(() => queue.GetCounts().Active == Queued - 5, TimeSpan.FromSeconds(10), "the tail counted");
    }

    /// <summary>
    /// Completed messages do not stay behind in the lock-expiry and TTL heaps until their times
    /// come (a minute, or days): 1.8 GB was held after draining a million 1 KB messages (3,000 here);
    /// nor does a quiet queue keep what it completed (20 here): 15,000 queues at 1 msg/s each held
    /// every message of their last 17 minutes when 1,024 stale entries were allowed per queue.
    /// </summary>
    [Theory]
    [InlineData(3000)]
    [InlineData(20)]
    public async Task CompletedMessages_AreNotKeptByTheDueTimeHeaps(int count)
    {
        var queue = await FillAsync(new QueueSettings { DefaultMessageTimeToLive = TimeSpan.FromDays(1) }, count: count);

        await DrainAsync(queue, count);
        // The timer's sweeps: a queue with nothing due for a day is passed by, but swept at least every eighth tick.
        for (var tick = 0; tick <= QueueEntity.MaxSweepsSkipped; tick++)
        {
            queue.Sweep();
        }

        // Each heap keeps at most DueTimeSlack stale entries beyond twice its live ones (none are live here).
        Assert.InRange(queue.DueTimeEntries, 0, 3 * QueueEntity.DueTimeSlack);
    }

    /// <summary>
    /// A quiet queue (a message now and then, each received and completed) keeps no completed
    /// message in its due-time heaps, not even until the next sweep: once it holds no lock and no
    /// message, they are emptied with the completion. A stale entry kept the message and its payload
    /// alive long enough to be promoted by the GC (24,000 messages at 15,000 queues).
    /// </summary>
    [Fact]
    public async Task AQuietQueue_HoldsNoCompletedMessage_InItsDueTimeHeaps_RightAfterTheCompletion()
    {
        var queue = await _farm.CreateQueueAsync("quiet", new QueueSettings { DefaultMessageTimeToLive = TimeSpan.FromDays(1) });
        for (var n = 1; n <= 3; n++)
        {
            await queue.SendAsync([Numbered(n)]);
            var received = await ReceiveAsync(queue, 1);
            Assert.Equal(n, NumberOf(Assert.Single(received)));
            Assert.Equal(2, queue.DueTimeEntries);

            await CompleteAsync(queue, received);

            Assert.Equal(0, queue.DueTimeEntries);
        }
    }

    [Fact]
    public async Task DeepQueue_AbandonLockExpiryAndDefer_LoseNothing_AndKeepTheOrder()
    {
        var queue = await FillAsync(new QueueSettings { LockDuration = TimeSpan.FromSeconds(30) });
        var three = await ReceiveAsync(queue, 3);
        Assert.Equal([1, 2, 3], three.Select(NumberOf));

        await queue.SettleAsync(false, [new Settlement { LockToken = three[0].LockToken, Disposition = Disposition.Abandon }]);
        await queue.SettleAsync(false, [new Settlement { LockToken = three[1].LockToken, Disposition = Disposition.Defer }]);
        _farm.Time.Advance(TimeSpan.FromSeconds(31)); // the third's lock expires
        queue.Sweep();

        var again = await ReceiveAsync(queue, 2);
        Assert.Equal([1, 3], again.Select(NumberOf));
        Assert.All(again, m => Assert.Equal(2, m.DeliveryCount));
        await CompleteAsync(queue, again);

        var deferred = Assert.Single(await queue.ReceiveDeferredAsync([three[1].SequenceNumber], ReceiveMode.PeekLock));
        Assert.Equal(2, NumberOf(deferred));
        await CompleteAsync(queue, [deferred]);

        Assert.Equal(Enumerable.Range(4, Queued - 3), await DrainAsync(queue, Queued - 3));
    }

    [Fact]
    public async Task DeepQueue_Peek_WalksPastTheCache_InOrder_WithoutTakingAnything()
    {
        var queue = await FillAsync();

        Assert.Equal(Enumerable.Range(1, 100), (await queue.PeekAsync(false, 1, 100)).Select(NumberOf));
        Assert.Equal(Enumerable.Range(1500, 100), (await queue.PeekAsync(false, 1500, 100)).Select(NumberOf));
        Assert.Equal(Enumerable.Range(1991, 10), (await queue.PeekAsync(false, 1991, 100)).Select(NumberOf));
        Assert.Equal(Queued, queue.GetCounts().Active);
        Assert.InRange(queue.CachedMessageCount, 0, MostCached);
    }

    private static Message WithTimeToLive(Message message, TimeSpan timeToLive)
    {
        message.TimeToLive = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(timeToLive);
        return message;
    }

    [Fact]
    public async Task DeepQueue_ExpiringInTheDatabase_AreDeadLetteredWhenReadBack_AndTheDeadLetterQueuePagesToo()
    {
        var queue = await FillAsync(new QueueSettings { DefaultMessageTimeToLive = TimeSpan.FromMinutes(1), DeadLetteringOnMessageExpiration = true }, count: 500);
        _farm.Time.Advance(TimeSpan.FromMinutes(2));

        await Eventually.UntilAsync(async () =>
        {
            // Each receive finds only expired messages (dead-lettered as taken) and starts the next read-back.
            Assert.Empty(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 20, TimeSpan.Zero, CancellationToken.None));
            return queue.GetCounts().DeadLetter == 500;
        }, TimeSpan.FromSeconds(30), "every message dead-lettered");

        Assert.Equal(0, queue.GetCounts().Active);
        Assert.InRange(queue.CachedMessageCount, 0, MostCached);
        Assert.Equal(Enumerable.Range(1, 500), await DrainAsync(queue, 500, deadLetter: true));
    }

    /// <summary>
    /// Messages past the cache expire in the database on time, found through the expiry index, not
    /// when a receiver reaches them: here the cache is full of messages a receiver holds locked, so
    /// nothing is read back, and still every other message is dead-lettered within a few sweeps. The
    /// dead-letter queue then delivers them in order, the locked ones stay the receiver's. When the
    /// later messages expire first, each batch lands below what the dead-letter queue already took
    /// in: its frontier moves down rather than its memory growing.
    /// </summary>
    [Theory]
    [InlineData(true, false)]
    [InlineData(true, true)]
    [InlineData(false, false)]
    public async Task DeepQueue_ExpiringInTheDatabase_AreDeadLetteredOrDeletedWithoutAReceiver(bool deadLetterOnExpiry, bool laterExpireFirst)
    {
        var queue = await FillAsync(new QueueSettings
        {
            DefaultMessageTimeToLive = TimeSpan.FromMinutes(1),
            DeadLetteringOnMessageExpiration = deadLetterOnExpiry,
            LockDuration = QueueSettings.MaxLockDuration,
        }, numbered: laterExpireFirst ? n => WithTimeToLive(Numbered(n), TimeSpan.FromMilliseconds(60_000 - (10 * n))) : null);
        var locked = await ReceiveAsync(queue, 5);
        Assert.Equal([1, 2, 3, 4, 5], locked.Select(NumberOf));
        _farm.Time.Advance(TimeSpan.FromMinutes(2));

        // A bounded number of sweeps (well inside the locks' 5 minutes): a read-back could not do it in these.
        await _farm.SweepUntilAsync(() =>
        {
            Assert.InRange(queue.CachedMessageCount, 0, MostCached);
            var counts = queue.GetCounts();
            return counts.Active == 5 && counts.DeadLetter == (deadLetterOnExpiry ? Queued - 5 : 0);
        }, "every stored message expired");

        if (deadLetterOnExpiry)
        {
            Assert.Equal(Enumerable.Range(6, Queued - 5), await DrainAsync(queue, Queued - 5, deadLetter: true));
        }
        await CompleteAsync(queue, locked);
        Assert.Equal(0, queue.GetCounts().Total);
        Assert.Equal(0, queue.GetCounts().SizeInBytes);
    }
}
