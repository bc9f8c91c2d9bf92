using Farm.Broker.Entities;

namespace Farm.Broker.Tests;

/// <summary>
/// When a forwarded send must read its messages' records (ForwardSenders): only where another send
/// of them may have been stored. The end-to-end behaviour (stored once whatever sends them) is in
/// ForwardingCorrectnessTests; these pin the decision itself, with a clock in milliseconds.
/// </summary>
public sealed class ForwardSendersTests
{
    private const long Window = 120_000;
    private const string Source = "farm.forward/9/main";
    private const long Entity = 4;

    private static ForwardOrigin Sent(long incarnation, bool repeat = false) => new(Source, [1, 2], incarnation, repeat);

    [Fact]
    public async Task ALoadsOwnSends_AreNotLookedUp_InAContainerNoForwarderWroteTo_ButItsRepeatsAre()
    {
        var senders = new ForwardSenders(_ => Task.FromResult<long?>(null));

        Assert.False(await senders.MustLookAsync(Entity, Sent(7), nowMs: 1_000_000, default));
        Assert.False(await senders.MustLookAsync(Entity, Sent(7), nowMs: 1_000_010, default));
        Assert.True(await senders.MustLookAsync(Entity, Sent(7, repeat: true), nowMs: 1_000_020, default));
        Assert.False(await senders.MustLookAsync(Entity, Sent(7), nowMs: 1_000_030, default));
        Assert.Equal((1L, 3L), (senders.Lookups, senders.Skipped));
    }

    [Fact]
    public async Task WhileAPreviousOwnersForwardRecordIsInTheWindow_EverySendIsLookedUp()
    {
        var reads = 0;
        var senders = new ForwardSenders(_ =>
        {
            reads++;
            return Task.FromResult<long?>(500_000);
        });

        Assert.True(await senders.MustLookAsync(Entity, Sent(7), nowMs: 600_000, default));
        Assert.True(await senders.MustLookAsync(Entity, Sent(7), nowMs: 500_000 + Window - 1, default));
        Assert.True(await senders.MustLookAsync(Entity + 1, Sent(8), nowMs: 610_000, default));
        Assert.False(await senders.MustLookAsync(Entity, Sent(7), nowMs: 500_000 + Window, default));
        // First heard of after the previous owner's records left the window: nothing to find.
        Assert.False(await senders.MustLookAsync(Entity + 2, Sent(9), nowMs: 700_000, default));
        Assert.Equal(1, reads);
    }

    [Fact]
    public async Task AnotherLoadOfTheSource_MakesEverySendOfEitherLookUp_ForAWindowFromTheLastSwitch()
    {
        var senders = new ForwardSenders(_ => Task.FromResult<long?>(null));
        Assert.False(await senders.MustLookAsync(Entity, Sent(7), nowMs: 1_000_000, default));

        // The source's next owner (load 8), and its frozen predecessor (load 7) still sending after it resumed.
        Assert.True(await senders.MustLookAsync(Entity, Sent(8), nowMs: 1_000_100, default));
        Assert.True(await senders.MustLookAsync(Entity, Sent(8), nowMs: 1_000_200, default));
        Assert.True(await senders.MustLookAsync(Entity, Sent(7), nowMs: 1_050_000, default));
        Assert.True(await senders.MustLookAsync(Entity, Sent(8), nowMs: 1_050_100, default));
        Assert.True(await senders.MustLookAsync(Entity, Sent(8), nowMs: 1_050_100 + Window - 1, default));
        Assert.False(await senders.MustLookAsync(Entity, Sent(8), nowMs: 1_050_100 + Window, default));

        // Heard at one entity, a load is new to another: what it sent there before this owner is unknown only to a previous owner.
        Assert.False(await senders.MustLookAsync(Entity + 1, Sent(8), nowMs: 1_300_000, default));
    }

    [Fact]
    public async Task ASendThatDoesNotNameItsLoad_IsAlwaysLookedUp()
    {
        var senders = new ForwardSenders(_ => Task.FromResult<long?>(null));

        Assert.True(await senders.MustLookAsync(Entity, Sent(0), nowMs: 1_000_000, default));
        Assert.True(await senders.MustLookAsync(Entity, Sent(0), nowMs: 9_000_000, default));
        Assert.Equal(2, senders.Lookups);
    }

    [Fact]
    public async Task AFailedReadOfTheNewestRecord_FailsTheSend_AndIsReadAgainByTheNext()
    {
        var reads = 0;
        var senders = new ForwardSenders(_ => ++reads == 1
            ? Task.FromException<long?>(new IOException("the container database went away"))
            : Task.FromResult<long?>(null));

        await Assert.ThrowsAsync<IOException>(async () => await senders.MustLookAsync(Entity, Sent(7), nowMs: 1_000_000, default));
        Assert.False(await senders.MustLookAsync(Entity, Sent(7), nowMs: 1_000_010, default));
        Assert.Equal(2, reads);
    }
}
