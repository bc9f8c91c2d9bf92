using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>What messages can be sent to: a queue or a topic (a subscription only receives).</summary>
internal interface ISendTarget
{
    string Name { get; }

    /// <summary>
    /// Stores the messages as one atomic batch and returns their sequence numbers once durable (0 for
    /// a message dropped by duplicate detection). <paramref name="deadLetterSource"/>: for messages
    /// auto-forwarded from a dead-letter queue, the entity they were dead-lettered in (Azure's
    /// DeadLetterSource); receivers see it on every copy.
    /// </summary>
    Task<long[]> SendAsync(IReadOnlyList<Message> messages, string? deadLetterSource = null);

    /// <summary>Removes scheduled messages that are not visible yet.</summary>
    Task CancelScheduledAsync(IReadOnlyList<long> sequenceNumbers);
}
