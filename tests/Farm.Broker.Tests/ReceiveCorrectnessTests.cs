using Farm.Contracts.V1;
using Google.Protobuf;

namespace Farm.Broker.Tests;

/// <summary>Receive responses a standard gRPC client can take, and deliveries that never reached anyone (issue 8, path 15).</summary>
public sealed class ReceiveCorrectnessTests
{
    [Fact]
    public async Task AReceiveResponse_StaysUnderTheResponseBudget_AndTheRestStayAvailableUncounted()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("big");
        for (var i = 0; i < 24; i++)
        {
            await queue.SendAsync([new Message { MessageId = $"big-{i}", Body = ByteString.CopyFrom(new byte[250 * 1024]) }]);
        }

        var first = await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 24, TimeSpan.Zero, default);

        Assert.InRange(first.Sum(m => m.CalculateSize()), 1, farm.Options.MaxReceiveResponseBytes);
        Assert.True(first.Count < 24);
        var counts = queue.GetCounts();
        Assert.Equal(first.Count, counts.Locked);
        var peeked = queue.Peek(false, 0, 24);
        Assert.InRange(peeked.Sum(m => m.CalculateSize()), 1, farm.Options.MaxReceiveResponseBytes);
        Assert.All(peeked.Where(p => !first.Any(f => f.SequenceNumber == p.SequenceNumber)), p => Assert.Equal(0, p.DeliveryCount));
    }

    [Fact]
    public async Task ReleasingUndeliveredMessages_GivesTheLocksBack_AndUncountsTheDeliveryDurably()
    {
        await using var farm = await BrokerHarness.StartAsync();
        var queue = await farm.CreateQueueAsync("orders");
        await queue.SendAsync([BrokerHarness.Text("one", "m-1")]);
        var taken = Assert.Single(await queue.ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal(1, taken.DeliveryCount);

        await queue.ReleaseUndeliveredAsync(false, [taken.LockToken]);
        await farm.RestartAsync();

        var again = Assert.Single(await (await farm.QueueAsync("orders")).ReceiveAsync(false, ReceiveMode.PeekLock, 1, TimeSpan.Zero, default));
        Assert.Equal("m-1", again.Message.MessageId);
        Assert.Equal(1, again.DeliveryCount);
    }
}
