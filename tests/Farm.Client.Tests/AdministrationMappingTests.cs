using Google.Protobuf.WellKnownTypes;
using Proto = Farm.Contracts.V1;

namespace Farm.Client.Tests;

public class AdministrationMappingTests
{
    [Fact]
    public void Defaults_MatchAzure()
    {
        var options = new CreateQueueOptions("q");

        Assert.Equal(TimeSpan.FromMinutes(1), options.LockDuration);
        Assert.Equal(10, options.MaxDeliveryCount);
        Assert.Equal(TimeSpan.MaxValue, options.DefaultMessageTimeToLive);
        Assert.Equal(TimeSpan.FromMinutes(10), options.DuplicateDetectionHistoryTimeWindow);
        Assert.False(options.RequiresDuplicateDetection);
        Assert.True(options.EnableBatchedOperations);
    }

    [Fact]
    public void Create_SendsOnlyAssignedProperties()
    {
        var options = new CreateQueueOptions("q") { LockDuration = TimeSpan.FromSeconds(30), RequiresDuplicateDetection = true };

        var proto = QueueMapper.ToProto(options, onlyAssigned: true);

        Assert.Equal(TimeSpan.FromSeconds(30), proto.LockDuration.ToTimeSpan());
        Assert.True(proto.HasRequiresDuplicateDetection);
        Assert.False(proto.HasMaxDeliveryCount);
        Assert.Null(proto.DefaultMessageTimeToLive);
        Assert.False(proto.HasForwardTo);
    }

    [Fact]
    public void Update_ClearingForwardTo_SendsEmptyString()
    {
        var queue = new QueueProperties("q") { ForwardTo = null };

        var proto = QueueMapper.ToProto(queue, onlyAssigned: true);

        Assert.True(proto.HasForwardTo);
        Assert.Equal(string.Empty, proto.ForwardTo);
    }

    [Fact]
    public void InfiniteTtl_UsesTheLargestDuration_AndMapsBack()
    {
        var options = new CreateQueueOptions("q") { DefaultMessageTimeToLive = TimeSpan.MaxValue };

        var proto = QueueMapper.ToProto(options, onlyAssigned: true);
        var back = new QueueProperties("q");
        QueueMapper.Load(back, proto);

        Assert.Equal(315_576_000_000, proto.DefaultMessageTimeToLive.Seconds);
        Assert.Equal(TimeSpan.MaxValue, back.DefaultMessageTimeToLive);
    }

    [Fact]
    public void FromInfo_LoadsEverything_AndMarksNothingAssigned()
    {
        var info = new Proto.QueueInfo
        {
            Name = "orders",
            ContainerId = 3,
            Properties = new Proto.QueueProperties
            {
                LockDuration = Duration.FromTimeSpan(TimeSpan.FromSeconds(45)),
                MaxDeliveryCount = 4,
                DefaultMessageTimeToLive = Duration.FromTimeSpan(TimeSpan.FromHours(1)),
                DeadLetteringOnMessageExpiration = true,
                RequiresDuplicateDetection = true,
                DuplicateDetectionHistoryTimeWindow = Duration.FromTimeSpan(TimeSpan.FromMinutes(2)),
                RequiresSession = false,
                ForwardTo = "next",
                ForwardDeadLetteredMessagesTo = "",
                MaxSizeInMegabytes = 2048,
                EnableBatchedOperations = false,
            },
            Counts = new Proto.MessageCounts { Active = 5, DeadLetter = 2, Scheduled = 1, Deferred = 1, Locked = 1, Total = 9, SizeInBytes = 100 },
        };

        var queue = QueueMapper.FromInfo(info);
        var runtime = QueueMapper.RuntimeFromInfo(info);

        Assert.Equal(("orders", 3L), (queue.Name, queue.ContainerId));
        Assert.Equal(TimeSpan.FromSeconds(45), queue.LockDuration);
        Assert.Equal(4, queue.MaxDeliveryCount);
        Assert.Equal(TimeSpan.FromHours(1), queue.DefaultMessageTimeToLive);
        Assert.True(queue.DeadLetteringOnMessageExpiration);
        Assert.True(queue.RequiresDuplicateDetection);
        Assert.Equal(TimeSpan.FromMinutes(2), queue.DuplicateDetectionHistoryTimeWindow);
        Assert.Equal("next", queue.ForwardTo);
        Assert.Null(queue.ForwardDeadLetteredMessagesTo);
        Assert.Equal(2048, queue.MaxSizeInMegabytes);
        Assert.False(queue.EnableBatchedOperations);
        Assert.Equal(0, queue.AssignedCount);
        Assert.Equal((5L, 2L, 1L, 1L, 1L, 9L, 100L), (runtime.ActiveMessageCount, runtime.DeadLetterMessageCount, runtime.ScheduledMessageCount, runtime.DeferredMessageCount, runtime.LockedMessageCount, runtime.TotalMessageCount, runtime.SizeInBytes));

        queue.MaxDeliveryCount = 7;
        var update = QueueMapper.ToProto(queue, onlyAssigned: true);
        Assert.Equal(7, update.MaxDeliveryCount);
        Assert.Null(update.LockDuration);
    }

    [Fact]
    public void InvalidValues_AreRejectedWhenSet()
    {
        var queue = new QueueProperties("q");

        Assert.Throws<ArgumentOutOfRangeException>(() => queue.LockDuration = TimeSpan.Zero);
        Assert.Throws<ArgumentOutOfRangeException>(() => queue.MaxDeliveryCount = 0);
    }

    [Fact]
    public void Status_MapsNodesAndContainers()
    {
        var status = QueueMapper.FromProto(new Proto.FarmStatus
        {
            Nodes = { new Proto.NodeInfo { Id = 1, State = "up", Address = "http://a:1", HeartbeatAge = Duration.FromTimeSpan(TimeSpan.FromSeconds(2)), ProcessId = 99 } },
            Containers = { new Proto.ContainerInfo { Id = 5, OwnerNode = 0, Epoch = 2, EntityCount = 3, Store = "sqlite" } },
            EntityCount = 3,
            Version = "1.0",
        });

        Assert.Equal(TimeSpan.FromSeconds(2), Assert.Single(status.Nodes).HeartbeatAge);
        Assert.Null(Assert.Single(status.Containers).OwnerNode);
        Assert.Equal(3, status.EntityCount);
    }
}
