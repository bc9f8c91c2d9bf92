using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>What messages can be sent to: a queue or a topic (a subscription only receives).</summary>
internal interface ISendTarget
{
    string Name { get; }

    /// <summary>The entity's id: records in its container name the entity they stored into.</summary>
    long Id { get; }

    /// <summary>
    /// Stores the messages as one atomic batch and returns their sequence numbers once durable (0 for
    /// a message dropped by duplicate detection). <paramref name="deadLetterSource"/>: for messages
    /// auto-forwarded from a dead-letter queue, the entity they were dead-lettered in (Azure's
    /// DeadLetterSource); receivers see it on every copy. <paramref name="name"/>: a send the client
    /// named, recorded with its answer in the same commit (see <see cref="Farm.ContainerStore.Containers.SendRecord"/>).
    /// </summary>
    /// <param name="with">Changes to commit in the same transaction as the messages (a send that completes what it forwards); the send takes them only into a commit of their container.</param>
    /// <param name="origin">For auto-forwarded messages: where each comes from, recorded per message with the answer (see <see cref="ForwardOrigin"/>).</param>
    Task<long[]> SendAsync(IReadOnlyList<Message> messages, string? deadLetterSource = null, SendName? name = null, CommitsWithSend? with = null, ForwardOrigin? origin = null);

    /// <summary>The commit queue of the entity's container: one transaction can span only entities that share it.</summary>
    Farm.Broker.Containers.CommitQueue Commits { get; }

    /// <summary>
    /// The answer a named send to this entity was given, when its record made at or after
    /// <paramref name="sinceMs"/> is in the container (a previous owner stored it); null otherwise.
    /// </summary>
    Task<long[]?> FindRecordedSendAsync(SendName name, long sinceMs, CancellationToken cancellationToken);

    /// <summary>Removes scheduled messages that are not visible yet.</summary>
    Task CancelScheduledAsync(IReadOnlyList<long> sequenceNumbers);
}

/// <summary>The (producer, send id) pair a client put on a send, the same on every try of it.</summary>
internal readonly record struct SendName(string ProducerId, long SendId)
{
    /// <summary>The answer recorded for this send to entity <paramref name="entityId"/> in <paramref name="database"/>, or null.</summary>
    public async Task<long[]?> FindRecordAsync(IContainerDatabase database, long entityId, long sinceMs, CancellationToken cancellationToken)
    {
        var record = await database.FindSendRecordAsync(ProducerId, SendId, sinceMs, cancellationToken).ConfigureAwait(false);
        // A pair names one send: a record of another entity is not this send's (a client reusing its ids).
        return record is not null && record.EntityId == entityId ? record.SequenceNumbers : null;
    }
}
