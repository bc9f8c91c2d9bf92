using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>
/// Sends one batch a queue's forwarder forwards (ForwardTo, ForwardDeadLetteredMessagesTo) to the
/// entity named <paramref name="target"/>, wherever it is served: the messages are stored there
/// (durable) when the task completes. Set by the node (<see cref="Node.BrokerNode.ForwardAsync"/>).
/// </summary>
/// <param name="deadLetterSource">For dead letters: the entity they were dead-lettered in.</param>
/// <param name="name">The same on every try of this batch, so a target on another node stores it once.</param>
/// <param name="origin">This entity's forwarding and each message's sequence number here: the target records each message under it and leaves out what it recorded, so a repeat cut into other batches (by a next owner) stores none twice.</param>
/// <param name="repeat">The batch may have been sent before (a try failed, or this entity was just loaded).</param>
internal delegate Task ForwardSend(
    string target, IReadOnlyList<Message> messages, string? deadLetterSource, SendName name, ForwardOrigin origin, bool repeat, CancellationToken cancellationToken);
