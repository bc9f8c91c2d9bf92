namespace Farm.Client.Tests;

public class BatchTests
{
    [Fact]
    public void TryAdd_StopsAtTheBatchSizeLimit()
    {
        using var batch = new FarmMessageBatch(FarmMessageLimits.MaxBatchSizeInBytes);
        var body = new byte[100 * 1024];

        var added = 0;
        while (batch.TryAddMessage(new FarmMessage(body)))
        {
            added++;
        }

        Assert.Equal(10, added);
        Assert.Equal(10, batch.Count);
        Assert.True(batch.SizeInBytes <= FarmMessageLimits.MaxBatchSizeInBytes);
    }

    [Fact]
    public void TryAdd_MessageOverThePerMessageLimit_IsRefused()
    {
        using var batch = new FarmMessageBatch(FarmMessageLimits.MaxBatchSizeInBytes);

        Assert.False(batch.TryAddMessage(new FarmMessage(new byte[FarmMessageLimits.MaxMessageSizeInBytes + 1])));
        Assert.Equal(0, batch.Count);
    }

    [Fact]
    public void TryAdd_RespectsASmallerMaximum()
    {
        using var batch = new FarmMessageBatch(1000);

        Assert.True(batch.TryAddMessage(new FarmMessage(new byte[600])));
        Assert.False(batch.TryAddMessage(new FarmMessage(new byte[600])));
        Assert.Equal(1, batch.Count);
    }

    [Fact]
    public void Limits_AreThoseOfTheBroker()
    {
        Assert.Equal(256 * 1024, FarmMessageLimits.MaxMessageSizeInBytes);
        Assert.Equal(1024 * 1024, FarmMessageLimits.MaxBatchSizeInBytes);
    }

    [Fact]
    public async Task CreateMessageBatch_AboveTheLimit_Throws()
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        var sender = client.CreateSender("q");

        await Assert.ThrowsAsync<ArgumentOutOfRangeException>(async () => await sender.CreateMessageBatchAsync(new CreateMessageBatchOptions { MaxSizeInBytes = FarmMessageLimits.MaxBatchSizeInBytes + 1 }));
    }

    [Fact]
    public async Task SendMessages_OverTheBatchLimit_FailsBeforeSending()
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        var sender = client.CreateSender("q");
        var messages = Enumerable.Range(0, 5).Select(_ => new FarmMessage(new byte[250 * 1024]));

        var error = await Assert.ThrowsAsync<FarmException>(() => sender.SendMessagesAsync(messages));

        Assert.Equal(FarmFailureReason.MessageSizeExceeded, error.Reason);
        Assert.Equal("q", error.EntityPath);
    }

    [Fact]
    public async Task SendMessage_OverTheMessageLimit_FailsBeforeSending()
    {
        await using var client = new FarmClient("Endpoint=http://127.0.0.1:1");
        var sender = client.CreateSender("q");

        var error = await Assert.ThrowsAsync<FarmException>(() => sender.SendMessageAsync(new FarmMessage(new byte[FarmMessageLimits.MaxMessageSizeInBytes + 1])));

        Assert.Equal(FarmFailureReason.MessageSizeExceeded, error.Reason);
    }
}
