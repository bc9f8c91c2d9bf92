namespace Farm.Client;

/// <summary>Options of a <see cref="FarmClient"/>.</summary>
public sealed record FarmClientOptions
{
    public FarmRetryOptions RetryOptions { get; init; } = new();

    /// <summary>Used for lock renewal timing and receive waits; tests may pass a fake.</summary>
    public TimeProvider TimeProvider { get; init; } = TimeProvider.System;

    /// <summary>Identifies this client in telemetry; defaults to a generated id.</summary>
    public string? Identifier { get; init; }

    /// <summary>
    /// Peek-lock receivers settle over their receive stream (no Settle call per batch) where the
    /// broker agrees; the default. Off, every settlement goes by Settle call, as against an older
    /// broker. Either way a settlement whose answer was lost (the connection broke after the broker
    /// did it) is made again by a Settle call marked as a repeat, which the broker answers as done
    /// while it remembers the settlement.
    /// </summary>
    public bool SettleOnReceiveStream { get; init; } = true;

    /// <summary>
    /// Sends go over one stream per endpoint that every sender of the client shares (sends made
    /// together share a request); the default. Off, each send is a Send call of its own. Either way
    /// a send means the same: acknowledged once durable, sent again by the retry policy when its
    /// answer was lost. Against a node that predates the stream, sends fall back to Send calls.
    /// </summary>
    public bool SendOverStream { get; init; } = true;

    /// <summary>
    /// Receivers share one ReceiveSession stream per endpoint, a link each (frames of many links
    /// share a request or a response); the default. Off, each receiver opens a Receive call of its
    /// own. Either way a receiver behaves the same. Against a node that predates sessions,
    /// receivers fall back to Receive calls.
    /// </summary>
    public bool ReceiveOverSession { get; init; } = true;
}
