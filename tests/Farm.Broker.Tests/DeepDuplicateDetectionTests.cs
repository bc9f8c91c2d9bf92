using Farm.Broker.Entities;
using Farm.Broker.Topics;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// Duplicate detection with a memory budget of a few ids while thousands are in the window (issue
/// "Bounded memory"): an id that left memory is still found (through the filters and a lookup by
/// key), also after a crash, when only the newest ids are loaded back; a new id is stored; an id
/// whose window passed is stored again.
/// </summary>
public sealed class DeepDuplicateDetectionTests : IAsyncLifetime
{
    private const int InMemory = 16;
    private const int Sent = 600;
    private static readonly TimeSpan Window = TimeSpan.FromMinutes(10);
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync()
    {
        _farm = await BrokerHarness.StartAsync();
        _farm.Options.DuplicateIdsInMemoryPerEntity = InMemory;
    }

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static Message Id(int i, string body = "x") => BrokerHarness.Text(body, $"id-{i}");

    private async Task<QueueEntity> FillAsync()
    {
        var queue = await _farm.CreateQueueAsync("q", new QueueSettings { RequiresDuplicateDetection = true, DuplicateDetectionHistoryTimeWindow = Window });
        for (var i = 0; i < Sent; i += 50)
        {
            Assert.DoesNotContain(0L, await queue.SendAsync([.. Enumerable.Range(i, 50).Select(n => Id(n))]));
            queue.Sweep();
            Assert.InRange(queue.DuplicateIdsInMemory, 0, InMemory);
        }
        return queue;
    }

    [Fact]
    public async Task AnIdThatLeftMemory_IsStillADuplicate_AndNewIdsAreStored()
    {
        var queue = await FillAsync();

        // The oldest ids left memory long ago; a batch mixing them with new ones keeps only the new.
        var again = await queue.SendAsync([Id(0, "again"), Id(Sent + 1, "new"), Id(Sent / 2, "again"), Id(Sent - 1, "again")]);

        Assert.Equal(0, again[0]);
        Assert.NotEqual(0, again[1]);
        Assert.Equal(0, again[2]);
        Assert.Equal(0, again[3]);
        Assert.Equal(Sent + 1, queue.GetCounts().Active);
        Assert.InRange(queue.DuplicateIdsInMemory, 0, InMemory + 4);
    }

    [Fact]
    public async Task AfterACrash_OnlyTheNewestIdsAreLoaded_AndTheOlderOnesAreStillFound()
    {
        await FillAsync();
        await _farm.RestartAsync(crash: true);
        var queue = await _farm.QueueAsync("q");

        Assert.InRange(queue.DuplicateIdsInMemory, 0, InMemory);
        var again = await queue.SendAsync([Id(3, "again"), Id(Sent - 2, "again")]);
        Assert.Equal([0L, 0L], again);
        Assert.NotEqual(0, (await queue.SendAsync([Id(Sent + 5, "new")]))[0]);
        Assert.Equal(Sent + 1, queue.GetCounts().Active);
    }

    [Fact]
    public async Task AnIdWhoseWindowPassed_IsStoredAgain_EvenAfterItLeftMemory()
    {
        var queue = await FillAsync();

        _farm.Time.Advance(Window + TimeSpan.FromSeconds(1));
        queue.Sweep();

        Assert.NotEqual(0, (await queue.SendAsync([Id(0, "later")]))[0]);
        Assert.Equal(1, queue.DuplicateIdsInMemory);
    }

    [Fact]
    public async Task OnATopic_AnIdThatLeftMemory_IsStillADuplicate_AlsoAfterACrash()
    {
        var topic = await _farm.CreateTopicAsync("t", new TopicSettings { RequiresDuplicateDetection = true, DuplicateDetectionHistoryTimeWindow = Window });
        await _farm.CreateSubscriptionAsync("t", "all");
        for (var i = 0; i < Sent; i += 50)
        {
            Assert.DoesNotContain(0L, await topic.SendAsync([.. Enumerable.Range(i, 50).Select(n => Id(n))]));
            topic.Sweep();
            Assert.InRange(topic.DuplicateIdsInMemory, 0, InMemory);
        }
        var again = await topic.SendAsync([Id(1, "again")]);
        Assert.Equal([0L], again);

        await _farm.RestartAsync(crash: true);
        topic = await _farm.TopicAsync("t");

        again = await topic.SendAsync([Id(2, "again"), Id(Sent - 1, "again")]);
        Assert.Equal([0L, 0L], again);
        Assert.Equal(Sent, (await _farm.SubscriptionAsync("t", "all")).GetCounts().Active);
    }
}
