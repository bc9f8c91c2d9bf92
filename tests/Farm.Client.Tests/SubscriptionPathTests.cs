namespace Farm.Client.Tests;

public class SubscriptionPathTests
{
    [Theory]
    [InlineData(SubQueue.None, "orders/Subscriptions/audit")]
    [InlineData(SubQueue.DeadLetter, "orders/Subscriptions/audit/$DeadLetterQueue")]
    public async Task Receiver_OnASubscription_OpensItsPath(SubQueue subQueue, string expected)
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await using var receiver = client.CreateReceiver("orders", "audit", new FarmReceiverOptions { SubQueue = subQueue });

        Assert.Equal(expected, receiver.EntityPath);
    }

    [Theory]
    [InlineData(SubQueue.None, "orders/Subscriptions/audit")]
    [InlineData(SubQueue.DeadLetter, "orders/Subscriptions/audit/$DeadLetterQueue")]
    public async Task Processor_OnASubscription_OpensItsPath(SubQueue subQueue, string expected)
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await using var processor = client.CreateProcessor("orders", "audit", new FarmProcessorOptions { SubQueue = subQueue });

        Assert.Equal(expected, processor.EntityPath);
    }

    [Fact]
    public async Task Receiver_OnASubscriptionPath_IsTakenAsGiven()
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await using var receiver = client.CreateReceiver("orders/Subscriptions/audit/$DeadLetterQueue", new FarmReceiverOptions { SubQueue = SubQueue.DeadLetter });

        Assert.Equal("orders/Subscriptions/audit/$DeadLetterQueue", receiver.EntityPath);
    }

    [Theory]
    [InlineData("", "audit")]
    [InlineData("orders", " ")]
    [InlineData("orders/Subscriptions/x", "audit")]
    [InlineData("orders", "a/b")]
    public async Task Receiver_OnABadSubscriptionName_Throws(string topic, string subscription)
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");

        Assert.ThrowsAny<ArgumentException>(() => client.CreateReceiver(topic, subscription));
        Assert.ThrowsAny<ArgumentException>(() => client.CreateProcessor(topic, subscription));
    }

    [Theory]
    [InlineData("orders", "orders")]
    [InlineData("orders/$DeadLetterQueue", "orders")]
    [InlineData("events/Subscriptions/audit", "events")]
    [InlineData("events/Subscriptions/audit/$DeadLetterQueue", "events")]
    public void Redirect_LooksUpTheTopic_ForItsSubscriptions(string path, string entity)
    {
        // A topic and its subscriptions live in one container: one lookup, one cached owner.
        Assert.Equal(entity, FarmConnection.EntityNameOf(path));
    }

    [Fact]
    public void FormatSubscriptionPath_JoinsWithTheSubscriptionsSegment()
    {
        Assert.Equal("t/Subscriptions/s", FarmEntityPath.FormatSubscriptionPath("t", "s"));
        Assert.Equal("t/Subscriptions/s/$DeadLetterQueue", FarmEntityPath.FormatDeadLetterPath(FarmEntityPath.FormatSubscriptionPath("t", "s")));
    }
}
