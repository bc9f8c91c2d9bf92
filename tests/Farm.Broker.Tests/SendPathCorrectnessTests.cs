using Farm.Contracts;
using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.Contracts.V1;
using Google.Protobuf.WellKnownTypes;
using Microsoft.Data.Sqlite;
using static Farm.Broker.Tests.BrokerHarness;

namespace Farm.Broker.Tests;

/// <summary>
/// Promise 1 on the send path (issue 8, paths 1, 7, 10 and 14): a duplicate is acknowledged only
/// once its original is durable, sequence numbers never come back after a restart, duplicate
/// history is pruned, and a TTL of zero is refused. The races are driven by holding the container
/// file's SQLite write lock from the test, as another process could.
/// </summary>
public sealed class SendPathCorrectnessTests
{
    /// <summary>Holds the container database's write lock until disposed.</summary>
    private sealed class WriteLock(SqliteConnection connection) : IAsyncDisposable
    {
        public static async Task<WriteLock> TakeAsync(BrokerHarness farm) => new(await ContainerWriteLock.HoldAsync(farm.Node));

        public async ValueTask DisposeAsync() => await ContainerWriteLock.ReleaseAsync(connection);
    }

    private static QueueSettings Deduplicated => new() { RequiresDuplicateDetection = true, DuplicateDetectionHistoryTimeWindow = TimeSpan.FromMinutes(1) };

    [Fact]
    public async Task DuplicateSend_WaitsForItsOriginal_AndIsAcknowledgedAsADuplicateOnlyOnceTheOriginalCommitted()
    {
        await using var farm = await StartAsync();
        var queue = await farm.CreateQueueAsync("dq", Deduplicated);

        Task<long[]> original, duplicate;
        await using (await WriteLock.TakeAsync(farm))
        {
            original = queue.SendAsync([Text("first", "X")]);
            duplicate = queue.SendAsync([Text("again", "X")]);
            // Before the fix the duplicate returned at once, acknowledged while nothing was durable.
            Assert.False(duplicate.IsCompleted, "a duplicate was acknowledged before its original was durable");
        }

        Assert.True((await original)[0] > 0);
        Assert.Equal(0, (await duplicate)[0]);
        var stored = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default);
        Assert.Equal("first", Assert.Single(stored).Message.Body.ToStringUtf8());
    }

    [Fact]
    public async Task DuplicateSend_WhoseOriginalFails_StoresTheMessageItself()
    {
        await using var farm = await StartAsync();
        var queue = await farm.CreateQueueAsync("dq", Deduplicated);

        Task<long[]> duplicate;
        await using (await WriteLock.TakeAsync(farm))
        {
            var original = queue.SendAsync([Text("first", "X")]);
            duplicate = queue.SendAsync([Text("again", "X")]);
            Assert.False(duplicate.IsCompleted);
            // The lock outlasts the commit's busy timeout: the original fails for good.
            var failed = await Assert.ThrowsAsync<BrokerException>(() => original);
            Assert.Equal("STORE_UNAVAILABLE", FarmErrorNames.Of(failed.Code));
        }

        var sequence = (await duplicate)[0];
        Assert.True(sequence > 0, "the duplicate of a send that failed was dropped: nothing was stored");
        var stored = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default));
        Assert.Equal(("X", "again"), (stored.Message.MessageId, stored.Message.Body.ToStringUtf8()));
    }

    [Fact]
    public async Task DuplicateTopicSend_WaitsForItsOriginal_InBothOrderingModes()
    {
        await using var farm = await StartAsync();
        foreach (var ordered in new[] { true, false })
        {
            var name = ordered ? "ordered" : "unordered";
            var topic = await farm.CreateTopicAsync(name, new TopicSettings { SupportOrdering = ordered, RequiresDuplicateDetection = true, DuplicateDetectionHistoryTimeWindow = TimeSpan.FromMinutes(1) });
            var subscription = await farm.CreateSubscriptionAsync(name, "all");

            Task<long[]> original, duplicate;
            await using (await WriteLock.TakeAsync(farm))
            {
                original = topic.SendAsync([Text("first", "X")]);
                duplicate = topic.SendAsync([Text("again", "X")]);
                Assert.False(duplicate.IsCompleted, $"{name}: a duplicate was acknowledged before its original was durable");
            }

            Assert.True((await original)[0] > 0);
            Assert.Equal(0, (await duplicate)[0]);
            Assert.Single(await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default));
        }
    }

    [Fact]
    public async Task DuplicateTopicSend_WhoseOriginalFails_StoresTheMessageItself()
    {
        await using var farm = await StartAsync();
        var topic = await farm.CreateTopicAsync("t", new TopicSettings { RequiresDuplicateDetection = true, DuplicateDetectionHistoryTimeWindow = TimeSpan.FromMinutes(1) });
        var subscription = await farm.CreateSubscriptionAsync("t", "all");

        Task<long[]> duplicate;
        await using (await WriteLock.TakeAsync(farm))
        {
            var original = topic.SendAsync([Text("first", "X")]);
            duplicate = topic.SendAsync([Text("again", "X")]);
            await Assert.ThrowsAsync<BrokerException>(() => original);
        }

        Assert.True((await duplicate)[0] > 0);
        var stored = Assert.Single(await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default));
        Assert.Equal("again", stored.Message.Body.ToStringUtf8());
    }

    [Fact]
    public async Task SequenceNumbers_AreNotHandedOutAgainAfterARestart_WhenCommitsLandedOutOfOrder()
    {
        // The counter is written by each commit; written lower by a late commit, a restart after the
        // later messages were completed handed their numbers out again (for a topic, a leftover
        // subscription row then failed whole commit groups on the primary key).
        await using var farm = await StartAsync();
        var queue = await farm.CreateQueueAsync("q");
        var topic = await farm.CreateTopicAsync("t");
        var subscription = await farm.CreateSubscriptionAsync("t", "all");
        var queueSequences = (await queue.SendAsync([Text("a"), Text("b")])).ToList();
        var topicSequences = (await topic.SendAsync([Text("a"), Text("b")])).ToList();
        foreach (var message in await queue.ReceiveAsync(false, ReceiveMode.ReceiveAndDelete, 10, TimeSpan.Zero, default))
        {
            Assert.Contains(message.SequenceNumber, queueSequences);
        }
        // A late commit of an earlier send writes a lower counter, as it did when its commit was queued after a later one's.
        var container = farm.Node.Containers.Single();
        await container.Commits.CommitAsync(batch =>
        {
            batch.SequenceCounters[queue.Id] = 1;
            batch.SequenceCounters[topic.Id] = 1;
        });

        await farm.RestartAsync();
        queue = await farm.QueueAsync("q");
        topic = await farm.TopicAsync("t");
        var next = (await queue.SendAsync([Text("c")]))[0];
        var nextOnTopic = (await topic.SendAsync([Text("c")]))[0];

        Assert.True(next > queueSequences.Max(), $"sequence number {next} was handed out again");
        Assert.True(nextOnTopic > topicSequences.Max(), $"topic sequence number {nextOnTopic} was handed out again");
        subscription = await farm.SubscriptionAsync("t", "all");
        Assert.Equal(3, (await subscription.ReceiveAsync(false, ReceiveMode.PeekLock, 10, TimeSpan.Zero, default)).Count);
    }

    [Theory]
    [InlineData(0)]
    [InlineData(-5)]
    public async Task ATimeToLiveOfZeroOrLess_IsRefused_AndNothingIsStored(int seconds)
    {
        await using var farm = await StartAsync();
        var queue = await farm.CreateQueueAsync("q");
        var topic = await farm.CreateTopicAsync("t");
        await farm.CreateSubscriptionAsync("t", "all");
        var bad = Text("b");
        bad.TimeToLive = Duration.FromTimeSpan(TimeSpan.FromSeconds(seconds));

        var onQueue = await Assert.ThrowsAsync<BrokerException>(() => queue.SendAsync([Text("ok"), bad]));
        var onTopic = await Assert.ThrowsAsync<BrokerException>(() => topic.SendAsync([bad]));

        Assert.Equal(FarmErrorCode.InvalidArgument, onQueue.Code);
        Assert.Contains("Message 1: TimeToLive must be positive", onQueue.Message);
        Assert.Equal(FarmErrorCode.InvalidArgument, onTopic.Code);
        Assert.Equal(0, queue.GetCounts().Total);
        Assert.Equal(0, topic.GetCounts().Count);
    }

    [Fact]
    public async Task DuplicateHistory_PastItsWindow_IsPrunedFromTheDatabase()
    {
        // Nothing ever pruned it: the history grew without end, and every load read it all.
        await using var farm = await StartAsync();
        var queue = await farm.CreateQueueAsync("dq", Deduplicated);
        await queue.SendAsync([Text("a", "id-a"), Text("b", "id-b")]);
        Assert.Equal(2, await CountDuplicateRowsAsync(farm));

        await TestClock.AdvanceAndSettleAsync(farm.Time, Deduplicated.DuplicateDetectionHistoryTimeWindow + farm.Options.DuplicatePruneInterval + TimeSpan.FromSeconds(1));
        await queue.SendAsync([Text("c", "id-c")]);

        Assert.Equal(1, await CountDuplicateRowsAsync(farm));
    }

    private static async Task<long> CountDuplicateRowsAsync(BrokerHarness farm)
    {
        var container = await farm.Node.Farm.GetContainerAsync(1) ?? throw new InvalidOperationException("no container 1");
        var path = new SqliteConnectionStringBuilder(container.ConnectionString).DataSource;
        await using var connection = new SqliteConnection(new SqliteConnectionStringBuilder { DataSource = path, Pooling = false, Mode = SqliteOpenMode.ReadOnly }.ConnectionString);
        await connection.OpenAsync();
        await using var command = connection.CreateCommand();
        command.CommandText = "SELECT COUNT(*) FROM duplicates";
        return (long)(await command.ExecuteScalarAsync())!;
    }
}
