namespace Farm.Client;

/// <summary>The broker's size limits, as the client checks them before sending.</summary>
public static class FarmMessageLimits
{
    /// <summary>Largest single message: 256 KB (Azure Service Bus Standard tier).</summary>
    public const int MaxMessageSizeInBytes = 256 * 1024;

    /// <summary>Largest batch sent in one Send call: 1 MB.</summary>
    public const int MaxBatchSizeInBytes = 1024 * 1024;

    /// <summary>Most messages in one batch.</summary>
    public const int MaxMessagesPerBatch = 4500;
}
