using Farm.Contracts.V1;

namespace Farm.Client.Tests;

public class ReceiverTests
{
    private static FarmReceivedMessage Received(bool settleable, string lockToken = "lock")
        => MessageMapper.FromProto(new ReceivedMessage { Message = new Message(), SequenceNumber = 1, LockToken = lockToken }, "q", settleable);

    [Fact]
    public async Task Settling_APeekedMessage_ThrowsInvalidOperation()
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await using var receiver = client.CreateReceiver("q");

        await Assert.ThrowsAsync<InvalidOperationException>(() => receiver.CompleteMessageAsync(Received(settleable: false)));
        await Assert.ThrowsAsync<InvalidOperationException>(() => receiver.RenewMessageLockAsync(Received(settleable: false)));
    }

    [Fact]
    public async Task Settling_InReceiveAndDeleteMode_ThrowsInvalidOperation()
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await using var receiver = client.CreateReceiver("q", new FarmReceiverOptions { ReceiveMode = FarmReceiveMode.ReceiveAndDelete });

        await Assert.ThrowsAsync<InvalidOperationException>(() => receiver.AbandonMessageAsync(Received(settleable: true)));
    }

    [Theory]
    [InlineData("orders", SubQueue.DeadLetter, "orders/$DeadLetterQueue")]
    [InlineData("orders/$DeadLetterQueue", SubQueue.DeadLetter, "orders/$DeadLetterQueue")]
    [InlineData("orders/$DeadLetterQueue", SubQueue.None, "orders/$DeadLetterQueue")]
    [InlineData("/orders/", SubQueue.None, "orders")]
    public async Task EntityPath_AppliesTheSubQueue(string path, SubQueue subQueue, string expected)
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await using var receiver = client.CreateReceiver(path, new FarmReceiverOptions { SubQueue = subQueue });

        Assert.Equal(expected, receiver.EntityPath);
    }

    [Fact]
    public void Processor_PrefetchDefaultsToThreeTimesConcurrency()
    {
        Assert.Equal(3, new FarmProcessorOptions().EffectivePrefetchCount);
        Assert.Equal(24, new FarmProcessorOptions { MaxConcurrentCalls = 8 }.EffectivePrefetchCount);
        Assert.Equal(0, new FarmProcessorOptions { MaxConcurrentCalls = 8, PrefetchCount = 0 }.EffectivePrefetchCount);
    }

    [Fact]
    public async Task Processor_StartWithoutHandlers_Throws()
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await using var processor = client.CreateProcessor("q");

        await Assert.ThrowsAsync<InvalidOperationException>(() => processor.StartProcessingAsync());
    }

    [Fact]
    public async Task DisposedClient_RefusesNewSenders()
    {
        var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        await client.DisposeAsync();

        Assert.Throws<ObjectDisposedException>(() => client.CreateSender("q"));
    }
}
