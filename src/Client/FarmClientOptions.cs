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
    /// did it) is made again by a Settle call, which then reports MessageLockLost.
    /// </summary>
    public bool SettleOnReceiveStream { get; init; } = true;
}
