namespace Farm.Client;

/// <summary>A failed Farm operation: the reason, whether retrying may help, and the entity involved.</summary>
public sealed class FarmException : Exception
{
    public FarmException(string message, FarmFailureReason reason, string? entityPath = null, Exception? innerException = null)
        : base(message, innerException)
    {
        Reason = reason;
        EntityPath = entityPath;
    }

    public FarmFailureReason Reason { get; }

    /// <summary>The queue (or other entity) the operation was on, when there was one.</summary>
    public string? EntityPath { get; }

    /// <summary>True when the same operation may succeed if tried again (the client already retried it).</summary>
    public bool IsTransient => IsTransientReason(Reason);

    internal static bool IsTransientReason(FarmFailureReason reason) => reason
        is FarmFailureReason.ServiceCommunicationProblem
        or FarmFailureReason.ServiceTimeout
        or FarmFailureReason.ServiceBusy
        or FarmFailureReason.StoreUnavailable
        or FarmFailureReason.NotOwner
        or FarmFailureReason.StaleEpoch;
}
