using Farm.ContainerStore.Containers;
using static Farm.ContainerStore.Tests.Contracts.ContainerDatabaseContract;

namespace Farm.ContainerStore.Tests.Contracts;

/// <summary>
/// Subscriptions that follow their topic without rows of their own (container schema version 7):
/// what a commit writes for them and what a load reads back, the same in every store that keeps
/// followers. A provider's test class derives from this and says how to make a fresh database.
/// </summary>
public abstract class FollowerStoreContract : IAsyncLifetime
{
    private const long Topic = 1;
    private const long First = 2;
    private const long Second = 3;

    private IContainerDatabase _database = null!;

    protected abstract IStoreProvider Provider { get; }

    /// <summary>A connection string of a container database that only the current test uses.</summary>
    protected abstract Task<string> NewContainerConnectionStringAsync();

    public virtual async Task InitializeAsync()
    {
        _database = await Provider.OpenContainerAsync(await NewContainerConnectionStringAsync());
        Assert.True(await _database.RaiseEpochAsync(1));
        Assert.True(_database.FollowsTopics);
    }

    public virtual async Task DisposeAsync() => await _database.DisposeAsync();

    [StoreFact]
    public async Task AFollowersImplicitMessages_AreItsTopicsCopiesNamingItsSlot_AfterItsDoneMark_LessItsRowsAndTombstones()
    {
        // Slot 0 follows from 1, slot 1 from 3 (it took its slot later).
        await CommitAsync(b =>
        {
            b.Followers[First] = (0, 1);
            b.Followers[Second] = (1, 3);
            b.Inserts.Add(Copy(1, 0, 1));
            b.Inserts.Add(Copy(2, 0));
            b.Inserts.Add(Copy(3, 1));
            b.Inserts.Add(Copy(4, 0, 1));
            b.Inserts.Add(Copy(5, 0, 1));
            b.Inserts.Add(Copy(6, 0, 1));
        });
        // The first follower: 1 settled by its done mark, 4 deferred (its first write makes its row),
        // 5 completed above the mark (a tombstone).
        await CommitAsync(b =>
        {
            b.DoneThrough[First] = 1;
            b.Updates.Add(Deferred(First, 4));
            b.Tombstones.Add(new MessageKey(First, 5));
        });

        var first = await _database.LoadEntityHeadAsync(First, 0, long.MaxValue, copiesOf: Topic);
        Assert.Equal(new FollowerState(0, 1, 1), first.Follower);
        Assert.Equal([2L, 4, 6], first.Messages.Select(m => m.SequenceNumber));
        Assert.Equal([true, false, true], first.Messages.Select(m => m.Implicit));
        Assert.Equal(StoredMessageState.Deferred, first.Messages[1].State);
        // Every message comes with its copy's payload.
        Assert.All(first.Messages, m => Assert.Equal(Copy(m.SequenceNumber).Payload, m.Payload));
        Assert.Equal(7, first.NextSequenceNumber);

        var second = await _database.LoadEntityHeadAsync(Second, 0, long.MaxValue, copiesOf: Topic);
        Assert.Equal([3L, 4, 5, 6], second.Messages.Select(m => m.SequenceNumber));
        Assert.All(second.Messages, m => Assert.True(m.Implicit));
        Assert.All(second.Messages, m => Assert.Equal(StoredMessageState.Active, m.State));

        // Peek and paged reads see rows only: a tombstone is never one of them.
        Assert.Equal([4L], (await _database.ReadFromAsync(First, SubQueue.Main, 0, 100, long.MaxValue, Topic)).Select(m => m.SequenceNumber));
        Assert.Empty(await _database.ReadByKeyAsync(First, [5], Topic));
    }

    [StoreFact]
    public async Task TheDoneMark_NeverGoesBack_AndTakesTheTombstonesItPasses()
    {
        await CommitAsync(b =>
        {
            b.Followers[First] = (0, 1);
            for (var sequence = 1; sequence <= 4; sequence++)
            {
                b.Inserts.Add(Copy(sequence, 0));
            }
            b.Tombstones.Add(new MessageKey(First, 2));
            b.Tombstones.Add(new MessageKey(First, 4));
            b.DoneThrough[First] = 2;
        });
        await CommitAsync(b => b.DoneThrough[First] = 1);

        var load = await _database.LoadEntityHeadAsync(First, 0, long.MaxValue, copiesOf: Topic);
        Assert.Equal(2, load.Follower!.DoneThrough);
        Assert.Equal([3L], load.Messages.Select(m => m.SequenceNumber));

        // The tombstone at 2 went with the mark; the one at 4 stays and still hides its message.
        await CommitAsync(b => b.Updates.Add(Deferred(First, 2)));
        load = await _database.LoadEntityHeadAsync(First, 0, long.MaxValue, copiesOf: Topic);
        Assert.Equal([2L, 3], load.Messages.Select(m => m.SequenceNumber));
        Assert.False(load.Messages[0].Implicit);
    }

    [StoreFact]
    public async Task AnUpdate_InsertsTheImplicitMessagesRow_OnlyWhereItHasNone_AndARowThatMustExistStillDoes()
    {
        await CommitAsync(b =>
        {
            b.Followers[First] = (0, 1);
            b.Inserts.Add(Copy(1, 0));
        });
        // Two writes of one implicit message in one commit: the first makes the row, the second updates it.
        await CommitAsync(b =>
        {
            b.Updates.Add(Deferred(First, 1) with { DeliveryCount = 2, DeliveryCountOnly = true, State = StoredMessageState.Active });
            b.Updates.Add(Deferred(First, 1) with { DeliveryCount = 3 });
        });
        var row = Assert.Single((await _database.LoadEntityHeadAsync(First, 0, long.MaxValue, copiesOf: Topic)).Messages);
        Assert.False(row.Implicit);
        Assert.Equal((StoredMessageState.Deferred, 3), (row.State, row.DeliveryCount));

        await Assert.ThrowsAsync<MissingRowException>(() => CommitAsync(b => b.Updates.Add(Deferred(First, 9) with { InsertIfMissing = null })));
    }

    [StoreFact]
    public async Task AQuietHead_IsAFollowerWithNoMembershipPastItsDoneMark_AndCarriesItsSlot()
    {
        await CommitAsync(b =>
        {
            b.Followers[First] = (0, 1);
            b.Followers[Second] = (1, 1);
            b.Inserts.Add(Copy(1, 0, 1));
            b.DoneThrough[First] = 1;
        });

        var quiet = await _database.LoadQuietHeadsAsync([First, Second], 0, copiesOf: Topic);
        var first = Assert.Single(quiet);
        Assert.Equal(First, first.EntityId);
        Assert.Equal(new FollowerState(0, 1, 1), first.Follower);
    }

    [StoreFact]
    public async Task TheCopyScan_ReadsEachCopysMembership_TombstonesPointAtNothing_AndACopyDeleteTakesItsMembership()
    {
        await CommitAsync(b =>
        {
            b.Followers[First] = (0, 1);
            b.Inserts.Add(Copy(1, 0));
            b.Inserts.Add(Copy(2, 0));
            b.Inserts.Add(Message(Topic, 3));
            b.Tombstones.Add(new MessageKey(First, 2));
            b.Inserts.Add(Message(Second, 3) with { Payload = null });
        });

        var scan = await _database.ScanCopiesAsync(Topic, [First, Second], 0, 3, 100, []);
        Assert.Equal([1L, 2], scan.Unreferenced.Select(c => c.SequenceNumber));
        Assert.All(scan.Unreferenced, c => Assert.True(FollowerState.IsMember(c.Members, 0)));

        await CommitAsync(b => b.CopyDeletes.Add(new MessageKey(Topic, 1)));
        var load = await _database.LoadEntityHeadAsync(First, 0, long.MaxValue, copiesOf: Topic);
        Assert.Empty(load.Messages);
        var rescan = await _database.ScanCopiesAsync(Topic, [First, Second], 0, 3, 100, [1]);
        Assert.Equal([2L], rescan.Unreferenced.Select(c => c.SequenceNumber));
    }

    [StoreFact]
    public async Task AHeadLoadPastTheBudget_ReadsTheRowsUpToTheLastImplicitMessage_AndTheTailStartsAfterIt()
    {
        await CommitAsync(b =>
        {
            b.Followers[First] = (0, 1);
            b.Inserts.Add(Message(First, 1));
            b.Inserts.Add(Message(First, 2));
            b.Inserts.Add(Copy(3, 0, 1));
            b.Inserts.Add(Message(First, 4));
        });

        // A budget of one message: rows 1 and 2 still come, up to the implicit 3; row 4 is the tail.
        var load = await _database.LoadEntityHeadAsync(First, 0, cacheBytes: 16, copiesOf: Topic);
        Assert.Equal([1L, 2, 3], load.Messages.Select(m => m.SequenceNumber));
        var tail = load.Tails!.Single(t => t.SubQueue == SubQueue.Main);
        Assert.Equal(3, tail.AfterSequence);
        Assert.Equal(4, tail.ThroughSequence);
    }

    private Task CommitAsync(Action<ContainerWriteBatch> fill)
    {
        var batch = new ContainerWriteBatch();
        fill(batch);
        return _database.CommitAsync(1, batch);
    }

    /// <summary>The topic's copy of <paramref name="sequenceNumber"/>, naming <paramref name="slots"/>.</summary>
    private static MessageRecord Copy(long sequenceNumber, params int[] slots)
    {
        var members = new byte[1];
        foreach (var slot in slots)
        {
            members[slot / 8] |= (byte)(1 << (slot % 8));
        }
        return Message(Topic, sequenceNumber) with { Members = slots.Length > 0 ? members : null };
    }

    /// <summary>A deferral of an implicit message: its row, with the copy's columns, if it has none.</summary>
    private static MessageUpdate Deferred(long entityId, long sequenceNumber) =>
        new(entityId, sequenceNumber, SubQueue.Main, StoredMessageState.Deferred, 1, null, null, null, null)
        {
            InsertIfMissing = Message(entityId, sequenceNumber) with { Payload = null, State = StoredMessageState.Deferred, DeliveryCount = 1 },
        };
}
