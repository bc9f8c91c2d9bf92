namespace Farm.Client;

/// <summary>Options of a <see cref="FarmClient"/>.</summary>
public sealed record FarmClientOptions
{
    public FarmRetryOptions RetryOptions { get; init; } = new();

    /// <summary>Used for lock renewal timing and receive waits; tests may pass a fake.</summary>
    public TimeProvider TimeProvider { get; init; } = TimeProvider.System;

    /// <summary>Identifies this client in telemetry; defaults to a generated id.</summary>
    public string? Identifier { get; init; }
}
