using Google.Protobuf.WellKnownTypes;
using Proto = Farm.Contracts.V1;

namespace Farm.Client.Tests;

public class TopicMappingTests
{
    [Fact]
    public void TopicDefaults_MatchAzure()
    {
        var options = new CreateTopicOptions("t");

        Assert.False(options.SupportOrdering);
        Assert.True(options.EnableBatchedOperations);
        Assert.False(options.RequiresDuplicateDetection);
        Assert.Equal(TimeSpan.MaxValue, options.DefaultMessageTimeToLive);
        Assert.Equal(TimeSpan.FromMinutes(10), options.DuplicateDetectionHistoryTimeWindow);
        Assert.Equal(1024, options.MaxSizeInMegabytes);
        Assert.Equal(0, options.AssignedCount);
    }

    [Fact]
    public void CreateTopic_SendsOnlyAssignedProperties()
    {
        var options = new CreateTopicOptions("t") { SupportOrdering = true, DuplicateDetectionHistoryTimeWindow = TimeSpan.FromMinutes(3) };

        var proto = TopicMapper.ToProto(options, onlyAssigned: true);

        Assert.True(proto.HasSupportOrdering);
        Assert.True(proto.SupportOrdering);
        Assert.Equal(TimeSpan.FromMinutes(3), proto.DuplicateDetectionHistoryTimeWindow.ToTimeSpan());
        Assert.False(proto.HasRequiresDuplicateDetection);
        Assert.False(proto.HasMaxSizeInMegabytes);
        Assert.False(proto.HasEnableBatchedOperations);
        Assert.Null(proto.DefaultMessageTimeToLive);
    }

    [Fact]
    public void UpdateTopic_TurningOrderingOff_SendsAnExplicitFalse()
    {
        // false is the default: it must still go on the wire, or the update would change nothing.
        var topic = new TopicProperties("t") { SupportOrdering = false };

        var proto = TopicMapper.ToProto(topic, onlyAssigned: true);

        Assert.True(proto.HasSupportOrdering);
        Assert.False(proto.SupportOrdering);
        Assert.Equal(1, topic.AssignedCount);
    }

    [Fact]
    public void AllProperties_SendsEveryField()
    {
        var proto = TopicMapper.ToProto(new CreateTopicOptions("t"), onlyAssigned: false);

        Assert.Equal(315_576_000_000, proto.DefaultMessageTimeToLive.Seconds);
        Assert.True(proto.HasRequiresDuplicateDetection && proto.HasMaxSizeInMegabytes && proto.HasSupportOrdering && proto.HasEnableBatchedOperations);
        Assert.Equal(TimeSpan.FromMinutes(10), proto.DuplicateDetectionHistoryTimeWindow.ToTimeSpan());
    }

    [Fact]
    public void TopicInfo_LoadsEverything_AndMarksNothingAssigned()
    {
        var created = new DateTimeOffset(2026, 1, 2, 3, 4, 5, TimeSpan.Zero);
        var info = new Proto.TopicInfo
        {
            Name = "events",
            ContainerId = 4,
            Properties = new Proto.TopicProperties
            {
                DefaultMessageTimeToLive = Duration.FromTimeSpan(TimeSpan.FromDays(2)),
                RequiresDuplicateDetection = true,
                DuplicateDetectionHistoryTimeWindow = Duration.FromTimeSpan(TimeSpan.FromMinutes(1)),
                MaxSizeInMegabytes = 512,
                SupportOrdering = true,
                EnableBatchedOperations = false,
            },
            SubscriptionCount = 3,
            MessageCount = 17,
            SizeInBytes = 4096,
            CreatedAt = Timestamp.FromDateTimeOffset(created),
            UpdatedAt = Timestamp.FromDateTimeOffset(created.AddMinutes(1)),
        };

        var topic = TopicMapper.FromInfo(info);
        var runtime = TopicMapper.RuntimeFromInfo(info);

        Assert.Equal(("events", 4L), (topic.Name, topic.ContainerId));
        Assert.Equal(TimeSpan.FromDays(2), topic.DefaultMessageTimeToLive);
        Assert.True(topic.RequiresDuplicateDetection);
        Assert.Equal(TimeSpan.FromMinutes(1), topic.DuplicateDetectionHistoryTimeWindow);
        Assert.Equal(512, topic.MaxSizeInMegabytes);
        Assert.True(topic.SupportOrdering);
        Assert.False(topic.EnableBatchedOperations);
        Assert.Equal(created, topic.CreatedAt);
        Assert.Equal(created.AddMinutes(1), topic.UpdatedAt);
        Assert.Equal(0, topic.AssignedCount);
        Assert.Equal(("events", 3, 17L, 4096L), (runtime.Name, runtime.SubscriptionCount, runtime.MessageCount, runtime.SizeInBytes));

        topic.SupportOrdering = false;
        var update = TopicMapper.ToProto(topic, onlyAssigned: true);
        Assert.True(update.HasSupportOrdering);
        Assert.False(update.HasMaxSizeInMegabytes);
    }

    [Fact]
    public void TopicInfo_WithoutProperties_KeepsTheDefaults()
    {
        var topic = TopicMapper.FromInfo(new Proto.TopicInfo { Name = "t" });

        Assert.False(topic.SupportOrdering);
        Assert.Equal(TimeSpan.MaxValue, topic.DefaultMessageTimeToLive);
        Assert.Equal(default, topic.CreatedAt);
    }

    [Fact]
    public void SubscriptionDefaults_MatchAzure()
    {
        var options = new CreateSubscriptionOptions("t", "s");

        Assert.Equal(TimeSpan.FromMinutes(1), options.LockDuration);
        Assert.Equal(10, options.MaxDeliveryCount);
        Assert.Equal(TimeSpan.MaxValue, options.DefaultMessageTimeToLive);
        Assert.False(options.DeadLetteringOnMessageExpiration);
        Assert.True(options.EnableDeadLetteringOnFilterEvaluationExceptions);
        Assert.False(options.RequiresSession);
        Assert.Null(options.ForwardTo);
        Assert.True(options.EnableBatchedOperations);
        Assert.Equal("t/Subscriptions/s", options.Path);
    }

    [Fact]
    public void CreateSubscription_SendsOnlyAssignedProperties()
    {
        var options = new CreateSubscriptionOptions("t", "s")
        {
            LockDuration = TimeSpan.FromSeconds(20),
            EnableDeadLetteringOnFilterEvaluationExceptions = false,
            ForwardTo = "audit",
        };

        var proto = SubscriptionMapper.ToProto(options, onlyAssigned: true);

        Assert.Equal(TimeSpan.FromSeconds(20), proto.LockDuration.ToTimeSpan());
        Assert.True(proto.HasDeadLetteringOnFilterEvaluationExceptions);
        Assert.False(proto.DeadLetteringOnFilterEvaluationExceptions);
        Assert.Equal("audit", proto.ForwardTo);
        Assert.False(proto.HasMaxDeliveryCount);
        Assert.False(proto.HasForwardDeadLetteredMessagesTo);
        Assert.False(proto.HasRequiresSession);
        Assert.Null(proto.DefaultMessageTimeToLive);
    }

    [Theory]
    [InlineData(null)]
    [InlineData("")]
    [InlineData("  ")]
    public void UpdateSubscription_ClearingForwarding_SendsEmptyStrings(string? value)
    {
        var subscription = new SubscriptionProperties("t", "s") { ForwardTo = value, ForwardDeadLetteredMessagesTo = value };

        var proto = SubscriptionMapper.ToProto(subscription, onlyAssigned: true);

        Assert.True(proto.HasForwardTo);
        Assert.Equal(string.Empty, proto.ForwardTo);
        Assert.True(proto.HasForwardDeadLetteredMessagesTo);
        Assert.Equal(string.Empty, proto.ForwardDeadLetteredMessagesTo);
    }

    [Fact]
    public void SubscriptionInfo_LoadsEverything_AndMarksNothingAssigned()
    {
        var info = new Proto.SubscriptionInfo
        {
            Topic = "events",
            Name = "audit",
            Path = "events/Subscriptions/audit",
            Properties = new Proto.SubscriptionProperties
            {
                LockDuration = Duration.FromTimeSpan(TimeSpan.FromSeconds(90)),
                MaxDeliveryCount = 3,
                DefaultMessageTimeToLive = new Duration { Seconds = 315_576_000_000 },
                DeadLetteringOnMessageExpiration = true,
                DeadLetteringOnFilterEvaluationExceptions = false,
                RequiresSession = false,
                ForwardTo = "archive",
                ForwardDeadLetteredMessagesTo = "",
                EnableBatchedOperations = false,
            },
            Counts = new Proto.MessageCounts { Active = 6, Scheduled = 1, Deferred = 2, DeadLetter = 3, Locked = 4, Total = 12, SizeInBytes = 999 },
        };

        var subscription = SubscriptionMapper.FromInfo(info);
        var runtime = SubscriptionMapper.RuntimeFromInfo(info);

        Assert.Equal(("events", "audit", "events/Subscriptions/audit"), (subscription.TopicName, subscription.SubscriptionName, subscription.Path));
        Assert.Equal(TimeSpan.FromSeconds(90), subscription.LockDuration);
        Assert.Equal(3, subscription.MaxDeliveryCount);
        Assert.Equal(TimeSpan.MaxValue, subscription.DefaultMessageTimeToLive);
        Assert.True(subscription.DeadLetteringOnMessageExpiration);
        Assert.False(subscription.EnableDeadLetteringOnFilterEvaluationExceptions);
        Assert.Equal("archive", subscription.ForwardTo);
        Assert.Null(subscription.ForwardDeadLetteredMessagesTo);
        Assert.False(subscription.EnableBatchedOperations);
        Assert.Equal(0, subscription.AssignedCount);
        Assert.Equal(("events", "audit"), (runtime.TopicName, runtime.SubscriptionName));
        Assert.Equal((6L, 1L, 2L, 3L, 4L, 12L, 999L), (runtime.ActiveMessageCount, runtime.ScheduledMessageCount, runtime.DeferredMessageCount, runtime.DeadLetterMessageCount, runtime.LockedMessageCount, runtime.TotalMessageCount, runtime.SizeInBytes));

        subscription.MaxDeliveryCount = 5;
        var update = SubscriptionMapper.ToProto(subscription, onlyAssigned: true);
        Assert.Equal(5, update.MaxDeliveryCount);
        Assert.False(update.HasForwardTo);
        Assert.Null(update.LockDuration);
    }

    [Fact]
    public void InvalidValues_AreRejectedWhenSet()
    {
        var topic = new TopicProperties("t");
        var subscription = new SubscriptionProperties("t", "s");

        Assert.Throws<ArgumentOutOfRangeException>(() => topic.MaxSizeInMegabytes = 0);
        Assert.Throws<ArgumentOutOfRangeException>(() => topic.DefaultMessageTimeToLive = TimeSpan.Zero);
        Assert.Throws<ArgumentOutOfRangeException>(() => subscription.LockDuration = TimeSpan.FromSeconds(-1));
        Assert.Throws<ArgumentOutOfRangeException>(() => subscription.MaxDeliveryCount = 0);
        Assert.Throws<ArgumentException>(() => new CreateSubscriptionOptions("t", " "));
        Assert.Equal(0, topic.AssignedCount + subscription.AssignedCount);
    }
}
