namespace Farm.Gateway.Routing;

/// <summary>How a gateway routes a call for an entity another node serves; validated when the node starts.</summary>
public sealed class ForwardingOptions
{
    /// <summary>
    /// How long the gateway waits for the owner to answer a unary call it forwarded (plus a
    /// receive's own max wait) before it starts asking whether the owner is gone: once the farm
    /// says the owner is dead or no longer the owner, the gateway gives the call up and holds it for
    /// the next owner. A slow owner that is still alive keeps the call: a send given up may still
    /// commit there, and its retry would be a second copy. (`--forward-timeout`)
    /// </summary>
    public TimeSpan ForwardTimeout { get; set; } = TimeSpan.FromSeconds(3);

    /// <summary>
    /// How long a call whose entity has no live owner (a failover or a planned move in progress)
    /// is held before the caller gets the error: the caller sees a slower call, not a failure and
    /// a retry backoff.
    /// </summary>
    public TimeSpan OwnerWait { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>How often a held call looks again for the owner.</summary>
    public TimeSpan OwnerPoll { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>Null when usable, else what is wrong.</summary>
    public string? Validate() =>
        ForwardTimeout <= TimeSpan.Zero ? $"ForwardTimeout must be positive; got {ForwardTimeout}."
        : OwnerPoll <= TimeSpan.Zero ? $"OwnerPoll must be positive; got {OwnerPoll}."
        : OwnerWait < OwnerPoll ? $"OwnerWait ({OwnerWait}) must be at least OwnerPoll ({OwnerPoll})."
        : null;
}
