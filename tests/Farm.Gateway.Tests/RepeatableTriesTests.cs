using Farm.Contracts.V1;
using Farm.Gateway.Routing;

namespace Farm.Gateway.Tests;

/// <summary>
/// A Send or Settle the gateway forwards again says it is a repeat from its second try on, through
/// a copy: the original, which a broken try may still be writing, is never changed.
/// </summary>
public sealed class RepeatableTriesTests
{
    [Fact]
    public void TheFirstTryIsTheRequest_LaterTriesAreOneMarkedCopy()
    {
        var send = new SendRequest { Entity = "orders", ProducerId = "p", SendId = 3 };
        var tries = RepeatableTries.Of(send);

        var first = tries.Next();
        var second = tries.Next();
        var third = tries.Next();

        Assert.Same(send, first);
        Assert.False(send.Repeat);
        Assert.Equal(new SendRequest { Entity = "orders", ProducerId = "p", SendId = 3, Repeat = true }, second);
        Assert.Same(second, third);
    }

    [Fact]
    public void ASettlesLaterTries_AreMarkedToo()
    {
        var settle = new SettleRequest { Entity = "orders" };
        var tries = RepeatableTries.Of(settle);

        Assert.False(tries.Next().Repeat);
        Assert.True(tries.Next().Repeat);
        Assert.False(settle.Repeat);
    }
}
