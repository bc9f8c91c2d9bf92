namespace Farm.Client;

public enum FarmRetryMode
{
    /// <summary>Delays grow exponentially (with jitter) up to <see cref="FarmRetryOptions.MaxDelay"/>.</summary>
    Exponential,

    /// <summary>The same delay (with jitter) between attempts.</summary>
    Fixed,
}

/// <summary>How transient failures are retried, like Azure's ServiceBusRetryOptions.</summary>
public sealed record FarmRetryOptions
{
    public FarmRetryMode Mode { get; init; } = FarmRetryMode.Exponential;

    /// <summary>Retries after the first attempt; 0 disables retries.</summary>
    public int MaxRetries { get; init; } = 3;

    public TimeSpan Delay { get; init; } = TimeSpan.FromSeconds(0.8);

    public TimeSpan MaxDelay { get; init; } = TimeSpan.FromSeconds(60);

    /// <summary>The deadline of one attempt of one operation.</summary>
    public TimeSpan TryTimeout { get; init; } = TimeSpan.FromSeconds(60);

    internal void Validate()
    {
        if (MaxRetries is < 0 or > 100)
        {
            throw new ArgumentOutOfRangeException(nameof(MaxRetries), MaxRetries, "MaxRetries must be between 0 and 100.");
        }

        if (Delay < TimeSpan.Zero || Delay > TimeSpan.FromMinutes(5))
        {
            throw new ArgumentOutOfRangeException(nameof(Delay), Delay, "Delay must be between 0 and 5 minutes.");
        }

        if (MaxDelay < TimeSpan.Zero || MaxDelay > TimeSpan.FromDays(1))
        {
            throw new ArgumentOutOfRangeException(nameof(MaxDelay), MaxDelay, "MaxDelay must be between 0 and 1 day.");
        }

        if (TryTimeout <= TimeSpan.Zero)
        {
            throw new ArgumentOutOfRangeException(nameof(TryTimeout), TryTimeout, "TryTimeout must be positive.");
        }
    }
}
