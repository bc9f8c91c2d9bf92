using Farm.ContainerStore.Containers;

namespace Farm.ContainerStore.Tests.Contracts;

/// <summary>
/// What every provider's container database must do. A provider's test class derives from this
/// and says how to make a fresh, empty database for one test.
/// </summary>
public abstract class ContainerDatabaseContract : IAsyncLifetime
{
    private const long Entity = 7;
    private const long OtherEntity = 8;

    private readonly List<IContainerDatabase> _opened = [];
    private string? _connectionString;

    protected abstract IStoreProvider Provider { get; }

    /// <summary>A connection string of a container database that only the current test uses.</summary>
    protected abstract Task<string> NewContainerConnectionStringAsync();

    public virtual Task InitializeAsync() => Task.CompletedTask;

    public virtual async Task DisposeAsync()
    {
        foreach (var database in _opened)
        {
            await database.DisposeAsync();
        }
    }

    [StoreFact]
    public async Task Open_NewDatabase_StartsAtEpochZeroAndEmpty()
    {
        var database = await OpenAsync();

        Assert.Equal(0, await database.ReadEpochAsync());
        var load = await database.LoadEntityAsync(Entity, nowMs: 0);
        Assert.Equal(1, load.NextSequenceNumber);
        Assert.Empty(load.Messages);
        Assert.Empty(load.DuplicateHistory);
    }

    [StoreFact]
    public async Task Open_Twice_MigratesOnceAndKeepsData()
    {
        var first = await OpenAsync();
        Assert.True(await first.RaiseEpochAsync(3));
        await CommitAsync(first, 3, b => b.Inserts.Add(Message(Entity, 1)));
        await first.DisposeAsync();

        var second = await OpenAsync();
        var third = await OpenAsync();

        Assert.Equal(3, await second.ReadEpochAsync());
        Assert.Equal(3, await third.ReadEpochAsync());
        Assert.Single((await third.LoadEntityAsync(Entity, 0)).Messages);
    }

    [StoreFact]
    public async Task Commit_WithCurrentEpoch_PersistsInsertsCountersAndDuplicatesAcrossReopen()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        var full = Message(Entity, 2) with
        {
            State = StoredMessageState.Scheduled,
            DeliveryCount = 3,
            ScheduledAtMs = 5_000,
            ExpiresAtMs = 9_000,
            MessageId = "m-2",
        };
        var deadLettered = Message(Entity, 1) with
        {
            SubQueue = SubQueue.DeadLetter,
            DeadLetterReason = "MaxDeliveryCountExceeded",
            DeadLetterDescription = "too many deliveries",
            DeadLetterSource = "orders",
        };
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.AddRange([Message(Entity, 3), full, deadLettered, Message(OtherEntity, 1)]);
            b.SequenceCounters[Entity] = 4;
            b.SequenceCounters[OtherEntity] = 2;
            b.Duplicates.Add(new DuplicateRecord(Entity, "m-2", ExpiresAtMs: 10_000));
        });

        var load = await (await ReopenAsync(database)).LoadEntityAsync(Entity, nowMs: 1_000);

        Assert.Equal(4, load.NextSequenceNumber);
        // Ordered by sub-queue, then sequence number.
        Assert.Equal([2L, 3L, 1L], load.Messages.Select(m => m.SequenceNumber));
        Assert.Equal(full with { Payload = null }, load.Messages[0] with { Payload = null });
        Assert.Equal(full.Payload, load.Messages[0].Payload);
        Assert.Equal(full.Payload!.Length, load.Messages[0].PayloadSize);
        Assert.Equal(deadLettered with { Payload = null }, load.Messages[2] with { Payload = null });
        Assert.Equal([new DuplicateRecord(Entity, "m-2", 10_000)], load.DuplicateHistory);
    }

    [StoreFact]
    public async Task Commit_UpdatesAndDeletes_PersistAcrossReopen()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.AddRange([Message(Entity, 1), Message(Entity, 2), Message(Entity, 3)]));

        var newPayload = new byte[] { 9, 9, 9 };
        await CommitAsync(database, 1, b =>
        {
            // Payload null keeps the stored payload.
            b.Updates.Add(new MessageUpdate(Entity, 1, SubQueue.DeadLetter, StoredMessageState.Active, 10, "reason", "description", "source", Payload: null));
            b.Updates.Add(new MessageUpdate(Entity, 2, SubQueue.Main, StoredMessageState.Deferred, 1, null, null, null, newPayload));
            b.Deletes.Add(new MessageKey(Entity, 3));
        });

        var messages = (await (await ReopenAsync(database)).LoadEntityAsync(Entity, 0)).Messages;

        Assert.Equal([2L, 1L], messages.Select(m => m.SequenceNumber));
        var deferred = messages[0];
        Assert.Equal((StoredMessageState.Deferred, 1, newPayload.Length), (deferred.State, deferred.DeliveryCount, deferred.PayloadSize));
        Assert.Equal(newPayload, deferred.Payload);
        var deadLettered = messages[1];
        Assert.Equal(
            (SubQueue.DeadLetter, 10, "reason", "description", "source"),
            (deadLettered.SubQueue, deadLettered.DeliveryCount, deadLettered.DeadLetterReason, deadLettered.DeadLetterDescription, deadLettered.DeadLetterSource));
        Assert.Equal(Message(Entity, 1).Payload, deadLettered.Payload);
    }

    [StoreFact]
    public async Task Commit_WithPurge_RemovesOnlyThatEntitysMessagesCounterAndDuplicates()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.AddRange([Message(Entity, 1), Message(Entity, 2), Message(OtherEntity, 1)]);
            b.SequenceCounters[Entity] = 3;
            b.SequenceCounters[OtherEntity] = 2;
            b.Duplicates.Add(new DuplicateRecord(Entity, "a", 10_000));
            b.Duplicates.Add(new DuplicateRecord(OtherEntity, "a", 10_000));
        });

        // Entity ids are never reused, so a write of a purged entity in the same batch is one that
        // raced its delete (a send committing with the delete): purges apply last and take it too.
        await CommitAsync(database, 1, b =>
        {
            b.PurgedEntities.Add(Entity);
            b.Inserts.Add(Message(Entity, 5));
            b.SequenceCounters[Entity] = 6;
            b.Duplicates.Add(new DuplicateRecord(Entity, "b", 10_000));
        });

        var reopened = await ReopenAsync(database);
        var purged = await reopened.LoadEntityAsync(Entity, 0);
        Assert.Equal(1, purged.NextSequenceNumber);
        Assert.Empty(purged.Messages);
        Assert.Empty(purged.DuplicateHistory);

        var other = await reopened.LoadEntityAsync(OtherEntity, 0);
        Assert.Equal(2, other.NextSequenceNumber);
        Assert.Single(other.Messages);
        Assert.Single(other.DuplicateHistory);
    }

    [StoreFact]
    public async Task Commit_DeliveryMark_NeverGoesBackwards_LoadsWithTheRows_AndGoesWithAPurge()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        Assert.Equal(0, (await database.LoadEntityAsync(Entity, 0)).DeliveredThrough);
        // A subscription has no counter: its first mark makes its state row with the counter a new entity starts from.
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.AddRange([Message(Entity, 1), Message(Entity, 2), Message(OtherEntity, 1)]);
            b.DeliveryMarks[Entity] = 2;
        });
        await CommitAsync(database, 1, b => b.DeliveryMarks[Entity] = 1);
        await CommitAsync(database, 1, b =>
        {
            b.SequenceCounters[OtherEntity] = 5;
            b.DeliveryMarks[OtherEntity] = 1;
        });

        var reopened = await ReopenAsync(database);
        var load = await reopened.LoadEntityAsync(Entity, 0);
        Assert.Equal(2, load.DeliveredThrough);
        Assert.Equal(1, load.NextSequenceNumber);
        // The rows are as stored; the mark is what reads them.
        Assert.All(load.Messages, m => Assert.Equal(0, m.DeliveryCount));
        Assert.All(load.Messages, m => Assert.Equal(1, m.DeliveryCountUnder(load.DeliveredThrough)));
        var head = await reopened.LoadEntityHeadAsync(Entity, 0, cacheBytes: 1 << 20);
        Assert.Equal(2, head.DeliveredThrough);
        var other = await reopened.LoadEntityHeadAsync(OtherEntity, 0, cacheBytes: 1 << 20);
        Assert.Equal((1L, 5L), (other.DeliveredThrough, other.NextSequenceNumber));

        // A mark written for an entity deleted in the same batch, or before, does not bring its state back.
        await CommitAsync(reopened, 1, b =>
        {
            b.PurgedEntities.Add(Entity);
            b.DeliveryMarks[Entity] = 9;
        });
        await CommitAsync(reopened, 1, b => b.DeliveryMarks[Entity] = 10);
        Assert.Equal(0, (await (await ReopenAsync(reopened)).LoadEntityAsync(Entity, 0)).DeliveredThrough);
    }

    [StoreFact]
    public void DeliveryCountUnder_CountsOnlyNeverScheduledMainQueueRowsAtOrBelowTheMark()
    {
        var plain = Message(Entity, 5);
        Assert.Equal(1, plain.DeliveryCountUnder(5));
        Assert.Equal(0, plain.DeliveryCountUnder(4));
        Assert.Equal(3, (plain with { DeliveryCount = 3 }).DeliveryCountUnder(5));
        Assert.Equal(0, (plain with { ScheduledAtMs = 1_000 }).DeliveryCountUnder(5));
        Assert.Equal(0, (plain with { SubQueue = SubQueue.DeadLetter }).DeliveryCountUnder(5));
    }

    [StoreFact]
    public async Task Commit_SequenceCounter_NeverGoesBackwards()
    {
        // Two sends' commits can land out of order (numbers taken under the entity's lock, commits
        // queued after it): counter 13 then 12. Lowering it would hand 12 out again after a restart.
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.SequenceCounters[Entity] = 13);
        await CommitAsync(database, 1, b => b.SequenceCounters[Entity] = 12);

        var reopened = await ReopenAsync(database);
        Assert.Equal(13, (await reopened.LoadEntityAsync(Entity, 0)).NextSequenceNumber);
    }

    [StoreFact]
    public async Task Commit_WithStaleEpoch_ThrowsAndWritesNothing()
    {
        var database = await OpenOwnedAsync(epoch: 2);
        await CommitAsync(database, 2, b => b.Inserts.Add(Message(Entity, 1)));

        var error = await Assert.ThrowsAsync<StaleEpochException>(() => CommitAsync(database, 1, b =>
        {
            b.Inserts.Add(Message(Entity, 2));
            b.Deletes.Add(new MessageKey(Entity, 1));
            b.SequenceCounters[Entity] = 3;
            b.Duplicates.Add(new DuplicateRecord(Entity, "x", 10_000));
        }));

        Assert.Equal((1, 2), (error.ExpectedEpoch, error.ActualEpoch));
        var load = await (await ReopenAsync(database)).LoadEntityAsync(Entity, 0);
        Assert.Equal([1L], load.Messages.Select(m => m.SequenceNumber));
        Assert.Equal(1, load.NextSequenceNumber);
        Assert.Empty(load.DuplicateHistory);
    }

    /// <summary>
    /// The group commit's way to commit: back once committed, with a task for when it is on disk.
    /// Commits made one after another without waiting for that task are all there, in order, and
    /// every such task completes.
    /// </summary>
    [StoreFact]
    public async Task CommitBeforeDurable_IsSeenAtOnce_AndItsDurableTaskCompletes_ForCommitsThatDidNotWait()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        var durable = new List<Task>();
        for (var sequence = 1L; sequence <= 50; sequence++)
        {
            var batch = new ContainerWriteBatch();
            batch.Inserts.Add(Message(Entity, sequence));
            batch.SequenceCounters[Entity] = sequence + 1;
            durable.Add(await database.CommitBeforeDurableAsync(1, batch));
            Assert.Equal(sequence, (await database.LoadEntityAsync(Entity, 0)).Messages.Count);
        }

        await Task.WhenAll(durable).WaitAsync(TimeSpan.FromSeconds(30));
        var load = await (await ReopenAsync(database)).LoadEntityAsync(Entity, 0);
        Assert.Equal(Enumerable.Range(1, 50).Select(i => (long)i), load.Messages.Select(m => m.SequenceNumber));
        Assert.Equal(51, load.NextSequenceNumber);
    }

    [StoreFact]
    public async Task CommitBeforeDurable_WithStaleEpoch_ThrowsAndWritesNothing()
    {
        var database = await OpenOwnedAsync(epoch: 2);
        var batch = new ContainerWriteBatch();
        batch.Inserts.Add(Message(Entity, 1));

        await Assert.ThrowsAsync<StaleEpochException>(() => database.CommitBeforeDurableAsync(1, batch));

        Assert.Empty((await (await ReopenAsync(database)).LoadEntityAsync(Entity, 0)).Messages);
    }

    [StoreFact]
    public async Task Commit_ByFormerOwner_AfterNewOwnerRaisedEpoch_ThrowsStaleEpoch()
    {
        var formerOwner = await OpenOwnedAsync(epoch: 1);
        var newOwner = await OpenAsync();
        Assert.True(await newOwner.RaiseEpochAsync(2));

        await Assert.ThrowsAsync<StaleEpochException>(() => CommitAsync(formerOwner, 1, b => b.Inserts.Add(Message(Entity, 1))));
        await CommitAsync(newOwner, 2, b => b.Inserts.Add(Message(Entity, 1)));

        Assert.Single((await formerOwner.LoadEntityAsync(Entity, 0)).Messages);
    }

    [StoreFact]
    public async Task Commit_WithDuplicatePrimaryKeyInBatch_FailsWhole()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.Add(Message(Entity, 1)));

        await Assert.ThrowsAnyAsync<Exception>(() => CommitAsync(database, 1, b =>
        {
            b.Inserts.Add(Message(Entity, 2));
            b.Inserts.Add(Message(Entity, 2));
            b.SequenceCounters[Entity] = 3;
            b.Duplicates.Add(new DuplicateRecord(Entity, "x", 10_000));
        }));

        var load = await database.LoadEntityAsync(Entity, 0);
        Assert.Equal([1L], load.Messages.Select(m => m.SequenceNumber));
        Assert.Equal(1, load.NextSequenceNumber);
        Assert.Empty(load.DuplicateHistory);

        // The failed batch leaves the writer usable.
        await CommitAsync(database, 1, b => b.Inserts.Add(Message(Entity, 2)));
        Assert.Equal(2, (await database.LoadEntityAsync(Entity, 0)).Messages.Count);
    }

    [StoreFact]
    public async Task RaiseEpoch_ToLowerEpoch_IsRefusedAndChangesNothing()
    {
        var database = await OpenOwnedAsync(epoch: 5);

        Assert.False(await database.RaiseEpochAsync(4));
        Assert.Equal(5, await database.ReadEpochAsync());
    }

    [StoreFact]
    public async Task RaiseEpoch_ToHigherOrSameEpoch_Succeeds()
    {
        var database = await OpenAsync();

        Assert.True(await database.RaiseEpochAsync(5));
        Assert.True(await database.RaiseEpochAsync(5));
        Assert.True(await database.RaiseEpochAsync(6));
        Assert.Equal(6, await (await ReopenAsync(database)).ReadEpochAsync());
    }

    [StoreFact]
    public async Task LoadEntity_ReturnsOnlyDuplicatesNotYetExpired()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            b.Duplicates.Add(new DuplicateRecord(Entity, "old", 1_000));
            b.Duplicates.Add(new DuplicateRecord(Entity, "new", 3_000));
        });

        var load = await database.LoadEntityAsync(Entity, nowMs: 2_000);

        Assert.Equal([new DuplicateRecord(Entity, "new", 3_000)], load.DuplicateHistory);
    }

    [StoreFact]
    public async Task Commit_DuplicateSeenAgain_ExtendsItsExpiry()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Duplicates.Add(new DuplicateRecord(Entity, "m", 1_000)));
        await CommitAsync(database, 1, b => b.Duplicates.Add(new DuplicateRecord(Entity, "m", 5_000)));

        var load = await database.LoadEntityAsync(Entity, nowMs: 2_000);

        Assert.Equal([new DuplicateRecord(Entity, "m", 5_000)], load.DuplicateHistory);
    }

    [StoreFact]
    public async Task Commit_WithPruneBefore_DropsOlderDuplicateHistory()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            b.Duplicates.Add(new DuplicateRecord(Entity, "old", 1_000));
            b.Duplicates.Add(new DuplicateRecord(OtherEntity, "old", 1_500));
            b.Duplicates.Add(new DuplicateRecord(Entity, "new", 3_000));
        });

        await CommitAsync(database, 1, b => b.PruneDuplicatesBeforeMs = 2_000);

        // nowMs 0 shows everything still stored, expired or not.
        Assert.Equal(["new"], (await database.LoadEntityAsync(Entity, nowMs: 0)).DuplicateHistory.Select(d => d.MessageId));
        Assert.Empty((await database.LoadEntityAsync(OtherEntity, nowMs: 0)).DuplicateHistory);
    }

    [StoreFact]
    public async Task SendRecords_CommitWithTheirMessages_AreFoundByKeyAfterReopen_WithinTheWindowOnly()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.Add(Message(Entity, 1));
            b.Inserts.Add(Message(Entity, 2));
            b.Sends.Add(new SendRecord("producer-a", 7, Entity, [1, 0, 2], AtMs: 5_000));
            b.Sends.Add(new SendRecord("producer-b", 7, OtherEntity, [9], AtMs: 6_000));
        });

        var reopened = await ReopenAsync(database);
        var found = await reopened.FindSendRecordAsync("producer-a", 7, sinceMs: 5_000);
        Assert.NotNull(found);
        Assert.Equal(("producer-a", 7L, Entity, 5_000L), (found.ProducerId, found.SendId, found.EntityId, found.AtMs));
        Assert.Equal([1L, 0, 2], found.SequenceNumbers);
        Assert.Equal(new long[] { 9 }, (await reopened.FindSendRecordAsync("producer-b", 7, sinceMs: 0))!.SequenceNumbers);
        // Another send id, another producer, or a record older than asked for: none.
        Assert.Null(await reopened.FindSendRecordAsync("producer-a", 8, sinceMs: 0));
        Assert.Null(await reopened.FindSendRecordAsync("producer-c", 7, sinceMs: 0));
        Assert.Null(await reopened.FindSendRecordAsync("producer-a", 7, sinceMs: 5_001));
    }

    /// <summary>A forwarder's messages, each recorded under its source's sequence number: found in one read, the missing left out.</summary>
    [StoreFact]
    public async Task SendRecords_OfOneProducer_AreFoundByTheirIdsInOneRead_WithinTheWindowOnly()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.Add(Message(Entity, 1));
            b.Inserts.Add(Message(Entity, 2));
            b.Sends.Add(new SendRecord("farm.forward/9/main", 11, Entity, [1], AtMs: 5_000));
            b.Sends.Add(new SendRecord("farm.forward/9/main", 12, Entity, [2], AtMs: 6_000));
            b.Sends.Add(new SendRecord("farm.forward/9/dead-letter", 13, Entity, [3], AtMs: 6_000));
        });

        var reopened = await ReopenAsync(database);
        var found = await reopened.FindSendRecordsAsync("farm.forward/9/main", [10, 11, 12, 13], sinceMs: 0);
        Assert.Equal([(11L, 1L), (12L, 2L)], found.Select(r => (r.SendId, r.SequenceNumbers.Single())).OrderBy(r => r.Item1));
        Assert.All(found, r => Assert.Equal(("farm.forward/9/main", Entity), (r.ProducerId, r.EntityId)));
        Assert.Equal([12L], (await reopened.FindSendRecordsAsync("farm.forward/9/main", [11, 12], sinceMs: 5_001)).Select(r => r.SendId));
        Assert.Empty(await reopened.FindSendRecordsAsync("farm.forward/9/main", [], sinceMs: 0));
    }

    /// <summary>
    /// When the newest record of the forwarders (a producer id prefix) was made: a new owner of the
    /// container reads every forwarded send's records until that is out of the window. A client's
    /// newer record does not count; with no forwarder's record there is none.
    /// </summary>
    [StoreFact]
    public async Task TheNewestSendRecord_OfProducersWithAPrefix_IsFound_OthersLeftOut()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        Assert.Null(await database.NewestSendRecordAtMsAsync("farm.forward/"));
        await CommitAsync(database, 1, b =>
        {
            b.Sends.Add(new SendRecord("farm.forward/9/main", 11, Entity, [1], AtMs: 5_000));
            b.Sends.Add(new SendRecord("farm.forward/8/dead-letter", 2, Entity, [2], AtMs: 7_000));
            b.Sends.Add(new SendRecord("farm.forward/9/main", 12, Entity, [3], AtMs: 6_000));
            b.Sends.Add(new SendRecord("client-farm.forward/", 1, Entity, [4], AtMs: 9_000));
            b.Sends.Add(new SendRecord("farm.forwarder", 1, Entity, [5], AtMs: 9_500));
        });

        var reopened = await ReopenAsync(database);
        Assert.Equal(7_000L, await reopened.NewestSendRecordAtMsAsync("farm.forward/"));
        Assert.Equal(9_000L, await reopened.NewestSendRecordAtMsAsync("client-"));
        Assert.Null(await reopened.NewestSendRecordAtMsAsync("nobody/"));
    }

    [StoreFact]
    public async Task SendRecords_AreWrittenOnlyByACommitThatSucceeds_KeepTheFirstRecordOfAPair_AndArePrunedByTime()
    {
        var formerOwner = await OpenOwnedAsync(epoch: 1);
        var database = await OpenAsync();
        Assert.True(await database.RaiseEpochAsync(2));

        // A former owner's commit is fenced: its record is not written either.
        await Assert.ThrowsAsync<StaleEpochException>(() => CommitAsync(formerOwner, 1, b =>
        {
            b.Inserts.Add(Message(Entity, 1));
            b.Sends.Add(new SendRecord("producer-a", 1, Entity, [1], AtMs: 1_000));
        }));
        Assert.Null(await database.FindSendRecordAsync("producer-a", 1, sinceMs: 0));

        await CommitAsync(database, 2, b =>
        {
            b.Sends.Add(new SendRecord("producer-a", 1, Entity, [1], AtMs: 1_000));
            b.Sends.Add(new SendRecord("producer-a", 1, Entity, [5], AtMs: 1_000));
            b.Sends.Add(new SendRecord("producer-a", 2, Entity, [2], AtMs: 3_000));
        });
        await CommitAsync(database, 2, b => b.Sends.Add(new SendRecord("producer-a", 2, Entity, [6], AtMs: 3_500)));
        Assert.Equal(new long[] { 1 }, (await database.FindSendRecordAsync("producer-a", 1, sinceMs: 0))!.SequenceNumbers);
        Assert.Equal(new long[] { 2 }, (await database.FindSendRecordAsync("producer-a", 2, sinceMs: 0))!.SequenceNumbers);

        await CommitAsync(database, 2, b => b.PruneSendsBeforeMs = 2_000);

        Assert.Null(await database.FindSendRecordAsync("producer-a", 1, sinceMs: 0));
        Assert.NotNull(await database.FindSendRecordAsync("producer-a", 2, sinceMs: 0));
    }

    [StoreFact]
    public async Task ReadPayloads_ReturnsRequestedPayloadsAndSkipsMissingMessages()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.AddRange([Message(Entity, 1), Message(Entity, 2), Message(Entity, 3), Message(OtherEntity, 4)]));

        var payloads = await database.ReadPayloadsAsync(Entity, [1, 3, 4, 99]);

        Assert.Equal([1L, 3L], payloads.Keys.Order());
        Assert.Equal(Message(Entity, 3).Payload, payloads[3]);
        Assert.Empty(await database.ReadPayloadsAsync(Entity, []));
    }

    [StoreFact]
    public async Task Commit_ManyRowsInOneBatch_AllLand()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            for (var sequence = 1; sequence <= 500; sequence++)
            {
                b.Inserts.Add(Message(Entity, sequence));
            }

            b.SequenceCounters[Entity] = 501;
        });

        var load = await (await ReopenAsync(database)).LoadEntityAsync(Entity, 0);

        Assert.Equal(Enumerable.Range(1, 500).Select(i => (long)i), load.Messages.Select(m => m.SequenceNumber));
        Assert.Equal(501, load.NextSequenceNumber);
    }

    [StoreFact]
    public async Task Commit_PointerRowWithoutPayload_LoadsBackWithoutPayloadAndWithItsSize()
    {
        // A subscription's row points at the topic's stored copy: no payload of its own, but the
        // size of the message it stands for.
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.AddRange([Pointer(Entity, 1, 1234), Message(Entity, 2)]));

        var reopened = await ReopenAsync(database);
        var messages = (await reopened.LoadEntityAsync(Entity, 0)).Messages;

        Assert.Equal([1L, 2L], messages.Select(m => m.SequenceNumber));
        Assert.Equal(Pointer(Entity, 1, 1234), messages[0]);
        Assert.Null(messages[0].Payload);
        Assert.Equal(1234, messages[0].PayloadSize);
        Assert.Equal(16, messages[1].PayloadSize);
        Assert.Equal([2L], (await reopened.ReadPayloadsAsync(Entity, [1, 2])).Keys);
    }

    [StoreFact]
    public async Task Commit_UpdateWithoutPayload_OfAPointerRow_KeepsItWithoutPayloadAndKeepsItsSize()
    {
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.Add(Pointer(Entity, 1, 1234)));

        await CommitAsync(database, 1, b =>
            b.Updates.Add(new MessageUpdate(Entity, 1, SubQueue.DeadLetter, StoredMessageState.Active, 5, "reason", "description", "source", Payload: null)));

        var stored = Assert.Single((await (await ReopenAsync(database)).LoadEntityAsync(Entity, 0)).Messages);
        Assert.Equal(
            (SubQueue.DeadLetter, 5, "reason", (byte[]?)null, 1234),
            (stored.SubQueue, stored.DeliveryCount, stored.DeadLetterReason, stored.Payload, stored.PayloadSize));
    }

    [StoreFact]
    public async Task Commit_UpdateWithPayload_OfAPointerRow_StoresThePayloadAndItsSize()
    {
        // A subscription's message that must outlive the topic's copy gets a payload of its own.
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.AddRange([Pointer(Entity, 1, 1234), Pointer(Entity, 2, 99)]));
        var own = new byte[] { 4, 5, 6, 7, 8 };

        await CommitAsync(database, 1, b =>
        {
            b.Updates.Add(new MessageUpdate(Entity, 1, SubQueue.Main, StoredMessageState.Deferred, 1, null, null, null, own));
            // Set, then updated again without a payload in the same batch: the payload stays.
            b.Updates.Add(new MessageUpdate(Entity, 2, SubQueue.Main, StoredMessageState.Active, 1, null, null, null, own));
            b.Updates.Add(new MessageUpdate(Entity, 2, SubQueue.Main, StoredMessageState.Active, 2, null, null, null, Payload: null));
        });

        var reopened = await ReopenAsync(database);
        var messages = (await reopened.LoadEntityAsync(Entity, 0)).Messages;
        Assert.Equal((StoredMessageState.Deferred, own.Length), (messages[0].State, messages[0].PayloadSize));
        Assert.Equal(own, messages[0].Payload);
        Assert.Equal((2, own.Length), (messages[1].DeliveryCount, messages[1].PayloadSize));
        Assert.Equal(own, messages[1].Payload);
        Assert.Equal(own, (await reopened.ReadPayloadsAsync(Entity, [1]))[1]);
    }

    [StoreFact]
    public async Task Commit_DeliveryCountOnlyUpdates_RaiseTheCount_AndKeepWhatEarlierUpdatesWrote()
    {
        // A peek-lock delivery writes its count alone; in the same batch as a full update of the
        // row (an abandon that modified properties, then the next delivery) both must land.
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.AddRange([Message(Entity, 1), Message(Entity, 2), Pointer(Entity, 3, 40)]));
        var modified = new byte[] { 7, 7, 7, 7 };

        await CommitAsync(database, 1, b =>
        {
            b.Updates.Add(new MessageUpdate(Entity, 1, SubQueue.Main, StoredMessageState.Active, 1, null, null, null, Payload: null) { DeliveryCountOnly = true });
            b.Updates.Add(new MessageUpdate(Entity, 2, SubQueue.Main, StoredMessageState.Active, 1, null, null, null, modified));
            b.Updates.Add(new MessageUpdate(Entity, 2, SubQueue.Main, StoredMessageState.Active, 2, null, null, null, Payload: null) { DeliveryCountOnly = true });
            b.Updates.Add(new MessageUpdate(Entity, 3, SubQueue.Main, StoredMessageState.Active, 1, null, null, null, Payload: null) { DeliveryCountOnly = true });
        });
        await CommitAsync(database, 1, b =>
            b.Updates.Add(new MessageUpdate(Entity, 3, SubQueue.Main, StoredMessageState.Active, 2, null, null, null, Payload: null) { DeliveryCountOnly = true }));

        var reopened = await ReopenAsync(database);
        var messages = (await reopened.LoadEntityAsync(Entity, 0)).Messages;
        var expected = Message(Entity, 1);
        Assert.Equal(expected with { DeliveryCount = 1, Payload = messages[0].Payload }, messages[0]);
        Assert.Equal(expected.Payload, messages[0].Payload);
        Assert.Equal((2, modified.Length), (messages[1].DeliveryCount, messages[1].PayloadSize));
        Assert.Equal(modified, messages[1].Payload);
        Assert.Equal(Pointer(Entity, 3, 40) with { DeliveryCount = 2 }, messages[2]);

        var missing = await Assert.ThrowsAsync<MissingRowException>(() => CommitAsync(reopened, 1, b =>
            b.Updates.Add(new MessageUpdate(Entity, 9, SubQueue.Main, StoredMessageState.Active, 1, null, null, null, Payload: null) { DeliveryCountOnly = true })));
        Assert.Contains("update", missing.Message);
    }

    [StoreFact]
    public async Task Commit_PurgeOfSomeEntities_LeavesTheOtherEntitiesRowsAlone()
    {
        // A topic's stored copies and its subscriptions' pointer rows share the container; purging
        // a deleted subscription (or topic) must not touch the others.
        const long Topic = 20, Deleted = 21, Kept = 22, AlsoDeleted = 23;
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.AddRange([Message(Topic, 1), Message(Topic, 2)]);
            b.Inserts.AddRange([Pointer(Deleted, 1, 16), Pointer(Kept, 1, 16), Pointer(Kept, 2, 16), Pointer(AlsoDeleted, 1, 16)]);
            b.SequenceCounters[Topic] = 3;
            b.SequenceCounters[Deleted] = 2;
            b.SequenceCounters[Kept] = 3;
            b.SequenceCounters[AlsoDeleted] = 2;
            b.Duplicates.Add(new DuplicateRecord(Topic, "m", 10_000));
            b.Duplicates.Add(new DuplicateRecord(Deleted, "m", 10_000));
        });

        await CommitAsync(database, 1, b =>
        {
            b.PurgedEntities.AddRange([Deleted, AlsoDeleted]);
            b.Updates.Add(new MessageUpdate(Kept, 1, SubQueue.Main, StoredMessageState.Active, 1, null, null, null, Payload: null));
        });

        var reopened = await ReopenAsync(database);
        foreach (var gone in new[] { Deleted, AlsoDeleted })
        {
            var load = await reopened.LoadEntityAsync(gone, 0);
            Assert.Equal((1L, 0, 0), (load.NextSequenceNumber, load.Messages.Count, load.DuplicateHistory.Count));
        }

        var topic = await reopened.LoadEntityAsync(Topic, 0);
        Assert.Equal([Message(Topic, 1).Payload, Message(Topic, 2).Payload], topic.Messages.Select(m => m.Payload));
        Assert.Equal((3L, 1), (topic.NextSequenceNumber, topic.DuplicateHistory.Count));
        var kept = await reopened.LoadEntityAsync(Kept, 0);
        Assert.Equal([Pointer(Kept, 1, 16) with { DeliveryCount = 1 }, Pointer(Kept, 2, 16)], kept.Messages);
        Assert.Equal(3, kept.NextSequenceNumber);
    }

    [StoreFact]
    public async Task Commit_UpdateOrDeleteOfAMissingRow_FailsWithMissingRowException_AndWritesNothing()
    {
        // A completed (deleted) message updated afterwards: memory and database disagree, so the
        // whole batch fails instead of passing silently.
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.AddRange([Message(Entity, 1), Message(Entity, 2)]));
        await CommitAsync(database, 1, b => b.Deletes.Add(new MessageKey(Entity, 1)));

        var update = await Assert.ThrowsAsync<MissingRowException>(() => CommitAsync(database, 1, b =>
        {
            b.Inserts.Add(Message(OtherEntity, 1));
            b.Updates.Add(new MessageUpdate(Entity, 2, SubQueue.Main, StoredMessageState.Active, 3, null, null, null, Payload: null));
            b.Updates.Add(new MessageUpdate(Entity, 1, SubQueue.Main, StoredMessageState.Active, 2, null, null, null, Payload: null));
        }));
        Assert.Contains("update", update.Message);
        var delete = await Assert.ThrowsAsync<MissingRowException>(() => CommitAsync(database, 1, b =>
        {
            b.Deletes.Add(new MessageKey(Entity, 2));
            b.Deletes.Add(new MessageKey(Entity, 1));
        }));
        Assert.Contains("delete", delete.Message);

        var reopened = await ReopenAsync(database);
        var kept = Assert.Single((await reopened.LoadEntityAsync(Entity, 0)).Messages);
        Assert.Equal((2L, 0), (kept.SequenceNumber, kept.DeliveryCount));
        Assert.Empty((await reopened.LoadEntityAsync(OtherEntity, 0)).Messages);
    }

    [StoreFact]
    public async Task Commit_WritesOfAnEntityPurgedInTheSameBatchOrEarlier_MayFindNoRow()
    {
        // A settlement racing the delete of its queue or subscription: the purge took its rows.
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b => b.Inserts.AddRange([Message(Entity, 1), Message(Entity, 2), Message(OtherEntity, 1)]));

        await CommitAsync(database, 1, b =>
        {
            b.PurgedEntities.Add(Entity);
            b.Updates.Add(new MessageUpdate(Entity, 1, SubQueue.Main, StoredMessageState.Active, 2, null, null, null, Payload: null));
            b.Updates.Add(new MessageUpdate(OtherEntity, 1, SubQueue.Main, StoredMessageState.Active, 1, null, null, null, Payload: null));
        });
        await CommitAsync(database, 1, b =>
        {
            b.Deletes.Add(new MessageKey(Entity, 2));
            b.Updates.Add(new MessageUpdate(Entity, 1, SubQueue.Main, StoredMessageState.Active, 3, null, null, null, Payload: null));
        });

        var reopened = await ReopenAsync(database);
        Assert.Empty((await reopened.LoadEntityAsync(Entity, 0)).Messages);
        Assert.Equal(1, Assert.Single((await reopened.LoadEntityAsync(OtherEntity, 0)).Messages).DeliveryCount);
    }

    /// <summary>
    /// A paged load reads every scheduled and deferred message, each sub-queue's active head up to
    /// the byte budget, and only counts the active messages after it; ReadActiveAsync reads them
    /// back in order after a sequence number, by rows and by bytes.
    /// </summary>
    [StoreFact]
    public async Task LoadEntityHead_ReadsHeldMessagesAndTheHead_CountsTheTail_ReadActiveReadsOn()
    {
        var database = await OpenOwnedAsync(1);
        await CommitAsync(database, 1, b =>
        {
            for (var sequence = 1; sequence <= 100; sequence++)
            {
                var message = Message(Entity, sequence);
                b.Inserts.Add(sequence switch
                {
                    50 => message with { State = StoredMessageState.Deferred },
                    90 => message with { State = StoredMessageState.Scheduled, ScheduledAtMs = 9_999 },
                    > 95 => message with { SubQueue = SubQueue.DeadLetter },
                    _ => message,
                });
            }
            b.Inserts.Add(Message(OtherEntity, 1));
        });

        database = await ReopenAsync(database);
        var load = await database.LoadEntityHeadAsync(Entity, 0, cacheBytes: 10 * 16);

        // Main: 1-10 (ten 16-byte payloads), the deferred 50 and scheduled 90; dead letters: 96-100 (five fit).
        Assert.Equal([.. Enumerable.Range(1, 10).Select(i => (long)i), 50, 90, 96, 97, 98, 99, 100], load.Messages.Select(m => m.SequenceNumber));
        // The queue's tail is left to count (it may be millions); the dead-letter queue's head is all of it (nothing to count).
        var mainTail = Assert.Single(load.Tails!, t => t.SubQueue == SubQueue.Main);
        Assert.Equal((10L, 100L, (long?)null), (mainTail.AfterSequence, mainTail.ThroughSequence, mainTail.Count));
        Assert.Equal((93L - 10, (93L - 10) * 16), await database.CountActiveAsync(Entity, SubQueue.Main, 10, 100));
        Assert.Equal((93L - 10 - 5, (93L - 10 - 5) * 16), await database.CountActiveAsync(Entity, SubQueue.Main, 10, 89));
        var deadLetterTail = Assert.Single(load.Tails!, t => t.SubQueue == SubQueue.DeadLetter);
        Assert.Equal((100L, 100L, (long?)0, (long?)0), (deadLetterTail.AfterSequence, deadLetterTail.ThroughSequence, deadLetterTail.Count, deadLetterTail.Bytes));

        var next = await database.ReadActiveAsync(Entity, SubQueue.Main, afterSequence: 45, maxRows: 10, maxBytes: long.MaxValue);
        Assert.Equal([46L, 47, 48, 49, 51, 52, 53, 54, 55, 56], next.Select(m => m.SequenceNumber));
        Assert.All(next, m => Assert.Equal(16, m.Payload!.Length));
        var byBytes = await database.ReadActiveAsync(Entity, SubQueue.Main, afterSequence: 85, maxRows: 100, maxBytes: 3 * 16);
        Assert.Equal([86L, 87, 88], byBytes.Select(m => m.SequenceNumber));
        Assert.Equal([89L, 91, 92, 93, 94, 95], (await database.ReadActiveAsync(Entity, SubQueue.Main, 88, 100, long.MaxValue)).Select(m => m.SequenceNumber));
        Assert.Single(await database.ReadActiveAsync(Entity, SubQueue.Main, 0, 100, maxBytes: 1));
        Assert.Empty(await database.ReadActiveAsync(Entity, SubQueue.DeadLetter, 100, 100, long.MaxValue));

        // A head that stopped short of the budget is the whole queue: its tail is known to be empty, nothing to count.
        var whole = await database.LoadEntityHeadAsync(Entity, 0, cacheBytes: 200 * 16);
        var wholeTail = Assert.Single(whole.Tails!, t => t.SubQueue == SubQueue.Main);
        Assert.Equal((95L, 100L, (long?)0, (long?)0), (wholeTail.AfterSequence, wholeTail.ThroughSequence, wholeTail.Count, wholeTail.Bytes));
    }

    /// <summary>
    /// A queue just created starts from <see cref="EntityLoad.EmptyHead"/> without a read: it must be
    /// exactly what the head load reads for an entity with nothing stored, in a container that holds
    /// other entities' messages.
    /// </summary>
    [StoreFact]
    public async Task TheEmptyHead_IsWhatTheHeadLoadReadsForAnEntityWithNothingStored()
    {
        var database = await OpenAsync();
        Assert.True(await database.RaiseEpochAsync(1));
        await CommitAsync(database, 1, b => b.Inserts.Add(Message(OtherEntity, 1)));

        var read = await database.LoadEntityHeadAsync(Entity, 0, cacheBytes: 1 << 20, maxDuplicates: 100);

        AssertSameEmptyHead(read, EntityLoad.EmptyHead(Entity));
    }

    /// <summary>
    /// A node that starts with thousands of stored queues reads the quiet ones (nothing stored, no
    /// live duplicate id) in one statement: each must be exactly what its head load reads, and an
    /// entity with anything stored (a message in any state or sub-queue, a duplicate id still live)
    /// must be left to its head load.
    /// </summary>
    [StoreFact]
    public async Task TheQuietHeads_AreWhatTheHeadLoadReads_AndLeaveOutEveryEntityWithSomethingStored()
    {
        const long never = 40, drained = 41, marked = 42, active = 43, deferred = 44, scheduled = 45, deadLettered = 46, remembering = 47, forgotten = 48;
        const long nowMs = 5_000;
        var database = await OpenOwnedAsync(epoch: 1);
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.AddRange([Message(drained, 1), Message(drained, 2), Message(active, 1)]);
            b.Inserts.Add(Message(deferred, 1) with { State = StoredMessageState.Deferred });
            b.Inserts.Add(Message(scheduled, 1) with { State = StoredMessageState.Scheduled, ScheduledAtMs = 9_000 });
            b.Inserts.Add(Message(deadLettered, 1) with { SubQueue = SubQueue.DeadLetter });
            b.SequenceCounters[drained] = 3;
            b.SequenceCounters[marked] = 7;
            b.DeliveryMarks[marked] = 4;
            b.Duplicates.Add(new DuplicateRecord(remembering, "kept", ExpiresAtMs: nowMs + 1));
            b.Duplicates.Add(new DuplicateRecord(forgotten, "gone", ExpiresAtMs: nowMs));
        });
        await CommitAsync(database, 1, b => b.Deletes.AddRange([new MessageKey(drained, 1), new MessageKey(drained, 2)]));

        var quiet = await database.LoadQuietHeadsAsync([never, drained, marked, active, deferred, scheduled, deadLettered, remembering, forgotten], nowMs);

        Assert.Equal([never, drained, marked, forgotten], quiet.Select(l => l.EntityId).Order());
        foreach (var load in quiet)
        {
            AssertSameEmptyHead(await database.LoadEntityHeadAsync(load.EntityId, nowMs, cacheBytes: 1 << 20, maxDuplicates: 100), load);
        }
        Assert.Equal((3L, 0L), (quiet.Single(l => l.EntityId == drained).NextSequenceNumber, quiet.Single(l => l.EntityId == drained).DeliveredThrough));
        Assert.Equal((7L, 4L), (quiet.Single(l => l.EntityId == marked).NextSequenceNumber, quiet.Single(l => l.EntityId == marked).DeliveredThrough));
        Assert.Empty(await database.LoadQuietHeadsAsync([], nowMs));
    }

    /// <summary>Two head loads of an entity with nothing in memory to hold: every field the same.</summary>
    private static void AssertSameEmptyHead(EntityLoad read, EntityLoad expected)
    {
        Assert.Equal((read.EntityId, read.NextSequenceNumber, read.DuplicateHistoryComplete, read.Held, read.StoredAlone, read.DeliveredThrough),
            (expected.EntityId, expected.NextSequenceNumber, expected.DuplicateHistoryComplete, expected.Held, expected.StoredAlone, expected.DeliveredThrough));
        Assert.Empty(read.Messages);
        Assert.Empty(expected.Messages);
        Assert.Empty(read.DuplicateHistory);
        Assert.Empty(expected.DuplicateHistory);
        Assert.Equal(read.Tails!.OrderBy(t => t.SubQueue), expected.Tails!.OrderBy(t => t.SubQueue));
    }

    /// <summary>
    /// A subscription's row that carries its own payload while its topic holds no copy is its
    /// message's only stored form: the paged reads say so row by row, and the head load counts such
    /// rows (with their bytes), in memory or not. A pointer row, or a row with its own payload whose
    /// topic also holds the copy (a rule action changed it), is not; a queue's rows never are.
    /// </summary>
    [StoreFact]
    public async Task RowsStoredAlone_AreMarkedByThePagedReads_AndCountedByTheSubscriptionsLoad()
    {
        const long topic = 30, subscription = 31, queue = 32;
        var database = await OpenOwnedAsync(1);
        await CommitAsync(database, 1, b =>
        {
            // 1: a pointer at the topic's copy; 2 and 4: stored alone; 3: own payload and a copy.
            b.Inserts.Add(Message(topic, 1));
            b.Inserts.Add(Message(subscription, 1) with { Payload = null });
            b.Inserts.Add(Message(subscription, 2) with { Payload = [1, 2, 3, 4, 5], PayloadSize = 5 });
            b.Inserts.Add(Message(topic, 3));
            b.Inserts.Add(Message(subscription, 3) with { Payload = [9], PayloadSize = 1 });
            b.Inserts.Add(Message(subscription, 4) with { Payload = [7, 7], PayloadSize = 2, State = StoredMessageState.Deferred });
            b.Inserts.Add(Message(queue, 1));
        });

        // A head of one message: the count covers the rows left in the database too.
        var head = await database.LoadEntityHeadAsync(subscription, 0, cacheBytes: 1, copiesOf: topic);
        Assert.Equal(new StoredAloneTally(2, 7), head.StoredAlone);
        var active = await database.ReadActiveAsync(subscription, SubQueue.Main, 0, 10, long.MaxValue, copiesOf: topic);
        Assert.Equal([(1L, false), (2L, true), (3L, false)], active.Select(m => (m.SequenceNumber, m.StoredAlone)));
        Assert.True(Assert.Single(await database.ReadByKeyAsync(subscription, [4], copiesOf: topic)).StoredAlone);

        var queueLoad = await database.LoadEntityHeadAsync(queue, 0, cacheBytes: 1000);
        Assert.Equal(default, queueLoad.StoredAlone);
        Assert.False(Assert.Single(queueLoad.Messages).StoredAlone);
    }

    /// <summary>
    /// A subscription's rows stored without a payload come back with their topic's copy; the scan
    /// for copies nothing points at stops short of every subscription's lowest active message,
    /// skips copies still pointed at (a deferred row below it), and looks at the ones named again.
    /// </summary>
    [StoreFact]
    public async Task SubscriptionRowsReadTheirTopicsCopy_AndScanCopiesFindsTheUnreferencedOnes()
    {
        const long topic = 20, fast = 21, slow = 22;
        var database = await OpenOwnedAsync(1);
        await CommitAsync(database, 1, b =>
        {
            for (var sequence = 1; sequence <= 10; sequence++)
            {
                b.Inserts.Add(Message(topic, sequence));
                // slow: a pointer row for 2 (deferred) and 6-10; fast: its own payload for 10 (a rule action changed it).
                if (sequence == 2 || sequence >= 6)
                {
                    b.Inserts.Add(Message(slow, sequence) with { Payload = null, State = sequence == 2 ? StoredMessageState.Deferred : StoredMessageState.Active });
                }
            }
            b.Inserts.Add(Message(fast, 10) with { Payload = [1, 2, 3], PayloadSize = 3 });
        });

        var head = await database.LoadEntityHeadAsync(slow, 0, cacheBytes: 2 * 16, copiesOf: topic);
        Assert.Equal([2L, 6, 7], head.Messages.Select(m => m.SequenceNumber));
        Assert.All(head.Messages, m => Assert.Equal(Message(topic, m.SequenceNumber).Payload, m.Payload));
        var next = await database.ReadActiveAsync(slow, SubQueue.Main, 7, 10, long.MaxValue, copiesOf: topic);
        Assert.Equal([8L, 9, 10], next.Select(m => m.SequenceNumber));
        Assert.All(next, m => Assert.Equal(Message(topic, m.SequenceNumber).Payload, m.Payload));
        Assert.Equal([1, 2, 3], Assert.Single(await database.ReadActiveAsync(fast, SubQueue.Main, 0, 10, long.MaxValue, copiesOf: topic)).Payload);
        // Without copiesOf a pointer row has no payload.
        Assert.All(await database.ReadActiveAsync(slow, SubQueue.Main, 0, 10, long.MaxValue), m => Assert.Null(m.Payload));

        // Up to slow's lowest active (6): 1, 3, 4, 5 go; 2 is held by the deferred row.
        var scan = await database.ScanCopiesAsync(topic, [fast, slow], 0, 10, 100, []);
        Assert.Equal([1L, 3, 4, 5], scan.Unreferenced.Select(c => c.SequenceNumber));
        Assert.All(scan.Unreferenced, c => Assert.Equal(16, c.PayloadSize));
        Assert.Equal(5, scan.ScannedThrough);
        // A short scan says how far it got.
        var shortScan = await database.ScanCopiesAsync(topic, [fast, slow], 0, 10, 2, []);
        Assert.Equal(2, shortScan.ScannedThrough);
        Assert.Equal([1L], shortScan.Unreferenced.Select(c => c.SequenceNumber));

        await CommitAsync(database, 1, b =>
        {
            b.Deletes.AddRange(scan.Unreferenced.Select(c => new MessageKey(topic, c.SequenceNumber)));
            b.Deletes.Add(new MessageKey(slow, 2));
            b.Deletes.Add(new MessageKey(slow, 6));
        });
        // 2 is named again; the range goes on from 5 up to slow's lowest active, now 7.
        var again = await database.ScanCopiesAsync(topic, [fast, slow], 5, 10, 100, [2, 9]);
        Assert.Equal([6L, 2], again.Unreferenced.Select(c => c.SequenceNumber));
        Assert.Equal(6, again.ScannedThrough);
        // With no subscription left, every copy is unreferenced.
        Assert.Equal([6L, 7, 8, 9, 10], (await database.ScanCopiesAsync(topic, [], 5, 10, 100, [])).Unreferenced.Select(c => c.SequenceNumber));
    }

    /// <summary>A topic's state without its messages: the counter at least one past every row, and the duplicate history.</summary>
    [StoreFact]
    public async Task LoadEntityState_ReadsTheCounterAndHistory_NotTheMessages()
    {
        var database = await OpenOwnedAsync(1);
        await CommitAsync(database, 1, b =>
        {
            b.Inserts.Add(Message(Entity, 41));
            b.SequenceCounters[Entity] = 5;
            b.Duplicates.Add(new DuplicateRecord(Entity, "seen", 10_000));
        });

        var load = await database.LoadEntityStateAsync(Entity, nowMs: 1_000);

        Assert.Equal(42, load.NextSequenceNumber);
        Assert.Empty(load.Messages);
        Assert.Equal(["seen"], load.DuplicateHistory.Select(d => d.MessageId));
    }

    /// <summary>
    /// Duplicate-detection history read in parts: the newest ids first up to a limit (saying whether
    /// that was all), a lookup of given ids by key, and the whole window in pages of ordinal order.
    /// </summary>
    [StoreFact]
    public async Task DuplicateHistory_ReadsTheNewest_LooksUpByKey_AndPagesThroughTheWindow()
    {
        var database = await OpenOwnedAsync(1);
        await CommitAsync(database, 1, b =>
        {
            for (var i = 0; i < 10; i++)
            {
                b.Duplicates.Add(new DuplicateRecord(Entity, $"id-{i}", 1_000 + i));
            }
            b.Duplicates.Add(new DuplicateRecord(OtherEntity, "id-0", 5_000));
        });

        var head = await database.LoadEntityHeadAsync(Entity, nowMs: 1_002, cacheBytes: 100, maxDuplicates: 3);
        Assert.Equal(["id-9", "id-8", "id-7"], head.DuplicateHistory.Select(d => d.MessageId));
        Assert.False(head.DuplicateHistoryComplete);
        var all = await database.LoadEntityStateAsync(Entity, nowMs: 1_002, maxDuplicates: 100);
        Assert.Equal(7, all.DuplicateHistory.Count);
        Assert.True(all.DuplicateHistoryComplete);

        // id-1 expired at 1,001; id-x was never seen.
        Assert.Equal(["id-3", "id-5"], (await database.FindDuplicatesAsync(Entity, ["id-1", "id-3", "id-5", "id-x"], nowMs: 1_002)).Order(StringComparer.Ordinal));

        var paged = new List<string>();
        var after = "";
        while (true)
        {
            var page = await database.ReadDuplicatesAsync(Entity, after, nowMs: 1_002, maxRows: 3);
            paged.AddRange(page.Select(d => d.MessageId));
            if (page.Count < 3)
            {
                break;
            }
            after = page[^1].MessageId;
        }
        Assert.Equal(Enumerable.Range(3, 7).Select(i => $"id-{i}"), paged);

        // Ids are found as given, whatever characters they hold (the list travels as one parameter),
        // and a long list is looked up in one read.
        string[] awkward = ["quote\"d", "back\\slash", "[1,2]", "ünïcødé 💬", "tab\tnew\nline", "' OR 1=1 --"];
        await CommitAsync(database, 1, b =>
        {
            foreach (var id in awkward)
            {
                b.Duplicates.Add(new DuplicateRecord(Entity, id, 9_000));
            }
        });
        var many = awkward.Concat(Enumerable.Range(0, 500).Select(i => $"never-{i}")).ToList();
        Assert.Equal(awkward.Order(StringComparer.Ordinal), (await database.FindDuplicatesAsync(Entity, many, nowMs: 1_002)).Order(StringComparer.Ordinal));
    }

    /// <summary>
    /// A paged load reads the scheduled messages first to come due and some deferred ones, each up
    /// to the byte budget, and counts the rest; the rest are read back in due-time order, by key,
    /// and by peek in any state.
    /// </summary>
    [StoreFact]
    public async Task LoadEntityHead_PagesScheduledAndDeferredMessages()
    {
        var database = await OpenOwnedAsync(1);
        await CommitAsync(database, 1, b =>
        {
            for (var sequence = 1; sequence <= 30; sequence++)
            {
                var message = Message(Entity, sequence);
                b.Inserts.Add(sequence switch
                {
                    // 1-10 scheduled, due in the reverse order of their sequence numbers (1 last); 11-20 deferred; 21-30 active.
                    <= 10 => message with { State = StoredMessageState.Scheduled, ScheduledAtMs = 10_000 - sequence },
                    <= 20 => message with { State = StoredMessageState.Deferred },
                    _ => message,
                });
            }
        });

        var load = await database.LoadEntityHeadAsync(Entity, 0, cacheBytes: 3 * 16);

        Assert.Equal([8L, 9, 10, 11, 12, 13, 21, 22, 23], load.Messages.Select(m => m.SequenceNumber));
        var held = load.Held!;
        Assert.Equal((9_992L, 9L), (held.ScheduledFromAtMs, held.ScheduledFromSequence));
        Assert.Equal((7L, 7L * 16, 7L, 7L * 16), (held.ScheduledCount, held.ScheduledBytes, held.DeferredCount, held.DeferredBytes));

        var next = await database.ReadScheduledAsync(Entity, held.ScheduledFromAtMs, held.ScheduledFromSequence, maxRows: 4, maxBytes: long.MaxValue);
        Assert.Equal([7L, 6, 5, 4], next.Select(m => m.SequenceNumber));
        Assert.Equal([3L, 2], (await database.ReadScheduledAsync(Entity, 9_996, 5, maxRows: 100, maxBytes: 2 * 16)).Select(m => m.SequenceNumber));

        var byKey = await database.ReadByKeyAsync(Entity, [20, 2, 99, 25]);
        Assert.Equal([(2L, StoredMessageState.Scheduled), (20L, StoredMessageState.Deferred), (25L, StoredMessageState.Active)], byKey.Select(m => (m.SequenceNumber, m.State)));
        Assert.All(byKey, m => Assert.Equal(Message(Entity, m.SequenceNumber).Payload, m.Payload));

        Assert.Equal([9L, 10, 11, 12], (await database.ReadFromAsync(Entity, SubQueue.Main, 8, maxRows: 4, maxBytes: long.MaxValue)).Select(m => m.SequenceNumber));
        Assert.Empty(await database.ReadFromAsync(Entity, SubQueue.DeadLetter, 0, 10, long.MaxValue));
    }

    /// <summary>
    /// The expiry sweep of messages past the cache: active rows of the main queue after the frontier
    /// whose expiry passed, earliest first, limited; not the dead-lettered, deferred, scheduled or
    /// never-expiring ones, nor those at or below the frontier (memory expires those). A
    /// subscription's pointer comes back with its topic's copy.
    /// </summary>
    [StoreFact]
    public async Task ReadExpired_FindsTheActiveMessagesPastTheirExpiry_EarliestFirst()
    {
        const long Topic = 30, Subscription = 31;
        var database = await OpenOwnedAsync(1);
        await CommitAsync(database, 1, b =>
        {
            for (var sequence = 1; sequence <= 12; sequence++)
            {
                // Expiry 1_000 - sequence: the later the message, the sooner it expires.
                var message = Message(Entity, sequence) with { ExpiresAtMs = 1_000 - sequence };
                b.Inserts.Add(sequence switch
                {
                    1 => message with { ExpiresAtMs = null },
                    2 => message with { SubQueue = SubQueue.DeadLetter, DeadLetterReason = "TTLExpiredException" },
                    3 => message with { State = StoredMessageState.Deferred },
                    4 => message with { State = StoredMessageState.Scheduled, ScheduledAtMs = 500 },
                    12 => message with { ExpiresAtMs = 5_000 },
                    _ => message,
                });
            }
            b.Inserts.Add(Message(Topic, 40));
            b.Inserts.Add(Pointer(Subscription, 40, 16) with { ExpiresAtMs = 900 });
        });

        var expired = await database.ReadExpiredAsync(Entity, afterSequence: 0, nowMs: 1_000, maxRows: 100, maxBytes: long.MaxValue);
        Assert.Equal([11L, 10, 9, 8, 7, 6, 5], expired.Select(m => m.SequenceNumber));
        Assert.All(expired, m => Assert.Equal(Message(Entity, m.SequenceNumber).Payload, m.Payload));

        Assert.Equal([11L, 10, 9], (await database.ReadExpiredAsync(Entity, 0, 1_000, maxRows: 3, long.MaxValue)).Select(m => m.SequenceNumber));
        Assert.Equal([11L, 10], (await database.ReadExpiredAsync(Entity, 0, 1_000, maxRows: 100, maxBytes: 2 * 16)).Select(m => m.SequenceNumber));
        Assert.Equal([11L, 10, 9], (await database.ReadExpiredAsync(Entity, afterSequence: 8, 1_000, 100, long.MaxValue)).Select(m => m.SequenceNumber));
        Assert.Equal([11L, 10], (await database.ReadExpiredAsync(Entity, 0, nowMs: 990, 100, long.MaxValue)).Select(m => m.SequenceNumber));

        var pointer = Assert.Single(await database.ReadExpiredAsync(Subscription, 0, 1_000, 100, long.MaxValue, copiesOf: Topic));
        Assert.Equal(Message(Topic, 40).Payload, pointer.Payload);
    }

    /// <summary>Opens the test's database (the same one every time within a test).</summary>
    protected async Task<IContainerDatabase> OpenAsync()
    {
        _connectionString ??= await NewContainerConnectionStringAsync();
        var database = await Provider.OpenContainerAsync(_connectionString);
        _opened.Add(database);
        return database;
    }

    /// <summary>A 16-byte message of an entity (the follower contract's too).</summary>
    internal static MessageRecord Message(long entityId, long sequenceNumber) => new()
    {
        EntityId = entityId,
        SequenceNumber = sequenceNumber,
        EnqueuedAtMs = 1_700_000_000_000 + sequenceNumber,
        Payload = Enumerable.Range(0, 16).Select(i => (byte)(i + sequenceNumber)).ToArray(),
        PayloadSize = 16,
    };

    /// <summary>A subscription's row pointing at a topic's stored copy of <paramref name="size"/> bytes.</summary>
    protected static MessageRecord Pointer(long entityId, long sequenceNumber, int size) =>
        Message(entityId, sequenceNumber) with { Payload = null, PayloadSize = size, MessageId = $"m-{sequenceNumber}" };

    protected static Task CommitAsync(IContainerDatabase database, long epoch, Action<ContainerWriteBatch> fill)
    {
        var batch = new ContainerWriteBatch();
        fill(batch);
        return database.CommitAsync(epoch, batch);
    }

    private async Task<IContainerDatabase> OpenOwnedAsync(long epoch)
    {
        var database = await OpenAsync();
        Assert.True(await database.RaiseEpochAsync(epoch));
        return database;
    }

    /// <summary>Closes the handle and opens the database afresh, so reads come from the file.</summary>
    private async Task<IContainerDatabase> ReopenAsync(IContainerDatabase database)
    {
        await database.DisposeAsync();
        return await OpenAsync();
    }
}
