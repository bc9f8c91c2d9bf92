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
    /// broker agrees. Off by default for now: under a planned move with completes in flight, a
    /// settlement the broker did can lose its answer with the stream, and the Settle call made for it
    /// then reports MessageLockLost (PlannedMoveTests.NodeDrain_UnderLoad, 2026-11-26). Off, every
    /// settlement goes by Settle call, as before.
    /// </summary>
    public bool SettleOnReceiveStream { get; init; }
}
