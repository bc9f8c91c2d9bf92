using Microsoft.Azure.Amqp;

namespace Farm.Gateway.Amqp.Links;

internal static class LinkCredit
{
    /// <summary>
    /// Gives a client's sender link <paramref name="credit"/>, kept topped up as transfers are
    /// settled. The flow that carries it can only go once the link is open (the SDKs wait about a
    /// second for it), so it is sent when the attach has been answered, not while it is processed.
    /// </summary>
    public static void GrantOnOpen(ReceivingAmqpLink link, uint credit)
    {
        link.SetTotalLinkCredit(credit, applyNow: false, updateAutoFlow: true);
        link.Opened += (_, _) => link.SetTotalLinkCredit(credit, applyNow: true, updateAutoFlow: true);
    }
}
