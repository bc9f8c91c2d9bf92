namespace Farm.ContainerStore.Containers;

/// <summary>
/// A batch updated or deleted a message row that does not exist (already completed, or never
/// written), and its entity was not purged in this batch or earlier through this handle. The
/// broker's memory and the database disagree, so the whole transaction is rolled back: nothing of
/// the batch was written.
/// </summary>
public sealed class MissingRowException(string message) : Exception(message)
{
    public static MissingRowException For(string write, MessageKey key) =>
        new($"The {write} of message {key.SequenceNumber} of entity {key.EntityId} found no row: the message is gone from the container database. Nothing of the batch was written.");

    public static MissingRowException ForMany(string write, int expected, int affected, IEnumerable<MessageKey> keys) =>
        new($"The {write} of {expected} message rows found only {affected} (among entity/sequence {string.Join(", ", keys.Take(10).Select(k => $"{k.EntityId}/{k.SequenceNumber}"))}{(expected > 10 ? ", ..." : "")}): some messages are gone from the container database. Nothing of the batch was written.");
}
