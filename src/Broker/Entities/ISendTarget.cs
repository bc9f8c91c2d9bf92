using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>What messages can be sent to: a queue or a topic (a subscription only receives).</summary>
internal interface ISendTarget
{
    string Name { get; }

    /// <summary>
    /// Stores the messages as one atomic batch and returns their sequence numbers once durable (0 for
    /// a message dropped by duplicate detection).
    /// </summary>
    Task<long[]> SendAsync(IReadOnlyList<Message> messages);

    /// <summary>Removes scheduled messages that are not visible yet.</summary>
    Task CancelScheduledAsync(IReadOnlyList<long> sequenceNumbers);
}
