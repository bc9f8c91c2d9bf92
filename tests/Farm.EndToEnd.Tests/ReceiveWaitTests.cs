using Farm.Client;
using Farm.Testing;

namespace Farm.EndToEnd.Tests;

/// <summary>
/// Receives waiting on one receiver: each message that arrives goes to one of them, and a receive
/// that ended (timed out, or failed with its link) leaves nothing behind that could take a later
/// message. The SDK hands a buffered message to one waiting receive (the channel's ReadAsync); a
/// read left waiting by a receive that already returned would swallow the next message, for good
/// in ReceiveAndDelete (the broker deleted it when it sent it). A real node process.
/// </summary>
[Collection(FarmCollection.Name)]
public sealed class ReceiveWaitTests(SdkFarmFixture fixture) : IClassFixture<SdkFarmFixture>
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    private string Connection => fixture.Farm.ConnectionString;

    private static string NewName() => "wait-" + Guid.NewGuid().ToString("N")[..12];

    private async Task CreateQueueAsync(string name)
    {
        using var admin = new FarmAdministrationClient(Connection);
        await admin.CreateQueueAsync(name);
    }

    /// <summary>
    /// Eight receives wait on one receiver at once (a processor's workers do); eight messages sent one
    /// by one reach eight different receives. Without a prefetch each waiting receive holds credit of
    /// its own (before, the eight shared the credit of one: the first got a message, the other seven
    /// waited out their time with the messages still in the queue).
    /// </summary>
    [Theory]
    [InlineData(0)]
    [InlineData(8)]
    public async Task ReceivesWaitingTogether_EachGetOneOfTheMessagesSentOneByOne(int prefetch)
    {
        const int receives = 8;
        var queue = NewName();
        await CreateQueueAsync(queue);
        await using var client = new FarmClient(Connection);
        await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete, PrefetchCount = prefetch });
        var waiting = Enumerable.Range(0, receives).Select(_ => receiver.ReceiveMessageAsync(Patience)).ToList();

        await using var sender = client.CreateSender(queue);
        for (var i = 0; i < receives; i++)
        {
            await sender.SendMessageAsync(new FarmMessage($"m{i}") { MessageId = $"m{i}" });
        }
        var received = await Task.WhenAll(waiting).WaitAsync(Patience);

        Assert.Equal(Enumerable.Range(0, receives).Select(i => $"m{i}"), received.Select(m => m?.MessageId).Order());
    }

    /// <summary>
    /// Two receives wait together on a receiver without a prefetch, in ReceiveAndDelete; one gives up
    /// (its time runs out) and its credit is taken back, the other keeps its own: the message sent
    /// after that reaches the receive still waiting, and nothing is left on credit for nobody.
    /// </summary>
    [Fact]
    public async Task WhenOneOfTwoWaitingReceivesTimesOut_TheOtherStillGetsTheNextMessage()
    {
        var queue = NewName();
        await CreateQueueAsync(queue);
        await using var client = new FarmClient(Connection);
        await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });
        var patient = receiver.ReceiveMessageAsync(Patience);
        Assert.Null(await receiver.ReceiveMessageAsync(TimeSpan.FromMilliseconds(300)));

        await using var sender = client.CreateSender(queue);
        await sender.SendMessageAsync(new FarmMessage("for the one still waiting") { MessageId = "m-1" });

        Assert.Equal("m-1", (await patient.WaitAsync(Patience))?.MessageId);
    }

    /// <summary>A receive that timed out on a receiver leaves nothing waiting: the message sent next goes to the receiver's next receive.</summary>
    [Fact]
    public async Task AfterAReceiveTimedOut_TheSameReceiversNextReceiveGetsTheNextMessage()
    {
        var queue = NewName();
        await CreateQueueAsync(queue);
        await using var client = new FarmClient(Connection);
        await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete, PrefetchCount = 10 });
        Assert.Null(await receiver.ReceiveMessageAsync(TimeSpan.FromMilliseconds(200)));

        await using var sender = client.CreateSender(queue);
        await sender.SendMessageAsync(new FarmMessage("after the timeout") { MessageId = "m-1" });

        Assert.Equal("m-1", (await receiver.ReceiveMessageAsync(Patience))?.MessageId);
    }

    /// <summary>
    /// A receive that failed while it waited (its queue did not exist: the link failed with
    /// MessagingEntityNotFound) leaves no read behind: once the queue exists, the same receiver's
    /// next receive gets the message sent to it. A read left waiting would have taken it, and in
    /// ReceiveAndDelete nothing would bring it back.
    /// </summary>
    [Fact]
    public async Task AfterAReceiveFailedWithItsLink_TheSameReceiversNextReceiveGetsTheNextMessage()
    {
        var queue = NewName();
        await using var client = new FarmClient(Connection);
        await using var receiver = client.CreateReceiver(queue, new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete, PrefetchCount = 10 });
        var missing = await Assert.ThrowsAsync<FarmException>(() => receiver.ReceiveMessageAsync(Patience));
        Assert.Equal(FarmFailureReason.MessagingEntityNotFound, missing.Reason);

        await CreateQueueAsync(queue);
        await using var sender = client.CreateSender(queue);
        await sender.SendMessageAsync(new FarmMessage("after the failure") { MessageId = "m-1" });

        Assert.Equal("m-1", (await receiver.ReceiveMessageAsync(Patience))?.MessageId);
    }
}
