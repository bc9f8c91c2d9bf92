using Farm.Testing;
using Farm.Broker.Messaging;
using Farm.Contracts.V1;

namespace Farm.Broker.Tests;

/// <summary>
/// Settling over a peek-lock receive stream (ReceiveOpen.settle_on_stream): the broker says it takes
/// settlements first, answers each by its id with the results a Settle call would give, and says
/// nothing when not asked, when switched off (as an older broker) or in receive-and-delete.
/// </summary>
public sealed class ReceiveStreamSettleTests : IAsyncLifetime
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);
    private BrokerHarness _farm = null!;

    public async Task InitializeAsync() => _farm = await BrokerHarness.StartAsync();

    public async Task DisposeAsync() => await _farm.DisposeAsync();

    private static ReceiveOpen PeekLockOpen(string queue, bool settleOnStream = true) =>
        new() { Entity = queue, Mode = ReceiveMode.PeekLock, Credit = 10, SettleOnStream = settleOnStream };

    private static ReceiveRequest Settle(long id, params string[] lockTokens) => new()
    {
        Settle = new ReceiveSettle { Id = id, Settlements = { lockTokens.Select(t => new Settlement { LockToken = t, Disposition = Disposition.Complete }) } },
    };

    [Fact]
    public async Task APeekLockStreamThatAsks_SaysSoFirst_AndAnswersEachSettleByItsIdWithTheResults()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("a"), BrokerHarness.Text("b"), BrokerHarness.Text("c")]);
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), PeekLockOpen("q"));

        Assert.True((await stream.NextAsync()).SettlesOnStream);
        var delivered = new List<ReceivedMessage>();
        while (delivered.Count < 3)
        {
            delivered.AddRange((await stream.NextAsync()).Messages);
        }
        stream.Send(Settle(7, delivered[0].LockToken, delivered[1].LockToken, Guid.NewGuid().ToString()));

        var settled = (await stream.NextAsync()).Settled;
        Assert.Equal(7, settled.Id);
        Assert.Equal(FarmErrorCode.Unspecified, settled.ErrorCode);
        Assert.Equal([FarmErrorCode.Unspecified, FarmErrorCode.Unspecified, FarmErrorCode.MessageLockLost], settled.Results.Select(r => r.ErrorCode));
        var counts = queue.GetCounts();
        Assert.Equal(1, counts.Active);

        // Settling the same lock again: the lock is gone, as with a Settle call.
        stream.Send(Settle(8, delivered[0].LockToken, delivered[2].LockToken));
        var again = (await stream.NextAsync()).Settled;
        Assert.Equal(8, again.Id);
        Assert.Equal([FarmErrorCode.MessageLockLost, FarmErrorCode.Unspecified], again.Results.Select(r => r.ErrorCode));
        await Eventually.UntilAsync(() => queue.GetCounts().Active == 0, Patience, "every message completed over the stream");
    }

    /// <summary>
    /// A client that reads counts gets "all N succeeded" for settlements that all did, instead of a
    /// result each echoing its lock token; one that failed brings back a result for each.
    /// </summary>
    [Fact]
    public async Task SettlementsThatAllSucceed_AreAnsweredWithTheirCount_WhenTheClientReadsCounts()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("a"), BrokerHarness.Text("b"), BrokerHarness.Text("c"), BrokerHarness.Text("d")]);
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), PeekLockOpen("q"));
        Assert.True((await stream.NextAsync()).SettlesOnStream);
        var delivered = new List<ReceivedMessage>();
        while (delivered.Count < 4)
        {
            delivered.AddRange((await stream.NextAsync()).Messages);
        }

        var counted = Settle(1, delivered[0].LockToken, delivered[1].LockToken);
        counted.Settle.AcceptsAllSucceeded = true;
        stream.Send(counted);
        var settled = (await stream.NextAsync()).Settled;
        Assert.Equal((1L, 2, 0), (settled.Id, settled.AllSucceeded, settled.Results.Count));

        var oneFails = Settle(2, delivered[2].LockToken, delivered[0].LockToken);
        oneFails.Settle.AcceptsAllSucceeded = true;
        stream.Send(oneFails);
        var mixed = (await stream.NextAsync()).Settled;
        Assert.Equal(0, mixed.AllSucceeded);
        Assert.Equal([FarmErrorCode.Unspecified, FarmErrorCode.MessageLockLost], mixed.Results.Select(r => r.ErrorCode));

        // A client that does not read counts gets the results, as before.
        stream.Send(Settle(3, delivered[3].LockToken));
        var plain = (await stream.NextAsync()).Settled;
        Assert.Equal(0, plain.AllSucceeded);
        Assert.Equal((FarmErrorCode.Unspecified, delivered[3].LockToken), (Assert.Single(plain.Results).ErrorCode, plain.Results[0].LockToken));
        await Eventually.UntilAsync(() => queue.GetCounts().Active == 0, Patience, "every message completed over the stream");
    }

    /// <summary>
    /// A settlement may carry the receiver's credit refill (ReceiveSettle.credit), once the stream
    /// said it reads it: that credit brings the next messages as a credit request's would, and a
    /// settlement without it adds none (a drain then finds nothing more taken).
    /// </summary>
    [Fact]
    public async Task CreditCarriedByASettlement_BringsTheNextMessages_AsACreditRequestWould()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("a"), BrokerHarness.Text("b"), BrokerHarness.Text("c"), BrokerHarness.Text("d")]);
        var open = PeekLockOpen("q");
        open.Credit = 1;
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), open);

        var first = await stream.NextAsync();
        Assert.True(first.SettlesOnStream);
        Assert.True(first.SettleCredit);
        var a = Assert.Single((await stream.NextAsync()).Messages);

        var withCredit = Settle(1, a.LockToken);
        withCredit.Settle.Credit = 2;
        stream.Send(withCredit);
        var delivered = new List<ReceivedMessage>();
        ReceiveSettled? settled = null;
        while (delivered.Count < 2 || settled is null)
        {
            var response = await stream.NextAsync();
            delivered.AddRange(response.Messages);
            settled ??= response.Settled;
        }
        Assert.Equal(["b", "c"], delivered.Select(m => m.Message.Body.ToStringUtf8()));
        Assert.Equal(1, settled.Results.Count(r => r.ErrorCode == FarmErrorCode.Unspecified));

        // Settled without credit: the stream has none left, so a drain finds no message taken for it.
        stream.Send(Settle(2, delivered[0].LockToken, delivered[1].LockToken));
        stream.Send(new ReceiveRequest { Drain = new ReceiveDrain() });
        var afterwards = new List<ReceiveResponse>();
        while (!afterwards.Any(r => r.Drained) || !afterwards.Any(r => r.Settled is not null))
        {
            afterwards.Add(await stream.NextAsync());
        }
        Assert.Empty(afterwards.SelectMany(r => r.Messages));
        Assert.Equal(1, queue.GetCounts().Active);
    }

    /// <summary>Not asked, switched off (an older broker) or receive-and-delete: no word about settling, and a settle request goes unanswered.</summary>
    [Theory]
    [InlineData("not asked")]
    [InlineData("switched off")]
    [InlineData("receive-and-delete")]
    public async Task WhenNotOffered_TheStreamSaysNothingOfSettling_AndIgnoresSettleRequests(string why)
    {
        if (why == "switched off")
        {
            _farm.Options.SettleOnReceiveStream = false;
        }
        var queue = await _farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("a")]);
        var open = why switch
        {
            "not asked" => PeekLockOpen("q", settleOnStream: false),
            "receive-and-delete" => new ReceiveOpen { Entity = "q", Mode = ReceiveMode.ReceiveAndDelete, Credit = 10, SettleOnStream = true },
            _ => PeekLockOpen("q"),
        };
        await using var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), open);

        var first = await stream.NextAsync();
        Assert.False(first.SettlesOnStream);
        var message = Assert.Single(first.Messages);
        stream.Send(Settle(1, message.LockToken.Length > 0 ? message.LockToken : Guid.NewGuid().ToString()));

        Assert.DoesNotContain(await stream.DrainAsync(TimeSpan.FromMilliseconds(300)), r => r.Settled is not null);
        if (why != "receive-and-delete")
        {
            Assert.Equal(1, queue.GetCounts().Active);
        }
    }

    /// <summary>
    /// Settlements whose commit the store refuses (another owner raised the container's epoch, so the
    /// commit fails on it) are each answered with that error, as a Settle call's results would be, and
    /// nothing is completed: the messages stay for the new owner to deliver again.
    /// </summary>
    [Fact]
    public async Task ASettleWhoseCommitFails_AnswersEachSettlementWithTheStoresError_AndCompletesNothing()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("a"), BrokerHarness.Text("b")]);
        var stream = ReceiveStreamDriver.Open(new MessagingService(_farm.Node), PeekLockOpen("q"));
        Assert.True((await stream.NextAsync()).SettlesOnStream);
        var delivered = new List<ReceivedMessage>();
        while (delivered.Count < 2)
        {
            delivered.AddRange((await stream.NextAsync()).Messages);
        }
        var container = _farm.Node.Containers.Single();
        Assert.True(await container.Database.RaiseEpochAsync(container.Epoch + 1));

        stream.Send(Settle(5, delivered[0].LockToken, delivered[1].LockToken));

        ReceiveSettled? settled = null;
        while (settled is null)
        {
            settled = (await stream.NextAsync()).Settled;
        }
        Assert.Equal(5, settled.Id);
        Assert.Equal(FarmErrorCode.Unspecified, settled.ErrorCode);
        Assert.Equal([delivered[0].LockToken, delivered[1].LockToken], settled.Results.Select(r => r.LockToken));
        Assert.All(settled.Results, r =>
        {
            Assert.Equal(FarmErrorCode.StaleEpoch, r.ErrorCode);
            Assert.Contains("moved to another broker", r.ErrorMessage);
        });
        var stored = await _farm.ReadContainerDirectlyAsync(1, queue.Id);
        Assert.Equal(["a", "b"], stored.Messages.Select(m => Message.Parser.ParseFrom(m.Payload).Body.ToStringUtf8()));
        await stream.DisposeAsync();
    }

    /// <summary>
    /// A stream whose entity stops being served here ends; a settle sent after that is not taken
    /// (the client makes it by a Settle call, which gets the entity's answer), and the stream ends
    /// with the entity's error.
    /// </summary>
    [Fact]
    public async Task ASettleSentAfterTheEntityStoppedBeingServed_IsNotTaken_AndTheStreamEndsWithTheEntitysError()
    {
        var queue = await _farm.CreateQueueAsync("q");
        await queue.SendAsync([BrokerHarness.Text("a")]);
        var service = new MessagingService(_farm.Node);
        var stream = ReceiveStreamDriver.Open(service, PeekLockOpen("q"));
        Assert.True((await stream.NextAsync()).SettlesOnStream);
        var message = Assert.Single((await stream.NextAsync()).Messages);

        queue.MarkDeleted();
        var ended = await Assert.ThrowsAsync<BrokerException>(() => stream.Running.WaitAsync(Patience));
        Assert.Equal(FarmErrorCode.MessagingEntityNotFound, ended.Code);
        stream.Send(Settle(3, message.LockToken));

        Assert.DoesNotContain(await stream.DrainAsync(TimeSpan.FromMilliseconds(300)), r => r.Settled is not null);
        await stream.DisposeAsync();
    }
}
