using Farm.ContainerStore.Containers;
using Farm.Contracts.V1;

namespace Farm.Broker.Entities;

/// <summary>
/// The MessageIds of sends an entity accepted whose commit has not ended yet. Duplicate detection
/// remembers an id when its send is accepted, before it is durable; a second send of the id must
/// not be acknowledged as a duplicate until the first one's commit succeeded, or it would be the
/// acknowledgement of a message that may never be stored. Not thread-safe: the entity calls it
/// under its own lock.
/// </summary>
internal sealed class InFlightIds
{
    /// <summary>One send's ids, and a task that completes (never faults) when its commit ended.</summary>
    internal sealed class Outcome(List<string> ids)
    {
        public List<string> Ids { get; } = ids;

        public TaskCompletionSource Ended { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
    }

    private readonly Dictionary<string, Outcome> _byId = new(StringComparer.Ordinal);

    /// <summary>The end of an earlier send that one of <paramref name="messages"/> must wait for, or null.</summary>
    public Task? WaitingFor(IReadOnlyList<Message> messages)
    {
        if (_byId.Count == 0)
        {
            return null;
        }
        foreach (var message in messages)
        {
            if (message.MessageId.Length > 0 && _byId.TryGetValue(message.MessageId, out var outcome))
            {
                return outcome.Ended.Task;
            }
        }
        return null;
    }

    /// <summary>Whether a send of this id is being committed.</summary>
    public bool Contains(string messageId) => _byId.ContainsKey(messageId);

    /// <summary>Marks the ids of a send being committed; null when it has none.</summary>
    public Outcome? Add(List<DuplicateRecord> remembered)
    {
        if (remembered.Count == 0)
        {
            return null;
        }
        var outcome = new Outcome(remembered.Select(d => d.MessageId).ToList());
        foreach (var id in outcome.Ids)
        {
            _byId[id] = outcome;
        }
        return outcome;
    }

    /// <summary>The send's commit ended (committed or failed; the caller already updated the history).</summary>
    public void Complete(Outcome? outcome)
    {
        if (outcome is null)
        {
            return;
        }
        foreach (var id in outcome.Ids)
        {
            if (_byId.TryGetValue(id, out var current) && ReferenceEquals(current, outcome))
            {
                _byId.Remove(id);
            }
        }
        outcome.Ended.TrySetResult();
    }
}
